//! The task-management tools (docs/tools.md): `list_my_tasks`, `create_subtask`, `inject_task`,
//! `cancel_task` — discoverable, min_role user, backed by the engine's [`TaskControl`].
//!
//! Owner, stream and role come only from the [`ToolContext`]: the argument structs have no such
//! fields and refuse unknown ones, so a forged `owner` or `role` argument is stopped by the schema
//! gate before any handler runs. Ownership and task-id resolution are `TaskControl`'s job; this
//! module must not resolve ids or compare owners itself. Results are compact (short id, title,
//! status) because they land in the model's context.

use std::sync::Arc;

use mai_core::capabilities::TaskControl;
use mai_core::role::{Role, require};
use mai_core::task::{TaskLevel, TaskRecord};
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// `list_my_tasks` shows at most this many tasks, newest first.
pub const LIST_LIMIT: u32 = 20;

const LIST_MY_TASKS: &str = "List the tasks of the person you act for (newest first) with short id, title and \
status.";
const CREATE_SUBTASK: &str = "Start a separate background task for this owner and chat, for work \
that should run on its own instead of inside this task.";
const INJECT_TASK: &str = "Add an instruction to another running or waiting task of this owner \
(by id, id prefix or title).";
const CANCEL_TASK: &str = "Cancel a task of this owner (by id, id prefix or title).";

/// The four task tools, in spec order.
pub fn task_tools(
    control: Arc<dyn TaskControl>,
) -> Result<Vec<ToolDefinition>, ToolDefinitionError> {
    Ok(vec![
        ToolDefinition::typed(
            "list_my_tasks",
            LIST_MY_TASKS,
            Visibility::Discoverable,
            Role::User,
            ListMyTasks(Arc::clone(&control)),
        )?
        .with_effects(Effect::ManagesTasks),
        ToolDefinition::typed(
            "create_subtask",
            CREATE_SUBTASK,
            Visibility::Discoverable,
            Role::User,
            CreateSubtask(Arc::clone(&control)),
        )?
        .with_effects(Effect::ManagesTasks),
        ToolDefinition::typed(
            "inject_task",
            INJECT_TASK,
            Visibility::Discoverable,
            Role::User,
            InjectTask(Arc::clone(&control)),
        )?
        .with_effects(Effect::ManagesTasks),
        ToolDefinition::typed(
            "cancel_task",
            CANCEL_TASK,
            Visibility::Discoverable,
            Role::User,
            CancelTask(control),
        )?
        .with_effects(Effect::ManagesTasks),
    ])
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListMyTasksArgs {}

struct ListMyTasks(Arc<dyn TaskControl>);

impl TypedTool for ListMyTasks {
    type Args = ListMyTasksArgs;

    async fn call(&self, ctx: &ToolContext, _args: ListMyTasksArgs) -> Result<Value, ToolError> {
        require_user(ctx)?;
        let tasks = self
            .0
            .list_own_tasks(ctx, LIST_LIMIT)
            .await
            .map_err(ToolError::new)?;
        let tasks: Vec<Value> = tasks.iter().map(summary).collect();
        Ok(json!({"success": true, "tasks": tasks}))
    }
}

/// The level names the model uses (the planner's `subagent_create` and `subagent_schedule` take
/// them too).
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    #[default]
    Agent,
    Instant,
}

impl From<Level> for TaskLevel {
    fn from(level: Level) -> Self {
        match level {
            Level::Agent => TaskLevel::Agent,
            Level::Instant => TaskLevel::Instant,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateSubtaskArgs {
    /// What the task should achieve, self-contained.
    intent: String,
    /// agent (default): its own agent loop; instant: one action such as a message.
    level: Option<Level>,
}

struct CreateSubtask(Arc<dyn TaskControl>);

impl TypedTool for CreateSubtask {
    type Args = CreateSubtaskArgs;

    async fn call(&self, ctx: &ToolContext, args: CreateSubtaskArgs) -> Result<Value, ToolError> {
        require_user(ctx)?;
        let intent = required("intent", &args.intent)?;
        let level = args.level.unwrap_or_default().into();
        let task = self
            .0
            .create_subtask(ctx, intent, level)
            .await
            .map_err(ToolError::new)?;
        Ok(done(&task))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct InjectTaskArgs {
    task_id: String,
    instruction: String,
}

struct InjectTask(Arc<dyn TaskControl>);

impl TypedTool for InjectTask {
    type Args = InjectTaskArgs;

    async fn call(&self, ctx: &ToolContext, args: InjectTaskArgs) -> Result<Value, ToolError> {
        require_user(ctx)?;
        let task_id = required("task_id", &args.task_id)?;
        let instruction = required("instruction", &args.instruction)?;
        let task = self
            .0
            .inject_task(ctx, task_id, instruction)
            .await
            .map_err(ToolError::new)?;
        Ok(done(&task))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CancelTaskArgs {
    task_id: String,
}

struct CancelTask(Arc<dyn TaskControl>);

impl TypedTool for CancelTask {
    type Args = CancelTaskArgs;

    async fn call(&self, ctx: &ToolContext, args: CancelTaskArgs) -> Result<Value, ToolError> {
        require_user(ctx)?;
        let task_id = required("task_id", &args.task_id)?;
        let task = self
            .0
            .cancel_task(ctx, task_id)
            .await
            .map_err(ToolError::new)?;
        Ok(done(&task))
    }
}

/// The registry already refuses guests; a handler reached some other way refuses them too.
fn require_user(ctx: &ToolContext) -> Result<(), ToolError> {
    require(ctx.role(), Role::User).map_err(ToolError::new)
}

fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, ToolError> {
    let value = value.trim();
    if value.is_empty() {
        Err(ToolError::new(format!("{field} is empty")))
    } else {
        Ok(value)
    }
}

fn summary(task: &TaskRecord) -> Value {
    json!({"id": task.id.short(), "title": task.title, "status": task.status.as_str()})
}

fn done(task: &TaskRecord) -> Value {
    json!({"success": true, "task": summary(task)})
}
