//! The engine's immutable dependencies in one value: what every part that runs tasks reads
//! (store, model, host, tool registry, live config, prompt templates, clock, the system's time
//! zone). A leaf: it holds
//! them and does nothing with them.

use std::sync::Arc;

use mai_core::clock::Clock;
use mai_core::config::LiveConfig;
use mai_core::host::Host;
use mai_core::model::ChatModel;
use mai_core::store::TaskStore;
use mai_core::tool::ToolRegistry;

use crate::prompts::Prompts;

/// The engine's immutable dependencies, one value shared by everything that runs tasks (the
/// agent loop, sub-agents, the reply path).
pub struct Deps {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) registry: Arc<ToolRegistry>,
    pub(crate) config: Arc<LiveConfig>,
    pub(crate) prompts: Arc<Prompts>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The system's time zone and where it was found, once at start: cron's zone when neither
    /// the task nor `[task] timezone` names one.
    pub(crate) system_zone: (chrono_tz::Tz, &'static str),
    /// Usage records waiting for their task's checkpoint, and the process's sums.
    pub(crate) meter: crate::usage::Meter,
    /// The name this instance gives itself (`[server] instance_id`, else host name and pid).
    pub(crate) instance: String,
}
