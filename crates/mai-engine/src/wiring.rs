//! Building an engine and wiring its own tools to it — the one place that knows both the engine
//! and the tools that call back into it, so neither has to import the other. The tools are
//! registered after the engine exists, with a [`ToolHandle`] on it; a reloaded config re-wires
//! the switchable ones the same way.
//!
//! Must not: hold state of its own, or do anything but assemble and re-wire.

use std::sync::Arc;

use crate::builtin_tools;
use crate::deps::Deps;
use crate::engine::{Engine, EngineDeps};
use crate::error::EngineError;
use crate::tool_handle::ToolHandle;

impl Engine {
    /// Builds the engine, then registers its own tools with a handle on it. Nothing runs until
    /// [`Engine::start`].
    pub async fn new(deps: EngineDeps) -> Result<Arc<Engine>, EngineError> {
        let instance = crate::cluster::instance_id(&deps.config.config());
        let engine = Engine::assemble(Deps {
            store: deps.store,
            model: deps.model,
            host: deps.host,
            registry: deps.registry,
            config: deps.config,
            prompts: deps.prompts,
            clock: deps.clock,
            system_zone: crate::cron::system_time_zone(),
            meter: crate::usage::Meter::default(),
            instance,
        });
        let handle = Arc::new(ToolHandle::new(&engine));
        builtin_tools::register(&engine, &handle, deps.files_root).await?;
        Ok(Arc::new(engine))
    }

    /// Applies a reloaded configuration (see docs/design.md, "Limits"): a config that does not
    /// validate changes nothing and the error says why; a valid one is swapped in atomically, the
    /// tools behind switches (shell, sub-agents, plugin APIs) follow, and a raised concurrency
    /// limit lets queued tasks start at once. Running loops see the new values from their next
    /// read.
    pub async fn reload_config(&self, config: mai_core::config::Config) -> Result<(), EngineError> {
        let budgets_before = self.config.config().limits.budgets.clone();
        let cap_before = self.cluster_cap();
        self.config
            .replace(config)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        if self.config.config().limits.budgets != budgets_before {
            self.budgets_changed().await?;
        }
        if self.cluster_cap() != cap_before {
            // Tasks parked by the old cap try their claims under the new one.
            self.schedule.cluster_slot_freed();
        }
        let handle = Arc::new(ToolHandle::new(self));
        builtin_tools::resync_switchable(self, &handle).await?;
        self.dispatch();
        Ok(())
    }
}
