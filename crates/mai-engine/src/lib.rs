//! The engine: it owns running background tasks — scheduling them (queue, slots, timers,
//! recovery), the agent loop and its checkpoints, questions to the user, sub-agents, the reply
//! path (polish, split, send), the prompt templates, and the planner channel's tools — behind
//! one facade, [`Engine`], whose task methods (create, list, inject, answer, cancel, pause,
//! resume) do every role and ownership check. Front ends use the types re-exported here; the
//! modules are private.

mod admission;
mod agent_loop;
mod board_memory;
mod builtin_tools;
mod cluster;
mod commands;
mod conversation;
mod cron;
mod deps;
mod engine;
mod error;
mod events;
mod loop_guard;
mod over_budget;
mod planner;
mod prompts;
mod reply;
mod run;
mod runner;
mod schedule;
mod scheduler;
mod splitter;
mod subagent;
mod tasks;
mod tool_handle;
mod truncate;
mod usage;
mod waiting;
mod wiring;

pub use agent_loop::MAX_TOOL_CALLS_PER_ROUND;
pub use cluster::instance_id;
pub use commands::handle_command;
pub use cron::system_time_zone;
pub use engine::{Engine, EngineDeps};
pub use error::EngineError;
pub use events::TaskEvent;
pub use planner::{
    PLANNER_TOOLS, PlannerVisibility, REFUSED_TO_PLANNER, call_planner_tool, host_context_key,
    planner_registry, planner_visibility,
};
pub use prompts::{PromptError, PromptName, Prompts};
pub use reply::part_id;
pub use runner::reply_task_id;
pub use schedule::LoadFigures;
pub use splitter::{normalize, split};
pub use subagent::{REFUSED_TO_SUBAGENTS, open_to_subagents};
pub use tasks::{Caller, CreateTask, Door, TaskHistory};
pub use usage::{usage_json, usage_line};

/// Entry points for the fuzz targets in `fuzz/` and for hostile-input tests. Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use chrono::{DateTime, Utc};

    /// How the engine validates a `cron_expr` and finds its next fire time (task creation and
    /// cron re-arm both go through this).
    pub fn next_fire(expr: &str, after: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        crate::cron::next_fire(expr, chrono_tz::Tz::UTC, after)
    }
}
