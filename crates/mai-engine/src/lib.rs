//! The engine: scheduler, agent loop, ask_user, sub-agents, reply path, task manager facade,
//! recovery; plus the reply splitter and the prompt templates.

mod admission;
mod agent_loop;
pub mod builtin_tools;
pub mod commands;
mod conversation;
mod cron;
pub mod engine;
pub mod error;
pub mod events;
pub mod manager;
pub mod planner;
pub mod prompts;
mod reply;
mod run;
pub mod runner;
mod schedule;
mod scheduler;
pub mod splitter;
pub mod subagent;
mod tool_handle;
mod truncate;
mod waiting;

pub use agent_loop::MAX_TOOL_CALLS_PER_ROUND;
pub use reply::part_id;

/// Entry points for the fuzz targets in `fuzz/` and for hostile-input tests. Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use chrono::{DateTime, Utc};

    /// How the engine validates a `cron_expr` and finds its next fire time (task creation and
    /// cron re-arm both go through this).
    pub fn next_fire(expr: &str, after: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        crate::cron::next_fire(expr, after)
    }
}
