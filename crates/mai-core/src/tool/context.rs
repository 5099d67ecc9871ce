//! What a tool handler may know about the call: the task, its owner and stream, its role, its
//! cancellation and the config snapshot it runs under.
//!
//! Identity arrives only through this value: no globals, no thread-locals. The role is read
//! through a [`RoleProvider`] bound to the task when the context is built, so a handler can ask
//! for its role but never choose it.

use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::ids::{Owner, PersonId, StreamId};
use crate::role::Role;
use crate::task::TaskId;

/// Answers "what role does this task run with right now?" — re-resolved on every call so a
/// permission change applies to running tasks.
pub trait RoleProvider: Send + Sync + 'static {
    fn role(&self) -> Role;
}

/// A role that never changes: sub-agent contexts, tests, the planner (always admin).
#[derive(Debug, Clone, Copy)]
pub struct FixedRole(pub Role);

impl RoleProvider for FixedRole {
    fn role(&self) -> Role {
        self.0
    }
}

/// The context given to every tool handler.
#[derive(Clone)]
pub struct ToolContext {
    task_id: TaskId,
    owner: Owner,
    /// The person the task acts for; `None` for a planner task made without a speaker.
    requester: Option<PersonId>,
    stream_id: StreamId,
    platform: String,
    role: Arc<dyn RoleProvider>,
    cancel: CancellationToken,
    config: Arc<Config>,
}

impl ToolContext {
    pub fn new(
        task_id: TaskId,
        owner: Owner,
        stream_id: StreamId,
        platform: impl Into<String>,
        role: Arc<dyn RoleProvider>,
        cancel: CancellationToken,
        config: Arc<Config>,
    ) -> Self {
        ToolContext {
            task_id,
            owner,
            requester: None,
            stream_id,
            platform: platform.into(),
            role,
            cancel,
            config,
        }
    }

    pub fn task_id(&self) -> TaskId {
        self.task_id
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The same context acting for `requester` (the person the task acts for).
    pub fn with_requester(mut self, requester: Option<PersonId>) -> Self {
        self.requester = requester;
        self
    }

    /// The person the task acts for: its files, the chats it may read and write, and whose
    /// tasks it may list are theirs. `None` for a planner task made without a speaker.
    pub fn requester(&self) -> Option<&PersonId> {
        self.requester.as_ref()
    }

    pub fn stream_id(&self) -> &StreamId {
        &self.stream_id
    }

    pub fn platform(&self) -> &str {
        &self.platform
    }

    /// The task's role, resolved now.
    pub fn role(&self) -> Role {
        self.role.role()
    }

    /// Cancelled when the task is cancelled, paused or the service stops.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The config snapshot this call runs under (hot reload swaps snapshots between calls).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A context for a child (a sub-agent): same identity and role, a child cancellation token.
    pub fn child(&self) -> ToolContext {
        ToolContext {
            cancel: self.cancel.child_token(),
            ..self.clone()
        }
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("task_id", &self.task_id)
            .field("owner", &self.owner)
            .field("requester", &self.requester)
            .field("stream_id", &self.stream_id)
            .field("platform", &self.platform)
            .field("role", &self.role())
            .finish_non_exhaustive()
    }
}
