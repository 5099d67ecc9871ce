//! The seven `subagent_*` planner tools: background sub-agent management over the task manager
//! facade, each confined to the current conversation's stream ([`super::isolation`]).
//!
//! Every tool is a [`SubagentTool`]: one shared preamble places the call in its stream (engine,
//! isolation check, the planner caller) and hands an [`Operation`] the [`Placed`] call; a tool
//! that names a task resolves it there once, and the facade's methods take the resolved task.
//!
//! Descriptions double as the keyword index of the host's tool search, so each says what the
//! tool is for, when to use it and how it differs from its neighbours. Must not: read or change
//! a task of another stream, or call the store directly (the facade's checks apply here too).

use std::future::Future;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use mai_core::ids::StreamId;
use mai_core::role::Role;
use mai_core::store::{HistoryEntry, TaskFilter};
use mai_core::task::{TaskLevel, TaskRecord, TaskStatus, Trigger};
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
};

use mai_tools::Reach;
use mai_tools::tasks::Level;

use super::isolation::{HostContext, current_stream, planner_caller, resolve_in_stream};
use crate::engine::Engine;
use crate::tasks::{Caller, CreateTask};

const CREATE: &str = "Start a background sub-agent: an independent AI agent that works on a job \
on its own (research, multi-step work, looking things up, a reminder or follow-up later) and \
reports the result back to this conversation when done. It is not a to-do note: the agent acts. \
Use for anything that needs more than a quick answer or must happen later (delay_seconds). \
level \"instant\" only delivers a message/reminder, without an agent. Recurring jobs: \
subagent_schedule. Existing sub-agents: subagent_list, subagent_status, subagent_modify.";
const LIST: &str = "List the background sub-agents (tasks) of this conversation: short id, \
status and title, newest first; optionally only one status (scheduled, pending, running, \
waiting_input, paused, completed, failed, cancelled). Use it to find a task's id for \
subagent_status, subagent_modify or subagent_delete, or to see which are waiting for the user.";
const STATUS: &str = "Details of one background sub-agent of this conversation: status, intent, \
schedule, the question it is waiting on, its final answer or error. Use when the user asks how a \
task is going or what it found; for the step-by-step timeline use subagent_history.";
const MODIFY: &str = "Give a background sub-agent a new instruction, or answer the question a \
waiting one asked (status waiting_input): the text reaches the agent before its next step. Use \
when the user adds requirements, corrects a running task or replies to a sub-agent's question. \
To stop a task use subagent_delete.";
const DELETE: &str = "Cancel a background sub-agent of this conversation: a running one stops at \
its next step, a scheduled or recurring one never fires again. Use when the user no longer wants \
it. Finished tasks cannot be cancelled; to change a task instead, use subagent_modify.";
const HISTORY: &str = "The timeline of one background sub-agent of this conversation: its status \
changes and the recent steps of its agent (tool calls, results, injected instructions). Use to \
explain what a task did or why it failed; for a short summary use subagent_status.";
const SCHEDULE: &str = "Schedule a recurring background sub-agent with a cron expression (5 \
fields: minute hour day month weekday, e.g. \"0 9 * * 1-5\" = weekdays at 09:00, in the \
server's time zone unless timezone names one, e.g. \"Asia/Shanghai\"): an \
independent agent runs the intent at every fire time and reports to this conversation. Use for \
daily, weekly or periodic jobs and recurring reminders; for a one-off run (now or after a delay) \
use subagent_create.";

/// How many history entries `subagent_history` returns (the latest).
const HISTORY_ENTRIES: usize = 30;
/// How many characters of each history entry `subagent_history` shows.
const ENTRY_PREVIEW_CHARS: usize = 300;
/// How many tasks `subagent_list` returns.
const LIST_LIMIT: u32 = 50;

/// The seven tools, in spec order (create, list, status, modify, delete, history, schedule).
pub(super) fn subagent_tools(engine: Engine) -> Result<Vec<ToolDefinition>, ToolDefinitionError> {
    let facade = Facade(engine);
    Ok(vec![
        tool("subagent_create", CREATE, &facade, Create)?,
        tool("subagent_list", LIST, &facade, List)?,
        tool("subagent_status", STATUS, &facade, Status)?,
        tool("subagent_modify", MODIFY, &facade, Modify)?,
        tool("subagent_delete", DELETE, &facade, Delete)?,
        tool("subagent_history", HISTORY, &facade, History)?,
        tool("subagent_schedule", SCHEDULE, &facade, Schedule)?,
    ])
}

fn tool<O: Operation>(
    name: &str,
    description: &str,
    facade: &Facade,
    operation: O,
) -> Result<ToolDefinition, ToolDefinitionError> {
    // Admin here is the channel gate every planner call passes; what a call may do is decided
    // by the facade, with the speaker's role (see `isolation`).
    ToolDefinition::typed(
        name,
        description,
        Visibility::Discoverable,
        Role::Admin,
        SubagentTool(facade.clone(), operation),
    )
    .map(|tool| tool.with_effects(Effect::ManagesTasks))
}

/// What a `subagent_*` tool does once its call is placed in its stream.
trait Operation: Send + Sync + 'static {
    type Args: DeserializeOwned + JsonSchema + InStream + Send;

    fn run(
        &self,
        call: Placed<'_>,
        args: Self::Args,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send;
}

/// The fields every `subagent_*` argument struct has: the model's stream and the host's keys.
trait InStream {
    fn stream_id(&self) -> &str;
    fn take_injected(&mut self) -> Injected;
}

macro_rules! in_stream {
    ($($args:ty),*) => {$(
        impl InStream for $args {
            fn stream_id(&self) -> &str {
                &self.stream_id
            }
            fn take_injected(&mut self) -> Injected {
                std::mem::take(&mut self.injected)
            }
        }
    )*};
}

in_stream!(CreateArgs, ScheduleArgs, ListArgs, TaskArgs, ModifyArgs);

/// A `subagent_*` tool: the shared preamble ([`Facade::enter`]), then its [`Operation`].
struct SubagentTool<O>(Facade, O);

impl<O: Operation> TypedTool for SubagentTool<O> {
    type Args = O::Args;

    async fn call(&self, ctx: &ToolContext, mut args: O::Args) -> Result<Value, ToolError> {
        let injected = args.take_injected();
        let (engine, caller) = self.0.enter(ctx, args.stream_id(), injected).await?;
        let call = Placed {
            engine,
            caller,
            ctx,
        };
        self.1.run(call, args).await
    }
}

/// A call placed in its stream: the engine, the planner caller there, and the call's context.
struct Placed<'a> {
    engine: Engine,
    caller: Caller,
    ctx: &'a ToolContext,
}

impl Placed<'_> {
    /// The task `reference` names among this stream's tasks, resolved once for the whole call.
    async fn task(&self, reference: &str) -> Result<TaskRecord, ToolError> {
        resolve_in_stream(&self.engine, &self.caller, reference)
            .await
            .map_err(failed)
    }
}

/// The host-injected keys, accepted on every call and absent from every schema.
#[derive(Debug, Default, Deserialize)]
struct Injected {
    #[serde(default)]
    chat_id: Option<String>,
    #[serde(default)]
    platform: Option<String>,
    #[serde(default)]
    group_id: Option<String>,
    /// The person the planner is talking to, when the host says.
    #[serde(default)]
    user_id: Option<String>,
}

impl From<Injected> for HostContext {
    fn from(injected: Injected) -> Self {
        HostContext {
            chat_id: injected.chat_id,
            platform: injected.platform,
            group_id: injected.group_id,
            user_id: injected.user_id,
        }
    }
}

/// The engine, as the planner tools reach it.
#[derive(Clone)]
struct Facade(Engine);

impl Facade {
    /// The engine and the planner caller of the call's stream, after the isolation check.
    /// Without the host's `chat_id` the model names the stream, so a caller below admin may
    /// name only a chat its speaker can reach (never one of someone else's).
    async fn enter(
        &self,
        ctx: &ToolContext,
        stream_id: &str,
        injected: Injected,
    ) -> Result<(Engine, Caller), ToolError> {
        let engine = self.0.clone();
        let host = HostContext::from(injected);
        let stream = current_stream(stream_id, &host)?;
        let caller = planner_caller(&engine, stream, &host).await?;
        if host.chat_id.is_none() && caller.role != Role::Admin {
            mai_tools::check_reach(engine.host.as_ref(), ctx, &caller.stream_id, Reach::Read)
                .await
                .map_err(|e| {
                    ToolError::new(format!(
                        "the host named no conversation (no chat_id), so the planner may only \
                         name a chat its speaker can reach: {}. Hosts should send chat_id and \
                         user_id with every call",
                        e.0
                    ))
                })?;
        }
        Ok((engine, caller))
    }
}

fn failed(error: impl std::fmt::Display) -> ToolError {
    ToolError::new(error)
}

fn level_of(level: Option<Level>) -> TaskLevel {
    level.unwrap_or_default().into()
}

// No doc comments on the args structs (they would become the schema's description) and no
// `deny_unknown_fields` (hosts add context keys such as `chat_id`).
#[derive(Debug, Deserialize, JsonSchema)]
struct CreateArgs {
    /// What the sub-agent should do, self-contained (it does not see this conversation).
    intent: String,
    /// The current conversation's stream id.
    stream_id: String,
    /// agent (default): an autonomous agent; instant: just deliver the intent as a message.
    level: Option<Level>,
    /// Start after this many seconds instead of now.
    delay_seconds: Option<u64>,
    /// Recurring schedule (5-field cron); prefer subagent_schedule.
    cron_expr: Option<String>,
    /// IANA time zone cron_expr is read in, e.g. "Asia/Shanghai" (default: the server's).
    timezone: Option<String>,
    /// Higher runs first when many are queued (default 0).
    priority: Option<i32>,
    /// Deliver the result to this other stream instead of the current one.
    reply_stream_id: Option<String>,
    #[schemars(skip)]
    #[serde(flatten)]
    injected: Injected,
}

struct Create;

impl Operation for Create {
    type Args = CreateArgs;

    async fn run(&self, call: Placed<'_>, args: CreateArgs) -> Result<Value, ToolError> {
        let cron = non_empty(args.cron_expr);
        let trigger = match (args.delay_seconds, cron) {
            (Some(_), Some(_)) => {
                return Err(ToolError::new(
                    "give delay_seconds or cron_expr, not both: a delay runs once, a cron \
                     expression repeats",
                ));
            }
            (Some(0) | None, None) => Trigger::Now,
            (Some(seconds), None) => Trigger::Delay { seconds },
            (None, Some(expr)) => Trigger::Cron {
                expr,
                timezone: non_empty(args.timezone),
            },
        };
        create(
            call,
            CreateTask {
                level: level_of(args.level),
                trigger,
                priority: args.priority.unwrap_or(0),
                reply_stream_id: reply_stream(args.reply_stream_id)?,
                ..CreateTask::agent(args.intent)
            },
        )
        .await
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ScheduleArgs {
    /// What the sub-agent should do at each run, self-contained.
    intent: String,
    /// The current conversation's stream id.
    stream_id: String,
    /// 5 fields: minute hour day month weekday, e.g. "0 18 * * *" (daily at 18:00).
    cron_expr: String,
    /// IANA time zone cron_expr is read in, e.g. "Asia/Shanghai" (default: the server's).
    timezone: Option<String>,
    /// agent (default) or instant (just deliver the intent as a message, e.g. a reminder).
    level: Option<Level>,
    #[schemars(skip)]
    #[serde(flatten)]
    injected: Injected,
}

struct Schedule;

impl Operation for Schedule {
    type Args = ScheduleArgs;

    async fn run(&self, call: Placed<'_>, args: ScheduleArgs) -> Result<Value, ToolError> {
        let Some(expr) = non_empty(Some(args.cron_expr)) else {
            return Err(ToolError::new(
                "cron_expr is empty; give 5 fields: minute hour day month weekday, e.g. `0 18 * * *`",
            ));
        };
        create(
            call,
            CreateTask {
                level: level_of(args.level),
                trigger: Trigger::Cron {
                    expr,
                    timezone: non_empty(args.timezone),
                },
                ..CreateTask::agent(args.intent)
            },
        )
        .await
    }
}

async fn create(call: Placed<'_>, request: CreateTask) -> Result<Value, ToolError> {
    // The task acts for the speaker (the caller's requester): it runs with their role and
    // their reply in the stream answers its questions.
    let Placed {
        engine,
        caller,
        ctx,
    } = call;
    // Delivering elsewhere is sending there: only within the speaker's reach.
    if let Some(target) = &request.reply_stream_id {
        mai_tools::check_reach(engine.host.as_ref(), ctx, target, Reach::Send).await?;
    }
    let task = engine.create(&caller, request).await.map_err(failed)?;
    let mut result = summary(&task);
    if let Some(object) = result.as_object_mut() {
        object.insert("success".into(), true.into());
        if let Some(at) = task.scheduled_at {
            object.insert("scheduled_at".into(), at.to_rfc3339().into());
        }
    }
    Ok(result)
}

fn reply_stream(value: Option<String>) -> Result<Option<StreamId>, ToolError> {
    non_empty(value)
        .map(StreamId::new)
        .transpose()
        .map_err(|e| ToolError::new(format!("reply_stream_id: {e}")))
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ListArgs {
    /// The current conversation's stream id.
    stream_id: String,
    /// Only tasks in this status: scheduled, pending, running, waiting_input, paused, completed,
    /// failed or cancelled.
    status: Option<String>,
    #[schemars(skip)]
    #[serde(flatten)]
    injected: Injected,
}

struct List;

impl Operation for List {
    type Args = ListArgs;

    async fn run(&self, call: Placed<'_>, args: ListArgs) -> Result<Value, ToolError> {
        let statuses = match non_empty(args.status) {
            Some(status) => vec![
                status
                    .to_ascii_lowercase()
                    .parse::<TaskStatus>()
                    .map_err(failed)?,
            ],
            None => Vec::new(),
        };
        let Placed { engine, caller, .. } = call;
        let filter = TaskFilter {
            stream_id: Some(caller.stream_id.clone()),
            statuses,
            limit: Some(LIST_LIMIT),
            ..TaskFilter::default()
        };
        let tasks = engine.list_stream(&caller, filter).await.map_err(failed)?;
        let tasks: Vec<Value> = tasks.iter().map(summary).collect();
        Ok(json!({"success": true, "count": tasks.len(), "tasks": tasks}))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct TaskArgs {
    /// The task's 8-character short id (from subagent_list) or full id.
    task_id: String,
    /// The current conversation's stream id.
    stream_id: String,
    #[schemars(skip)]
    #[serde(flatten)]
    injected: Injected,
}

struct Status;

impl Operation for Status {
    type Args = TaskArgs;

    async fn run(&self, call: Placed<'_>, args: TaskArgs) -> Result<Value, ToolError> {
        let task = call.task(&args.task_id).await?;
        let caller = call.caller;
        let mut result = summary(&task);
        if !caller.may_see(&task) {
            // Another person's task: how it stands and what it found — the answer only when it
            // was delivered into this conversation (one sent to another chat stays there) —
            // nothing of what it was asked or is asking (that is for its requester or an admin).
            if let Some(object) = result.as_object_mut() {
                object.insert("success".into(), true.into());
                let answered_here = task.reply_stream() == &task.stream_id;
                if let Some(answer) = task.metadata.answer.as_ref().filter(|_| answered_here) {
                    object.insert("answer".into(), answer.clone().into());
                }
                let note = if answered_here {
                    "this task acts for someone else: only its status and answer are shown"
                } else {
                    "this task acts for someone else and answers in another chat: only its \
                     status is shown"
                };
                object.insert("note".into(), note.into());
            }
            return Ok(result);
        }
        if let Some(object) = result.as_object_mut() {
            object.insert("success".into(), true.into());
            object.insert("intent".into(), task.intent.clone().into());
            object.insert("created_at".into(), task.created_at.to_rfc3339().into());
            object.insert("trigger".into(), json!(task.trigger));
            let optional = [
                ("scheduled_at", task.scheduled_at.map(|at| at.to_rfc3339())),
                (
                    "waiting_question",
                    task.metadata.waiting.as_ref().map(|w| w.question.clone()),
                ),
                ("answer", task.metadata.answer.clone()),
                ("error", task.metadata.error.clone()),
                (
                    "reply_stream_id",
                    task.reply_stream_id.as_ref().map(|s| s.to_string()),
                ),
            ];
            for (key, value) in optional {
                if let Some(value) = value {
                    object.insert(key.into(), value.into());
                }
            }
            object.insert("rounds".into(), task.metadata.rounds.into());
        }
        Ok(result)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ModifyArgs {
    /// The task's 8-character short id (from subagent_list) or full id.
    task_id: String,
    /// The new instruction, or the answer to the task's question.
    inject_instruction: String,
    /// The current conversation's stream id.
    stream_id: String,
    #[schemars(skip)]
    #[serde(flatten)]
    injected: Injected,
}

struct Modify;

impl Operation for Modify {
    type Args = ModifyArgs;

    async fn run(&self, call: Placed<'_>, args: ModifyArgs) -> Result<Value, ToolError> {
        let task = call.task(&args.task_id).await?;
        // The facade answers a waiting task and queues an instruction for a running one.
        let task = call
            .engine
            .inject_into(&call.caller, task, &args.inject_instruction)
            .await
            .map_err(failed)?;
        let applied = if task.status == TaskStatus::WaitingInput {
            "answered its question; it continues now"
        } else {
            "instruction added; applied before its next step"
        };
        Ok(json!({
            "success": true,
            "task_id": task.id.short(),
            "title": task.title,
            "result": applied,
        }))
    }
}

struct Delete;

impl Operation for Delete {
    type Args = TaskArgs;

    async fn run(&self, call: Placed<'_>, args: TaskArgs) -> Result<Value, ToolError> {
        let task = call.task(&args.task_id).await?;
        let task = call
            .engine
            .cancel_task(&call.caller, task)
            .await
            .map_err(failed)?;
        let result = if task.status == TaskStatus::Running {
            "stopping at its next step"
        } else {
            "cancelled"
        };
        Ok(json!({
            "success": true,
            "task_id": task.id.short(),
            "title": task.title,
            "result": result,
        }))
    }
}

struct History;

impl Operation for History {
    type Args = TaskArgs;

    async fn run(&self, call: Placed<'_>, args: TaskArgs) -> Result<Value, ToolError> {
        let task = call.task(&args.task_id).await?;
        if !call.caller.may_see(&task) {
            return Err(ToolError::new(format!(
                "task {} acts for someone else: its history is for its requester or an admin; \
                 subagent_status shows how it stands",
                task.id.short()
            )));
        }
        let history = call.engine.history_of(task).await.map_err(failed)?;
        let status_log: Vec<Value> = history
            .status_log
            .iter()
            .map(|change| {
                json!({
                    "at": change.at.to_rfc3339(),
                    "status": change.status.as_str(),
                    "by": change.actor,
                    "reason": change.reason,
                })
            })
            .collect();
        let skipped = history.entries.len().saturating_sub(HISTORY_ENTRIES);
        let steps: Vec<Value> = history.entries[skipped..].iter().map(step).collect();
        Ok(json!({
            "success": true,
            "task_id": history.task.id.short(),
            "title": history.task.title,
            "status": history.task.status.as_str(),
            "status_log": status_log,
            "steps": steps,
            "earlier_steps_omitted": skipped,
        }))
    }
}

/// One history entry, shortened for the planner's context.
fn step(entry: &HistoryEntry) -> Value {
    let payload = &entry.payload;
    let text = match payload.get("content").and_then(Value::as_str) {
        Some(content) if !content.is_empty() => content.to_owned(),
        _ => match payload.get("tool_calls").and_then(Value::as_array) {
            Some(calls) => calls
                .iter()
                .filter_map(|call| {
                    let function = call.get("function").unwrap_or(call);
                    function.get("name").and_then(Value::as_str)
                })
                .map(|name| format!("calls {name}"))
                .collect::<Vec<_>>()
                .join(", "),
            None => payload.to_string(),
        },
    };
    json!({
        "round": entry.round,
        "kind": entry.kind.as_str(),
        "role": payload.get("role").cloned().unwrap_or(Value::Null),
        "text": crate::truncate::head_tail(&text, ENTRY_PREVIEW_CHARS),
    })
}

/// The one-line view of a task every tool shares.
fn summary(task: &TaskRecord) -> Value {
    json!({
        "task_id": task.id.short(),
        "id": task.id.to_string(),
        "title": task.title,
        "status": task.status.as_str(),
        "level": match task.level {
            TaskLevel::Instant => "instant",
            TaskLevel::Agent => "agent",
        },
    })
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}
