//! The engine: scheduler, agent loop, ask_user, sub-agents, reply path, task manager facade,
//! recovery; plus the reply splitter and the prompt templates.

mod agent_loop;
pub mod builtin_tools;
pub mod commands;
mod conversation;
pub mod engine;
pub mod error;
pub mod events;
pub mod manager;
pub mod planner;
mod planner_board;
pub mod prompts;
mod reply;
pub mod runner;
mod scheduler;
pub mod splitter;
pub mod subagent;
mod tool_capabilities;
mod truncate;
mod waiting;
