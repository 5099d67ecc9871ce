//! The agent-loop tools (task management, information, `send_message`, plugin APIs) through the
//! registry, as the agent loop calls them, against recording fakes. Most tests are attacks: each
//! asserts the refusal and that nothing reached the host, the task control or the reply path.

#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod budget;
mod fakes;
mod info;
mod plugin_api;
mod send_message;
mod tasks;
