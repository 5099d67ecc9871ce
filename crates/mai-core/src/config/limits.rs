//! `[planner]` and `[limits]`: how much authority a planner call without a speaker has, and the
//! structural caps that keep one person or one chat from flooding the service with tasks.
//!
//! Plain data with safe defaults; the engine enforces them at every door that creates work.

use serde::{Deserialize, Serialize};

use crate::role::Role;

/// `[planner]`: the planner channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// The role of a planner call whose host names no speaker (no `user_id`), and of the tasks
    /// it creates (they have no requester). Only the operator sets it.
    pub default_role: Role,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            default_role: Role::User,
        }
    }
}

/// `[limits]`: caps on task creation. They apply to admins too; reply tasks are exempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// How deep sub-tasks may nest: a task made by `create_subtask` of a task made by ... (a
    /// task created by a person or the planner has depth 0).
    pub max_depth: u32,
    /// How many sub-tasks one task may ever create.
    pub max_children: u32,
    /// Unfinished tasks (scheduled, pending, running, waiting, paused) one requester may have.
    pub max_active_per_requester: u32,
    /// Unfinished tasks one stream may have.
    pub max_active_per_stream: u32,
    /// Unfinished recurring (cron) tasks one requester may have.
    pub max_cron_per_requester: u32,
    /// Unfinished recurring (cron) tasks one stream may have.
    pub max_cron_per_stream: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_depth: 2,
            max_children: 5,
            max_active_per_requester: 10,
            max_active_per_stream: 50,
            max_cron_per_requester: 5,
            max_cron_per_stream: 20,
        }
    }
}
