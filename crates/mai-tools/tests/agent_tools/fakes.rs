//! Test doubles for the host, the engine's task control and the reply path. Each one records
//! every call, so a test can assert what reached it — and, for refusals, that nothing did.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use mai_core::capabilities::{Messenger, TaskControl};
use mai_core::config::Config;
use mai_core::host::{
    ChatLine, ChatTarget, Delivery, Host, HostError, Jargon, MemoryQuery, Person, Persona,
    PluginApi, StreamInfo, UserHit, UserQuery,
};
use mai_core::ids::{PersonId, StreamId};
use mai_core::role::Role;
use mai_core::task::{NewTask, TaskId, TaskLevel, TaskRecord, TaskStatus, Trigger};
use mai_core::tool::{FixedRole, ToolContext, ToolDefinition, ToolOutcome, ToolRegistry};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The task's identity in every test: owner `qq:42` in stream `s1` on `qq`.
pub const OWNER: &str = "qq:42";
pub const STREAM: &str = "s1";
pub const PLATFORM: &str = "qq";

/// The person the task acts for in [`ctx_for`] (the owner, as for a task a person asked for).
pub const REQUESTER: &str = "qq:42";

/// A task that acts for no one (no requester).
pub fn ctx(role: Role) -> ToolContext {
    ctx_with(role, Config::default())
}

/// A task acting for `requester`.
pub fn ctx_for(role: Role, requester: &str) -> ToolContext {
    ctx(role).with_requester(Some(requester.parse().unwrap()))
}

pub fn ctx_with(role: Role, config: Config) -> ToolContext {
    ToolContext::new(
        TaskId::new(),
        OWNER.parse().unwrap(),
        StreamId::new(STREAM).unwrap(),
        PLATFORM,
        Arc::new(FixedRole(role)),
        CancellationToken::new(),
        Arc::new(config),
    )
}

pub fn registry(tools: impl IntoIterator<Item = ToolDefinition>) -> ToolRegistry {
    let registry = ToolRegistry::new();
    for tool in tools {
        registry.register(tool);
    }
    registry
}

/// Runs a call the way the agent loop does: the role given to the gate is the context's role.
pub async fn call(
    registry: &ToolRegistry,
    ctx: &ToolContext,
    name: &str,
    args: Value,
) -> ToolOutcome {
    registry.execute(name, ctx.role(), args, ctx).await
}

pub fn error_of(outcome: &ToolOutcome) -> String {
    outcome.error_message().unwrap_or_default().to_owned()
}

/// What reached the host.
#[derive(Debug, Clone, PartialEq)]
pub enum HostCall {
    SearchMemory(MemoryQuery),
    Recent(String, usize),
    FindPerson(String),
    SearchUsers(UserQuery),
    Frequency(String),
    OpenStream(String, ChatTarget),
    ListApis,
    CallApi(String, Value),
    Send(String, String),
    IsMember(String, String),
    StreamInfo(String),
    DisplayName(String),
}

impl HostCall {
    /// Calls that read a chat's messages or send to one (not the reach check's questions).
    pub fn touches_content(&self) -> bool {
        matches!(
            self,
            HostCall::SearchMemory(_) | HostCall::Recent(..) | HostCall::Send(..)
        )
    }
}

#[derive(Default)]
pub struct FakeHost {
    pub calls: Mutex<Vec<HostCall>>,
    /// Every capability fails while set.
    pub failing: AtomicBool,
    pub apis: Vec<PluginApi>,
    /// `(person, stream)`: who the host has seen in which group.
    pub members: Mutex<Vec<(String, String)>>,
    /// `(person, display name)`.
    pub names: Mutex<Vec<(String, String)>>,
}

impl FakeHost {
    pub fn with_apis(apis: Vec<PluginApi>) -> Arc<Self> {
        Arc::new(FakeHost {
            apis,
            ..FakeHost::default()
        })
    }

    pub fn calls(&self) -> Vec<HostCall> {
        self.calls.lock().unwrap().clone()
    }

    /// Records `person` as seen in the group `stream`.
    pub fn join(&self, person: &str, stream: &str) {
        self.members
            .lock()
            .unwrap()
            .push((person.to_owned(), stream.to_owned()));
    }

    pub fn name(&self, person: &str, name: &str) {
        self.names
            .lock()
            .unwrap()
            .push((person.to_owned(), name.to_owned()));
    }

    pub fn fail(&self) {
        self.failing.store(true, Ordering::SeqCst);
    }

    fn record(&self, call: HostCall) -> Result<(), HostError> {
        self.calls.lock().unwrap().push(call);
        if self.failing.load(Ordering::SeqCst) {
            Err(HostError::new("reach the chat store", "connection refused"))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Host for FakeHost {
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError> {
        self.record(HostCall::Send(stream.to_string(), text.to_owned()))?;
        Ok(Delivery::Sent)
    }

    async fn append_context(&self, _stream: &StreamId, _note: &str) -> Result<(), HostError> {
        Ok(())
    }

    async fn recent_messages(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ChatLine>, HostError> {
        self.record(HostCall::Recent(stream.to_string(), limit))?;
        Ok((0..limit.min(100))
            .map(|i| ChatLine {
                sender: format!("p{i}"),
                text: format!("line {i}"),
                at: Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap(),
            })
            .collect())
    }

    async fn jargon(&self, _stream: &StreamId, _text: &str) -> Result<Vec<Jargon>, HostError> {
        Ok(Vec::new())
    }

    async fn persona(&self) -> Persona {
        Persona::default()
    }

    /// Group membership from `members`; private chats are left to the reach check's fallback
    /// (`stream_info`), as a host without membership of private chats would.
    async fn is_member(&self, person: &PersonId, stream: &StreamId) -> Result<bool, HostError> {
        let (person, stream) = (person.to_string(), stream.to_string());
        self.record(HostCall::IsMember(person.clone(), stream.clone()))?;
        Ok(self.members.lock().unwrap().contains(&(person, stream)))
    }

    async fn display_name(&self, person: &PersonId) -> Result<Option<String>, HostError> {
        self.record(HostCall::DisplayName(person.to_string()))?;
        let names = self.names.lock().unwrap();
        let person = person.to_string();
        Ok(names
            .iter()
            .find(|(p, _)| *p == person)
            .map(|(_, n)| n.clone()))
    }

    /// The streams `open_stream` makes: `platform:group:id` and `platform:private:user`.
    async fn stream_info(&self, stream: &StreamId) -> Result<Option<StreamInfo>, HostError> {
        self.record(HostCall::StreamInfo(stream.to_string()))?;
        let parts: Vec<&str> = stream.as_str().split(':').collect();
        let target = match parts.as_slice() {
            [_, "group", id] => ChatTarget::Group {
                group_id: (*id).to_owned(),
            },
            [_, "private", id] => ChatTarget::Private {
                user_id: (*id).to_owned(),
            },
            _ => return Ok(None),
        };
        Ok(Some(StreamInfo {
            stream_id: stream.clone(),
            platform: parts[0].to_owned(),
            target,
            name: stream.to_string(),
        }))
    }

    async fn open_stream(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        self.record(HostCall::OpenStream(platform.to_owned(), target.clone()))?;
        let id = match target {
            ChatTarget::Group { group_id } => format!("{platform}:group:{group_id}"),
            ChatTarget::Private { user_id } => format!("{platform}:private:{user_id}"),
        };
        Ok(StreamId::new(id).unwrap())
    }

    async fn find_person(&self, name: &str) -> Result<Option<Person>, HostError> {
        self.record(HostCall::FindPerson(name.to_owned()))?;
        Ok((name == "Alice").then(|| Person {
            name: "Alice".into(),
            aliases: vec!["Ali".into()],
            accounts: vec![("qq".into(), "1001".into())],
            notes: vec!["likes cake".into()],
        }))
    }

    async fn search_users(&self, query: &UserQuery) -> Result<Vec<UserHit>, HostError> {
        self.record(HostCall::SearchUsers(query.clone()))?;
        // More hits than any cap, so the tool's cap is what limits the answer.
        Ok((0..40)
            .map(|i| UserHit {
                stream: StreamInfo {
                    stream_id: StreamId::new(format!("qq:private:{i}")).unwrap(),
                    platform: "qq".into(),
                    target: ChatTarget::Private {
                        user_id: i.to_string(),
                    },
                    name: format!("user {i}"),
                },
                matched: query.keywords.first().cloned().unwrap_or_default(),
            })
            .collect())
    }

    async fn search_memory(&self, query: &MemoryQuery) -> Result<Value, HostError> {
        self.record(HostCall::SearchMemory(query.clone()))?;
        Ok(json!([{"text": format!("about {}", query.query)}]))
    }

    async fn talk_frequency(&self, stream: &StreamId) -> Result<Option<f64>, HostError> {
        self.record(HostCall::Frequency(stream.to_string()))?;
        Ok((stream.as_str() == STREAM).then_some(0.5))
    }

    async fn list_apis(&self) -> Result<Vec<PluginApi>, HostError> {
        self.record(HostCall::ListApis)?;
        Ok(self.apis.clone())
    }

    async fn call_api(&self, name: &str, args: Value) -> Result<Value, HostError> {
        self.record(HostCall::CallApi(name.to_owned(), args.clone()))?;
        Ok(json!({"echo": args}))
    }
}

/// What reached the task control, with the identity the context carried.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlCall {
    pub method: &'static str,
    pub owner: String,
    pub stream: String,
    pub role: Role,
    /// The method's own arguments, in order.
    pub args: Vec<String>,
}

#[derive(Default)]
pub struct FakeControl {
    pub calls: Mutex<Vec<ControlCall>>,
    /// The error every method returns while set.
    pub refuse: Mutex<Option<String>>,
}

impl FakeControl {
    pub fn calls(&self) -> Vec<ControlCall> {
        self.calls.lock().unwrap().clone()
    }

    fn record(
        &self,
        ctx: &ToolContext,
        method: &'static str,
        args: Vec<String>,
    ) -> Result<(), String> {
        self.calls.lock().unwrap().push(ControlCall {
            method,
            owner: ctx.owner().to_string(),
            stream: ctx.stream_id().to_string(),
            role: ctx.role(),
            args,
        });
        match self.refuse.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

pub fn record(ctx: &ToolContext, title: &str, level: TaskLevel, status: TaskStatus) -> TaskRecord {
    let spec = NewTask {
        title: title.into(),
        intent: format!("intent of {title}"),
        level,
        owner: ctx.owner().clone(),
        stream_id: ctx.stream_id().clone(),
        platform: ctx.platform().into(),
        reply_stream_id: None,
        trigger: Trigger::Now,
        priority: 0,
        max_runtime_min: 0,
    };
    TaskRecord::new(spec, status, "test", Utc::now())
}

#[async_trait]
impl TaskControl for FakeControl {
    async fn list_own_tasks(
        &self,
        ctx: &ToolContext,
        limit: u32,
    ) -> Result<Vec<TaskRecord>, String> {
        self.record(ctx, "list", vec![limit.to_string()])?;
        Ok(vec![
            record(
                ctx,
                "water the plants",
                TaskLevel::Agent,
                TaskStatus::Running,
            ),
            record(ctx, "remind Bob", TaskLevel::Instant, TaskStatus::Completed),
        ])
    }

    async fn create_subtask(
        &self,
        ctx: &ToolContext,
        intent: &str,
        level: TaskLevel,
    ) -> Result<TaskRecord, String> {
        self.record(ctx, "create", vec![intent.to_owned(), format!("{level:?}")])?;
        Ok(record(ctx, intent, level, TaskStatus::Pending))
    }

    async fn inject_task(
        &self,
        ctx: &ToolContext,
        task: &str,
        instruction: &str,
    ) -> Result<TaskRecord, String> {
        self.record(ctx, "inject", vec![task.to_owned(), instruction.to_owned()])?;
        Ok(record(ctx, task, TaskLevel::Agent, TaskStatus::Running))
    }

    async fn cancel_task(&self, ctx: &ToolContext, task: &str) -> Result<TaskRecord, String> {
        self.record(ctx, "cancel", vec![task.to_owned()])?;
        Ok(record(ctx, task, TaskLevel::Agent, TaskStatus::Cancelled))
    }
}

/// One delivery through the reply path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub stream: String,
    pub text: String,
    pub polish: bool,
    pub split: bool,
}

#[derive(Default)]
pub struct FakeMessenger {
    pub deliveries: Mutex<Vec<Delivered>>,
}

impl FakeMessenger {
    pub fn deliveries(&self) -> Vec<Delivered> {
        self.deliveries.lock().unwrap().clone()
    }
}

#[async_trait]
impl Messenger for FakeMessenger {
    async fn deliver(
        &self,
        _ctx: &ToolContext,
        stream: &StreamId,
        text: &str,
        polish: bool,
        split: bool,
    ) -> Result<Vec<String>, String> {
        self.deliveries.lock().unwrap().push(Delivered {
            stream: stream.to_string(),
            text: text.to_owned(),
            polish,
            split,
        });
        Ok(vec![text.to_owned()])
    }
}
