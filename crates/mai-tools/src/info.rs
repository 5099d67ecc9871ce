//! The information tools (docs/tools.md): `search_memory`, `fetch_history`, `query_person`,
//! `search_users`, `get_frequency` — discoverable, min_role guest, all backed by the [`Host`].
//!
//! Owns argument checking (times, limits, which chat) and the compact result shapes. Limits are
//! capped by `[search] max_results` from the call's config snapshot. A `chat_id` defaults to the
//! task's own stream. `search_memory` and `fetch_history` read a chat's messages, so the chat must
//! be within the task's reach ([`crate::reach`]: its own stream and its requester's chats, all for
//! an admin). `get_frequency` reads a setting, not what was said: only a guest is kept to its own
//! chat. `query_person` and `search_users` take no chat and return no messages (names, ids and the
//! notes kept about a person). Must not invent data: what the host does not know comes back as
//! "not found", host failures as errors saying what to do.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use mai_core::host::{ChatTarget, Host, HostError, MemoryMode, MemoryQuery, StreamInfo, UserQuery};
use mai_core::ids::StreamId;
use mai_core::role::{Role, require};
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::reach::{Reach, check_reach};

/// `fetch_history` returns at most this many messages, whatever `[search] max_results` says.
pub const MAX_HISTORY: u32 = 50;

const SEARCH_MEMORY: &str = "Search long-term memory (past chat messages and notes) by \
keywords, person or time. Use it to recall what was said or decided; for the latest messages of a \
chat use fetch_history.";
const FETCH_HISTORY: &str = "The latest messages of a chat, oldest first. Use it to catch up on a \
conversation; to find older things by keyword use search_memory.";
const QUERY_PERSON: &str = "What is known about one person, by exact name or alias. For partial \
names or to find someone to message, use search_users.";
const SEARCH_USERS: &str = "Find people and groups by name, nickname or id (any keyword may \
match; none lists recent chats). Returns the stream_id/user_id/group_id that send_message takes.";
const GET_FREQUENCY: &str = "The bot's current talk-frequency value in a chat (how often it \
joins in).";

/// The five information tools, in spec order.
pub fn info_tools(host: Arc<dyn Host>) -> Result<Vec<ToolDefinition>, ToolDefinitionError> {
    Ok(vec![
        ToolDefinition::typed(
            "search_memory",
            SEARCH_MEMORY,
            Visibility::Discoverable,
            Role::Guest,
            SearchMemory(Arc::clone(&host)),
        )?
        .with_effects(Effect::ReadsChats),
        ToolDefinition::typed(
            "fetch_history",
            FETCH_HISTORY,
            Visibility::Discoverable,
            Role::Guest,
            FetchHistory(Arc::clone(&host)),
        )?
        .with_effects(Effect::ReadsChats),
        ToolDefinition::typed(
            "query_person",
            QUERY_PERSON,
            Visibility::Discoverable,
            Role::Guest,
            QueryPerson(Arc::clone(&host)),
        )?
        .with_effects(Effect::ReadsChats),
        ToolDefinition::typed(
            "search_users",
            SEARCH_USERS,
            Visibility::Discoverable,
            Role::Guest,
            SearchUsers(Arc::clone(&host)),
        )?
        .with_effects(Effect::ReadsChats),
        ToolDefinition::typed(
            "get_frequency",
            GET_FREQUENCY,
            Visibility::Discoverable,
            Role::Guest,
            GetFrequency(host),
        )?
        .with_effects(Effect::ReadsChats),
    ])
}

/// `search_memory` modes as the model names them.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Mode {
    #[default]
    Hybrid,
    Search,
    Time,
    Episode,
    Aggregate,
}

impl From<Mode> for MemoryMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Hybrid => MemoryMode::Hybrid,
            Mode::Search => MemoryMode::Search,
            Mode::Time => MemoryMode::Time,
            Mode::Episode => MemoryMode::Episode,
            Mode::Aggregate => MemoryMode::Aggregate,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchMemoryArgs {
    query: String,
    /// Default: this chat.
    chat_id: Option<String>,
    /// Default 5.
    #[schemars(transform = count)]
    limit: Option<u32>,
    /// hybrid (default); search: by relevance; time: all in the time window; episode: whole
    /// conversations around hits; aggregate: counts per person and day.
    mode: Option<Mode>,
    person_name: Option<String>,
    /// RFC 3339, e.g. 2025-01-31T18:00:00+08:00.
    time_start: Option<String>,
    /// RFC 3339.
    time_end: Option<String>,
}

struct SearchMemory(Arc<dyn Host>);

impl TypedTool for SearchMemory {
    type Args = SearchMemoryArgs;

    async fn call(&self, ctx: &ToolContext, args: SearchMemoryArgs) -> Result<Value, ToolError> {
        let stream = chat_to_read(self.0.as_ref(), ctx, args.chat_id.as_deref()).await?;
        let time_start = parse_time("time_start", args.time_start.as_deref())?;
        let time_end = parse_time("time_end", args.time_end.as_deref())?;
        if let (Some(start), Some(end)) = (time_start, time_end)
            && start > end
        {
            return Err(ToolError::new(format!(
                "time_start ({start}) is after time_end ({end}); swap them"
            )));
        }
        let mode = args.mode.unwrap_or_default();
        if args.query.trim().is_empty() && !matches!(mode, Mode::Time) {
            return Err(ToolError::new(
                "query is empty; give keywords, or use mode \"time\" with time_start/time_end",
            ));
        }
        let limit = Limit::new(ctx, args.limit, 5, u32::MAX);
        let query = MemoryQuery {
            query: args.query.trim().to_owned(),
            stream: Some(stream.clone()),
            mode: mode.into(),
            person_name: non_empty(args.person_name),
            time_start,
            time_end,
            limit: limit.value as usize,
        };
        let results = self.0.search_memory(&query).await.map_err(|e| {
            host_failed(
                e,
                "memory search is unavailable; go on without it or retry later",
            )
        })?;
        Ok(limit.annotate(json!({
            "success": true,
            "chat_id": stream.as_str(),
            "results": results,
        })))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FetchHistoryArgs {
    /// Default: this chat.
    chat_id: Option<String>,
    /// Default 20, at most 50.
    #[schemars(transform = count)]
    limit: Option<u32>,
}

struct FetchHistory(Arc<dyn Host>);

impl TypedTool for FetchHistory {
    type Args = FetchHistoryArgs;

    async fn call(&self, ctx: &ToolContext, args: FetchHistoryArgs) -> Result<Value, ToolError> {
        let stream = chat_to_read(self.0.as_ref(), ctx, args.chat_id.as_deref()).await?;
        let limit = Limit::new(ctx, args.limit, 20, MAX_HISTORY);
        let lines = self
            .0
            .recent_messages(&stream, limit.value as usize)
            .await
            .map_err(|e| host_failed(e, "check the chat_id (search_users lists chats)"))?;
        let messages: Vec<Value> = lines
            .iter()
            .map(|line| json!({"at": line.at.to_rfc3339(), "sender": line.sender, "text": line.text}))
            .collect();
        Ok(limit.annotate(json!({
            "success": true,
            "chat_id": stream.as_str(),
            "messages": messages,
        })))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct QueryPersonArgs {
    person_name: String,
}

struct QueryPerson(Arc<dyn Host>);

impl TypedTool for QueryPerson {
    type Args = QueryPersonArgs;

    async fn call(&self, _ctx: &ToolContext, args: QueryPersonArgs) -> Result<Value, ToolError> {
        let name = args.person_name.trim();
        if name.is_empty() {
            return Err(ToolError::new(
                "person_name is empty; give the person's name",
            ));
        }
        let person = self
            .0
            .find_person(name)
            .await
            .map_err(|e| host_failed(e, "people lookup is unavailable; retry later"))?;
        let Some(person) = person else {
            return Err(ToolError::new(format!(
                "no one named `{name}` is known (names match exactly); try search_users with \
                 part of the name"
            )));
        };
        let accounts: Vec<String> = person
            .accounts
            .iter()
            .map(|(platform, user_id)| format!("{platform}:{user_id}"))
            .collect();
        Ok(json!({
            "success": true,
            "name": person.name,
            "aliases": person.aliases,
            "accounts": accounts,
            "notes": person.notes,
        }))
    }
}

/// Which chats `search_users` looks for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChatType {
    Group,
    Private,
}

// The search both channels offer (the planner's `search_users` takes exactly this; the agent
// loop's adds `keywords`). No doc comment: it would become the schema's description.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct UserSearch {
    /// A name, nickname or id (part of it is enough).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword: Option<String>,
    /// Default: both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_type: Option<ChatType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchUsersArgs {
    #[serde(flatten)]
    search: UserSearch,
    /// Any of them may match.
    keywords: Option<Vec<String>>,
}

struct SearchUsers(Arc<dyn Host>);

impl TypedTool for SearchUsers {
    type Args = SearchUsersArgs;

    async fn call(&self, ctx: &ToolContext, args: SearchUsersArgs) -> Result<Value, ToolError> {
        let SearchUsersArgs { search, keywords } = args;
        let given = keywords;
        let mut keywords: Vec<String> = Vec::new();
        for keyword in search
            .keyword
            .into_iter()
            .chain(given.into_iter().flatten())
        {
            let keyword = keyword.trim();
            if !keyword.is_empty() && !keywords.iter().any(|k| k == keyword) {
                keywords.push(keyword.to_owned());
            }
        }
        // No keyword (the planner's schema makes it optional): the most recently active chats.
        let query = UserQuery {
            keywords,
            chat_type: search.chat_type.map(|t| match t {
                ChatType::Group => "group".to_owned(),
                ChatType::Private => "private".to_owned(),
            }),
            platform: non_empty(search.platform),
            limit: ctx.config().search.max_results.max(1) as usize,
        };
        let hits = self
            .0
            .search_users(&query)
            .await
            .map_err(|e| host_failed(e, "user search is unavailable; retry later"))?;
        let found: Vec<Value> = hits
            .iter()
            .take(query.limit)
            .map(|hit| {
                let mut entry = stream_entry(&hit.stream);
                if let Some(object) = entry.as_object_mut() {
                    object.insert("matched".into(), hit.matched.clone().into());
                }
                entry
            })
            .collect();
        Ok(json!({"success": true, "found": found}))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetFrequencyArgs {
    /// Default: this chat.
    chat_id: Option<String>,
}

struct GetFrequency(Arc<dyn Host>);

impl TypedTool for GetFrequency {
    type Args = GetFrequencyArgs;

    async fn call(&self, ctx: &ToolContext, args: GetFrequencyArgs) -> Result<Value, ToolError> {
        let stream = chat_of(ctx, args.chat_id.as_deref())?;
        if require(ctx.role(), Role::User).is_err() && &stream != ctx.stream_id() {
            return Err(ToolError::new(format!(
                "a guest task may only read its own chat; leave chat_id out (this chat is `{}`)",
                ctx.stream_id()
            )));
        }
        let frequency = self
            .0
            .talk_frequency(&stream)
            .await
            .map_err(|e| host_failed(e, "check the chat_id or retry later"))?;
        Ok(match frequency {
            Some(value) => json!({"success": true, "chat_id": stream.as_str(), "frequency": value}),
            None => json!({
                "success": true,
                "chat_id": stream.as_str(),
                "frequency": null,
                "note": "the host keeps no talk frequency for this chat",
            }),
        })
    }
}

/// The chat a call is about: the given `chat_id`, else the task's stream.
fn chat_of(ctx: &ToolContext, chat_id: Option<&str>) -> Result<StreamId, ToolError> {
    match chat_id.map(str::trim).filter(|c| !c.is_empty()) {
        Some(chat_id) => StreamId::new(chat_id).map_err(ToolError::new),
        None => Ok(ctx.stream_id().clone()),
    }
}

/// The chat whose messages a call reads: [`chat_of`], refused unless the task may read it.
async fn chat_to_read(
    host: &dyn Host,
    ctx: &ToolContext,
    chat_id: Option<&str>,
) -> Result<StreamId, ToolError> {
    let stream = chat_of(ctx, chat_id)?;
    check_reach(host, ctx, &stream, Reach::Read).await?;
    Ok(stream)
}

/// A result count: the requested (or default) value, capped by a hard maximum and by
/// `[search] max_results`; remembers whether it was cut so the model can be told.
struct Limit {
    value: u32,
    capped_from: Option<u32>,
}

impl Limit {
    fn new(ctx: &ToolContext, requested: Option<u32>, default: u32, hard_max: u32) -> Limit {
        let cap = hard_max.min(ctx.config().search.max_results).max(1);
        let wanted = requested.unwrap_or(default).max(1);
        Limit {
            value: wanted.min(cap),
            capped_from: requested.filter(|&r| r > cap),
        }
    }

    fn annotate(&self, mut result: Value) -> Value {
        if let (Some(asked), Some(object)) = (self.capped_from, result.as_object_mut()) {
            object.insert(
                "note".into(),
                format!("limit {asked} lowered to the maximum of {}", self.value).into(),
            );
        }
        result
    }
}

/// A count in the schema: at least 1, without the `format`/`minimum: 0` schemars derives for
/// `u32` (tokens on every request that tell the model nothing).
fn count(schema: &mut schemars::Schema) {
    schema.remove("format");
    schema.insert("minimum".into(), 1.into());
}

fn parse_time(field: &str, value: Option<&str>) -> Result<Option<DateTime<Utc>>, ToolError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    DateTime::parse_from_rfc3339(value)
        .map(|t| Some(t.with_timezone(&Utc)))
        .map_err(|e| {
            ToolError::new(format!(
                "{field} `{value}` is not an RFC 3339 time ({e}); write e.g. \
                 2025-01-31T18:00:00+08:00 or 2025-01-31T10:00:00Z"
            ))
        })
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// A stream as `send_message` targets it: stream_id plus the group_id or user_id.
fn stream_entry(stream: &StreamInfo) -> Value {
    match &stream.target {
        ChatTarget::Group { group_id } => json!({
            "stream_id": stream.stream_id.as_str(),
            "platform": stream.platform,
            "name": stream.name,
            "group_id": group_id,
        }),
        ChatTarget::Private { user_id } => json!({
            "stream_id": stream.stream_id.as_str(),
            "platform": stream.platform,
            "name": stream.name,
            "user_id": user_id,
        }),
    }
}

fn host_failed(error: HostError, what_to_do: &str) -> ToolError {
    ToolError::new(format!("{error}; {what_to_do}"))
}
