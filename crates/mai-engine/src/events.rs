//! What happens to tasks, as a stream of events: the CLI prints them as live progress, tests wait
//! on them instead of sleeping, and metrics count them.
//!
//! Events are best-effort notifications (a slow subscriber may miss some); the store is the
//! source of truth.

use serde::Serialize;
use tokio::sync::broadcast;

use mai_core::ids::StreamId;
use mai_core::task::{TaskId, TaskStatus};

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TaskEvent {
    Created {
        task_id: TaskId,
        title: String,
        /// The task that made it (a sub-task's or reply task's parent), so a viewer can nest
        /// it under its parent as it appears; `null` for a task made by a person or program.
        parent_task_id: Option<TaskId>,
    },
    Status {
        task_id: TaskId,
        status: TaskStatus,
        reason: String,
    },
    Round {
        task_id: TaskId,
        round: u32,
    },
    ToolCall {
        task_id: TaskId,
        round: u32,
        tool: String,
        arguments: String,
    },
    ToolResult {
        task_id: TaskId,
        round: u32,
        tool: String,
        ok: bool,
        preview: String,
    },
    Question {
        task_id: TaskId,
        question: String,
    },
    Answer {
        task_id: TaskId,
        text: String,
    },
    Sent {
        task_id: TaskId,
        stream_id: StreamId,
        text: String,
    },
    /// On a shared store: the task was created or changed through the store (by another
    /// instance, or by this one), and this instance read it again on the store's notice. The
    /// status is the one it read; a viewer reads the task again. It is the only event an
    /// instance gives of what another instance does.
    Changed {
        task_id: TaskId,
        status: TaskStatus,
    },
}

impl TaskEvent {
    pub fn task_id(&self) -> TaskId {
        match self {
            TaskEvent::Created { task_id, .. }
            | TaskEvent::Status { task_id, .. }
            | TaskEvent::Round { task_id, .. }
            | TaskEvent::ToolCall { task_id, .. }
            | TaskEvent::ToolResult { task_id, .. }
            | TaskEvent::Question { task_id, .. }
            | TaskEvent::Answer { task_id, .. }
            | TaskEvent::Sent { task_id, .. }
            | TaskEvent::Changed { task_id, .. } => *task_id,
        }
    }
}

/// The engine's event fan-out.
#[derive(Debug, Clone)]
pub struct Events {
    sender: broadcast::Sender<TaskEvent>,
}

impl Events {
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(4096);
        Events { sender }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.sender.subscribe()
    }

    pub(crate) fn emit(&self, event: TaskEvent) {
        // No subscriber is fine: events are notifications, not state.
        let _ = self.sender.send(event);
    }
}

impl Default for Events {
    fn default() -> Self {
        Self::new()
    }
}
