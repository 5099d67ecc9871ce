//! The engine: everything between a task record and a message in a chat — for now the reply
//! splitter and the prompt templates; the scheduler and the agent loop live here too.

pub mod prompts;
pub mod splitter;
