//! `[planner]`, `[limits]` and `[prices]`: how much authority a planner call without a speaker
//! has, the structural caps that keep one person or one chat from flooding the service with
//! tasks, the daily budgets (tasks, tokens, cost) per requester and per stream, and the price
//! of each model.
//!
//! Plain data with safe defaults (every budget unlimited); the engine enforces them at every
//! door that creates work and at each round boundary.

use std::collections::BTreeMap;

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// `[limits.budgets]`: daily budgets per requester and per stream (unlimited by default).
    pub budgets: BudgetsConfig,
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
            budgets: BudgetsConfig::default(),
        }
    }
}

/// What a task that reaches a budget while it runs becomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetAction {
    /// Paused until the budget resets (or an operator raises it), then resumed from its
    /// checkpoint.
    #[default]
    Pause,
    /// Failed, with the budget as its error.
    Fail,
}

/// One set of daily budgets. A missing figure is unlimited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    /// Tasks created per day (reply tasks are not counted).
    pub tasks_per_day: Option<u64>,
    /// Prompt plus completion tokens per day, over every purpose (agent, sub-agent, title,
    /// polish).
    pub tokens_per_day: Option<u64>,
    /// Cost per day in `[prices] currency` (models without a price cost nothing).
    pub cost_per_day: Option<f64>,
}

impl Budget {
    /// `self` with every figure `over` sets replaced by it.
    pub fn overridden_by(&self, over: Option<&Budget>) -> Budget {
        let Some(over) = over else {
            return self.clone();
        };
        Budget {
            tasks_per_day: over.tasks_per_day.or(self.tasks_per_day),
            tokens_per_day: over.tokens_per_day.or(self.tokens_per_day),
            cost_per_day: over.cost_per_day.or(self.cost_per_day),
        }
    }

    /// Whether any figure is set.
    pub fn is_limited(&self) -> bool {
        self.tasks_per_day.is_some() || self.tokens_per_day.is_some() || self.cost_per_day.is_some()
    }

    /// Whether a token or cost figure is set (what a run is checked against).
    pub fn limits_spending(&self) -> bool {
        self.tokens_per_day.is_some() || self.cost_per_day.is_some()
    }
}

/// `[limits.budgets]`: daily budgets. A requester's budget is the default of their role in the
/// task's stream, with the figures of `people."<platform:user_id>"` over it; a stream's is
/// `stream`, with `streams."<stream_id>"` over it. A day is a calendar day in `[task] timezone`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetsConfig {
    /// What a running task that reaches a budget becomes.
    pub on_exceeded: BudgetAction,
    /// Admins' own tasks are not counted against any budget (planner tasks always are).
    pub admins_exempt: bool,
    /// Per-requester defaults by role.
    pub guest: Budget,
    pub user: Budget,
    pub admin: Budget,
    /// Every stream's default.
    pub stream: Budget,
    /// Per-person overrides, keyed `platform:user_id`.
    pub people: BTreeMap<String, Budget>,
    /// Per-stream overrides, keyed by stream id.
    pub streams: BTreeMap<String, Budget>,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig {
            on_exceeded: BudgetAction::Pause,
            admins_exempt: true,
            guest: Budget::default(),
            user: Budget::default(),
            admin: Budget::default(),
            stream: Budget::default(),
            people: BTreeMap::new(),
            streams: BTreeMap::new(),
        }
    }
}

impl BudgetsConfig {
    /// The budget of `person` with `role` (their defaults, then their own overrides).
    pub fn for_person(&self, person: &str, role: Role) -> Budget {
        let default = match role {
            Role::Guest => &self.guest,
            Role::User => &self.user,
            Role::Admin => &self.admin,
        };
        default.overridden_by(self.people.get(person))
    }

    /// The budget of the stream `stream_id`.
    pub fn for_stream(&self, stream_id: &str) -> Budget {
        self.stream.overridden_by(self.streams.get(stream_id))
    }

    /// Whether any budget is configured at all (when none is, nothing is counted).
    pub fn any(&self) -> bool {
        [&self.guest, &self.user, &self.admin, &self.stream]
            .into_iter()
            .chain(self.people.values())
            .chain(self.streams.values())
            .any(Budget::is_limited)
    }

    /// Whether any token or cost budget is configured (a run checks spending only then).
    pub fn any_spending(&self) -> bool {
        [&self.guest, &self.user, &self.admin, &self.stream]
            .into_iter()
            .chain(self.people.values())
            .chain(self.streams.values())
            .any(Budget::limits_spending)
    }
}

/// `[prices]`: what each model costs, per million tokens, in one currency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PricesConfig {
    /// The currency of every price and cost (a label: `USD`, `CNY`, …).
    pub currency: String,
    /// Prices by model name (as in `[llm.models]`).
    pub models: BTreeMap<String, ModelPrice>,
}

impl Default for PricesConfig {
    fn default() -> Self {
        PricesConfig {
            currency: "USD".into(),
            models: BTreeMap::new(),
        }
    }
}

/// `[prices.models."<name>"]`: per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelPrice {
    /// Prompt tokens not served from the provider's cache.
    pub input: f64,
    /// Prompt tokens served from the cache; the `input` price when unset.
    pub cached_input: Option<f64>,
    /// Completion tokens.
    pub output: f64,
}
