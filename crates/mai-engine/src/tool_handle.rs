//! The handle the engine's tools hold: it implements the capabilities agent-loop tools use
//! (`TaskControl`, `Messenger`) as thin adapters onto the task facade and the reply path, so
//! every tool goes through the same ownership checks and delivery as the front ends.
//!
//! It is made after the engine and reaches it through the engine's tool slot, which the engine
//! empties when it stops (see `ToolSlot` in `engine.rs`).
//! Must not: decide anything itself — every check is the facade's.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use mai_core::capabilities::{Messenger, TaskControl};
use mai_core::ids::StreamId;
use mai_core::store::TaskFilter;
use mai_core::task::{TaskLevel, TaskRecord};
use mai_core::tool::ToolContext;

use crate::engine::{Engine, ToolSlot};
use crate::run::lock;
use crate::tasks::{Caller, CreateTask, Door};

/// `TaskControl` and `Messenger` for the engine's tools (see the module comment).
pub(crate) struct ToolHandle {
    slot: ToolSlot,
}

impl ToolHandle {
    /// A handle on `engine` through its tool slot.
    pub(crate) fn new(engine: &Engine) -> Self {
        ToolHandle {
            slot: engine.tool_slot().clone(),
        }
    }

    /// A handle on an engine that is never emptied (the planner's: its registry is its front
    /// end's, not the engine's, so holding the engine is no cycle).
    pub(crate) fn holding(engine: Engine) -> Self {
        ToolHandle {
            slot: Arc::new(Mutex::new(Some(engine))),
        }
    }

    /// The engine, unless it stopped.
    pub(crate) fn engine(&self) -> Result<Engine, String> {
        lock(&self.slot)
            .clone()
            .ok_or_else(|| "the engine is stopping".to_owned())
    }

    /// The calling task as a facade caller: acting for the task's requester with the task's
    /// role, identity from the task, never from arguments.
    async fn caller(engine: &Engine, ctx: &ToolContext) -> Result<Caller, String> {
        let group_id = engine
            .store
            .get(ctx.task_id())
            .await
            .map_err(|e| e.to_string())?
            .and_then(|task| task.metadata.group_id);
        Ok(Caller {
            owner: ctx.owner().clone(),
            requester: ctx.requester().cloned(),
            role: ctx.role(),
            stream_id: ctx.stream_id().clone(),
            platform: ctx.platform().to_owned(),
            group_id,
            door: Door::Task,
        })
    }
}

#[async_trait]
impl TaskControl for ToolHandle {
    async fn list_own_tasks(
        &self,
        ctx: &ToolContext,
        limit: u32,
    ) -> Result<Vec<TaskRecord>, String> {
        let engine = self.engine()?;
        let caller = Self::caller(&engine, ctx).await?;
        // Keyed by requester: every planner task of a stream shares one owner.
        let filter = match ctx.requester() {
            Some(person) => TaskFilter {
                requester: Some(person.clone()),
                limit: Some(limit),
                ..TaskFilter::default()
            },
            None => TaskFilter {
                owner: Some(ctx.owner().clone()),
                limit: Some(limit),
                ..TaskFilter::default()
            },
        };
        engine
            .list(&caller, filter)
            .await
            .map_err(|e| e.to_string())
    }

    async fn create_subtask(
        &self,
        ctx: &ToolContext,
        intent: &str,
        level: TaskLevel,
    ) -> Result<TaskRecord, String> {
        let engine = self.engine()?;
        let caller = Self::caller(&engine, ctx).await?;
        let request = CreateTask {
            level,
            parent_task_id: Some(ctx.task_id()),
            ..CreateTask::agent(intent)
        };
        engine
            .create(&caller, request)
            .await
            .map_err(|e| e.to_string())
    }

    async fn inject_task(
        &self,
        ctx: &ToolContext,
        task: &str,
        instruction: &str,
    ) -> Result<TaskRecord, String> {
        let engine = self.engine()?;
        let caller = Self::caller(&engine, ctx).await?;
        engine
            .inject(&caller, task, instruction)
            .await
            .map_err(|e| e.to_string())
    }

    async fn cancel_task(&self, ctx: &ToolContext, task: &str) -> Result<TaskRecord, String> {
        let engine = self.engine()?;
        let caller = Self::caller(&engine, ctx).await?;
        engine
            .cancel(&caller, task)
            .await
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Messenger for ToolHandle {
    async fn deliver(
        &self,
        ctx: &ToolContext,
        stream: &StreamId,
        text: &str,
        polish: bool,
        split: bool,
    ) -> Result<Vec<String>, String> {
        let engine = self.engine()?;
        let served = crate::usage::Served::context(ctx, 0);
        let parts = engine
            .prepare_parts(&served, stream, text, polish, split)
            .await;
        if parts.is_empty() {
            return Err("the message is empty".to_owned());
        }
        // A message of its own: no earlier send of it exists to collide with, so a fresh key;
        // its retries share the part ids.
        let key = format!("{}:msg:{}", ctx.task_id(), uuid::Uuid::now_v7());
        for (index, part) in parts.iter().enumerate() {
            engine
                .send_with_retries(
                    ctx.task_id(),
                    stream,
                    part,
                    &crate::reply::part_id(&key, index),
                    None,
                )
                .await?;
        }
        Ok(parts)
    }
}
