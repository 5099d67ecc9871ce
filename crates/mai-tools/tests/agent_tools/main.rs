//! The agent-loop tools of SYSTEM.md §5.1, §5.2, §5.5 and §5.6 through the registry, as the agent
//! loop calls them, against recording fakes. Most tests are attacks: each asserts the refusal
//! and that nothing reached the host, the task control or the reply path.

#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod budget;
mod fakes;
mod info;
mod plugin_api;
mod send_message;
mod tasks;
