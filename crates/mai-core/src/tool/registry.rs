//! The tool registry: who may see and run which tool.
//!
//! Reads are lock-free and cheap: every change rebuilds an immutable snapshot holding, per role,
//! the ready-made lists the agent loop presents each round, and swaps it in atomically. A running
//! loop therefore sees either the old or the new tool set, never a half-applied change. Writes
//! are rare (start-up, MCP reloads) and serialized by a mutex.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use futures::FutureExt;
use serde_json::Value;

use super::context::ToolContext;
use super::definition::{ToolDefinition, Visibility};
use super::outcome::{OutcomeKind, ToolOutcome};
use super::validation::check_arguments;
use crate::role::{Role, require};

/// What one role sees: built once per change, shared by every reader.
#[derive(Debug, Default)]
struct RoleView {
    names: Arc<[String]>,
    essential: Arc<[Arc<ToolDefinition>]>,
    discoverable: Arc<[Arc<ToolDefinition>]>,
    presented: Arc<[Arc<ToolDefinition>]>,
}

#[derive(Debug, Default)]
struct Snapshot {
    /// Registration order; a replaced tool keeps its place.
    tools: Vec<Arc<ToolDefinition>>,
    index: HashMap<String, usize>,
    views: [RoleView; 3],
}

impl Snapshot {
    fn build(tools: Vec<Arc<ToolDefinition>>) -> Snapshot {
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, tool)| (tool.name().to_owned(), i))
            .collect();
        let views = Role::ALL.map(|role| {
            let usable = || {
                tools
                    .iter()
                    .filter(move |t| require(role, t.min_role()).is_ok())
            };
            let essential: Arc<[_]> = usable()
                .filter(|t| t.visibility() == Visibility::Essential)
                .cloned()
                .collect();
            let discoverable: Arc<[_]> = usable()
                .filter(|t| t.visibility() == Visibility::Discoverable)
                .cloned()
                .collect();
            let presented: Arc<[_]> = essential
                .iter()
                .chain(discoverable.iter())
                .cloned()
                .collect();
            RoleView {
                names: usable().map(|t| t.name().to_owned()).collect(),
                essential,
                discoverable,
                presented,
            }
        });
        Snapshot {
            tools,
            index,
            views,
        }
    }
}

/// A batch of changes applied as one atomic swap (see [`ToolRegistry::edit`]).
#[derive(Debug)]
pub struct RegistryEdit {
    tools: Vec<Arc<ToolDefinition>>,
}

impl RegistryEdit {
    /// Adds `tool`, replacing (in place) a tool of the same name. Returns the replaced tool.
    pub fn register(&mut self, tool: ToolDefinition) -> Option<Arc<ToolDefinition>> {
        let tool = Arc::new(tool);
        match self.tools.iter_mut().find(|t| t.name() == tool.name()) {
            Some(slot) => Some(std::mem::replace(slot, tool)),
            None => {
                self.tools.push(tool);
                None
            }
        }
    }

    /// Removes the tool called `name`; returns it if it was there.
    pub fn unregister(&mut self, name: &str) -> Option<Arc<ToolDefinition>> {
        let position = self.tools.iter().position(|t| t.name() == name)?;
        Some(self.tools.remove(position))
    }

    /// Puts `tools` right after the tool called `anchor` (at the end if there is none), in the
    /// given order; a tool of the same name elsewhere is removed first.
    pub fn insert_after(&mut self, anchor: &str, tools: Vec<ToolDefinition>) {
        for tool in &tools {
            self.unregister(tool.name());
        }
        let at = self
            .tools
            .iter()
            .position(|t| t.name() == anchor)
            .map_or(self.tools.len(), |i| i + 1);
        self.tools.splice(at..at, tools.into_iter().map(Arc::new));
    }

    /// Keeps only the tools for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&ToolDefinition) -> bool) {
        self.tools.retain(|t| keep(t));
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name())
    }
}

/// The registry of agent-loop tools.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    snapshot: ArcSwap<Snapshot>,
    writer: Mutex<()>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a batch of changes and publishes them as one new snapshot.
    pub fn edit<R>(&self, change: impl FnOnce(&mut RegistryEdit) -> R) -> R {
        // A poisoned lock only means another writer panicked mid-edit; its edit was never
        // published, so the current snapshot is still consistent.
        let _guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut edit = RegistryEdit {
            tools: self.snapshot.load().tools.clone(),
        };
        let result = change(&mut edit);
        self.snapshot.store(Arc::new(Snapshot::build(edit.tools)));
        result
    }

    /// Adds a tool; a tool of the same name is replaced. Returns the replaced tool.
    pub fn register(&self, tool: ToolDefinition) -> Option<Arc<ToolDefinition>> {
        self.edit(|e| e.register(tool))
    }

    /// Removes a tool; returns it if it was registered.
    pub fn unregister(&self, name: &str) -> Option<Arc<ToolDefinition>> {
        self.edit(|e| e.unregister(name))
    }

    pub fn get(&self, name: &str) -> Option<Arc<ToolDefinition>> {
        let snapshot = self.snapshot.load();
        snapshot
            .index
            .get(name)
            .map(|&i| Arc::clone(&snapshot.tools[i]))
    }

    pub fn len(&self) -> usize {
        self.snapshot.load().tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every registered tool in registration order, regardless of role (for admin views).
    pub fn all(&self) -> Vec<Arc<ToolDefinition>> {
        self.snapshot.load().tools.clone()
    }

    /// Names of the tools `role` may use, in registration order.
    pub fn names(&self, role: Role) -> Arc<[String]> {
        Arc::clone(&self.snapshot.load().views[role.index()].names)
    }

    /// The essential tools `role` may use.
    pub fn list_essential(&self, role: Role) -> Arc<[Arc<ToolDefinition>]> {
        Arc::clone(&self.snapshot.load().views[role.index()].essential)
    }

    /// The discoverable tools `role` may use.
    pub fn list_discoverable(&self, role: Role) -> Arc<[Arc<ToolDefinition>]> {
        Arc::clone(&self.snapshot.load().views[role.index()].discoverable)
    }

    /// What the agent loop puts in each request for `role`: essential, then discoverable.
    pub fn presented(&self, role: Role) -> Arc<[Arc<ToolDefinition>]> {
        Arc::clone(&self.snapshot.load().views[role.index()].presented)
    }

    /// The first two gates without running anything: the tool exists, `role` may use it, and
    /// `args` match its schema. Returns the tool and the arguments as a handler would get them,
    /// or the refusal as a result for the model. The agent loop uses this for the tools it
    /// handles itself (`ask_user`), so they pass the very same gates.
    pub fn admit(
        &self,
        name: &str,
        role: Role,
        args: Value,
    ) -> Result<(Arc<ToolDefinition>, Value), ToolOutcome> {
        let Some(tool) = self.get(name) else {
            return Err(ToolOutcome::error(
                OutcomeKind::UnknownTool,
                self.unknown_tool_message(name, role),
            ));
        };
        if let Err(denied) = require(role, tool.min_role()) {
            return Err(ToolOutcome::error(
                OutcomeKind::PermissionDenied,
                format!(
                    "permission denied: tool `{name}` requires role {}, this task runs as {}",
                    denied.required, denied.actual
                ),
            ));
        }
        match check_arguments(name, tool.validator(), args) {
            Ok(args) => Ok((tool, args)),
            Err(message) => Err(ToolOutcome::error(OutcomeKind::InvalidArguments, message)),
        }
    }

    /// Runs a tool call for a task of `role`: the execution gate, argument validation, then the
    /// handler. Every refusal and failure is a result for the model; the handler runs only if
    /// the role may use the tool and the arguments match its schema.
    pub async fn execute(
        &self,
        name: &str,
        role: Role,
        args: Value,
        ctx: &ToolContext,
    ) -> ToolOutcome {
        let (tool, args) = match self.admit(name, role, args) {
            Ok(admitted) => admitted,
            Err(refusal) => return refusal,
        };
        let call = tool.handler().call(ctx, args);
        match AssertUnwindSafe(call).catch_unwind().await {
            Ok(Ok(value)) => ToolOutcome::ok(value),
            Ok(Err(error)) => ToolOutcome::error(
                OutcomeKind::Failed,
                format!("tool `{name}` failed: {error}"),
            ),
            Err(_) => ToolOutcome::error(
                OutcomeKind::Failed,
                format!("tool `{name}` crashed (a bug in the tool); try another way"),
            ),
        }
    }

    /// "unknown tool" plus the closest names this role may use — never names above the role.
    fn unknown_tool_message(&self, name: &str, role: Role) -> String {
        let names = self.names(role);
        let candidates = names
            .iter()
            .map(String::as_str)
            .chain(super::discovery::SYNTHETIC_NAMES);
        let closest = closest_names(name, candidates, 3);
        if closest.is_empty() {
            format!("unknown tool `{name}`; call one of the tools listed in this request")
        } else {
            let list = closest
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("unknown tool `{name}`; did you mean {list}?")
        }
    }
}

/// Up to `max` candidates most similar to `name`, best first; none below a similarity floor.
fn closest_names<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
    max: usize,
) -> Vec<&'a str> {
    let wanted = name.to_ascii_lowercase();
    let mut scored: Vec<(f64, &str)> = candidates
        .map(|candidate| {
            let lower = candidate.to_ascii_lowercase();
            let mut score = strsim::jaro_winkler(&wanted, &lower);
            if lower.contains(&wanted) || wanted.contains(&lower) {
                score = score.max(0.9);
            }
            (score, candidate)
        })
        .filter(|(score, _)| *score >= 0.75)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(max).map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_names_prefers_near_misses() {
        let names = [
            "search_memory",
            "fetch_history",
            "send_message",
            "read",
            "write",
        ];
        assert_eq!(
            closest_names("search_memroy", names.into_iter(), 3)[0],
            "search_memory"
        );
        assert_eq!(
            closest_names("history", names.into_iter(), 3),
            ["fetch_history"]
        );
        assert!(closest_names("zzzz", names.into_iter(), 3).is_empty());
    }
}
