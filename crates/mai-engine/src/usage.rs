//! Usage recording: every model call the engine makes (agent rounds, sub-agents, titles, polish)
//! becomes one [`UsageRecord`] — the provider's token counts, or an estimate marked as such when
//! it sent none — with the task, round and purpose it served, its latency and its cost from
//! `[prices]`.
//!
//! A round's record waits in [`Meter`] until the task's next checkpoint, which writes it in the
//! same transaction (no write of its own on the hot path); whatever a run leaves is written when
//! the run ends. Titles and polish are written at once (once per task or delivery, not per
//! round). The meter also keeps the process's running sums by model and purpose for the
//! metrics. Must not: decide budgets (`admission.rs` does) or write anything but usage.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use chrono::{DateTime, Utc};

use mai_core::model::{ChatRequest, ChatResponse, Usage};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use mai_core::tool::ToolContext;
use mai_core::usage::{UsagePurpose, UsageRecord, UsageTotals, cost_of, estimate_tokens};

use crate::deps::Deps;
use crate::engine::Engine;
use crate::run::lock;

/// Whom a model call served.
#[derive(Debug, Clone)]
pub(crate) struct Served {
    pub task_id: Option<TaskId>,
    pub owner: String,
    pub requester: Option<String>,
    pub stream_id: String,
    pub round: u32,
    /// Held for the task's next write (a call made while the task runs) instead of written at
    /// once.
    pub held: bool,
}

impl Served {
    /// A task's call. A reply task's polish is counted for the task whose answer it delivers.
    pub(crate) fn task(task: &TaskRecord) -> Served {
        let id = match (task.metadata.is_reply, task.metadata.parent_task_id) {
            (true, Some(parent)) => parent,
            _ => task.id,
        };
        Served {
            task_id: Some(id),
            owner: task.owner.to_string(),
            requester: task.requester().map(ToString::to_string),
            stream_id: task.stream_id.to_string(),
            round: task.metadata.rounds,
            held: false,
        }
    }

    /// A call made inside a task's tool call (sub-agents, `send_message`).
    pub(crate) fn context(ctx: &ToolContext, round: u32) -> Served {
        Served {
            task_id: Some(ctx.task_id()),
            owner: ctx.owner().to_string(),
            requester: ctx.requester().map(ToString::to_string),
            stream_id: ctx.stream_id().to_string(),
            round,
            held: false,
        }
    }
}

/// How many records a running task's checkpoints carry in its record before one of them writes
/// them to the usage table: a usage row touches six pages (the row and five indexes) in the
/// write of the checkpoint that carries it, rows written together share most of them, so
/// writing them several rounds at a time keeps a round's checkpoint small; the record carries
/// at most this many less one (about 200 bytes each, see `mai_core::usage::carried`).
pub(crate) const WRITE_EVERY: usize = 8;

/// Records not yet in the usage table, by task, and the process's sums for metrics.
#[derive(Default)]
pub struct Meter {
    pending: Mutex<HashMap<TaskId, Vec<UsageRecord>>>,
    sums: Mutex<BTreeMap<(String, UsagePurpose), UsageTotals>>,
}

impl Meter {
    /// Keeps `record` until a save of its task writes it (a record without a task is the
    /// caller's to write).
    pub(crate) fn hold(&self, record: UsageRecord) {
        self.count(&record);
        if let Some(id) = record.task_id {
            lock(&self.pending).entry(id).or_default().push(record);
        }
    }

    /// Adds `record` to the process's sums (every record passes here once).
    pub(crate) fn count(&self, record: &UsageRecord) {
        let mut sums = lock(&self.sums);
        let sum = sums
            .entry((record.model.clone(), record.purpose))
            .or_default();
        sum.add(&UsageTotals {
            key: None,
            prompt_tokens: record.prompt_tokens,
            completion_tokens: record.completion_tokens,
            cached_tokens: record.cached_tokens,
            calls: 1,
            estimated_calls: u64::from(record.estimated),
            cost: record.cost.unwrap_or(0.0),
        });
    }

    /// What a save of `task` is to write to the usage table: every record held for it once the
    /// save ends its run (`task` no longer `running`) or [`WRITE_EVERY`] are held — then the
    /// record's copy is emptied. Otherwise nothing, and `task` carries a copy of what is held
    /// (`metadata.usage_unwritten`), so the save makes them durable all the same. The records
    /// stay held until [`Meter::written`].
    pub(crate) fn stage(&self, task: &mut TaskRecord) -> Vec<UsageRecord> {
        let held = lock(&self.pending)
            .get(&task.id)
            .cloned()
            .unwrap_or_default();
        if task.status != TaskStatus::Running || held.len() >= WRITE_EVERY {
            task.metadata.usage_unwritten.clear();
            held
        } else {
            task.metadata.usage_unwritten = held;
            Vec::new()
        }
    }

    /// Forgets the held records of `task` that a committed write stored.
    pub(crate) fn written(&self, task: TaskId, records: &[UsageRecord]) {
        if records.is_empty() {
            return;
        }
        let mut pending = lock(&self.pending);
        if let Some(held) = pending.get_mut(&task) {
            held.retain(|record| !records.iter().any(|written| written.id == record.id));
            if held.is_empty() {
                pending.remove(&task);
            }
        }
    }

    /// The records held for `task`, taken out (the caller writes them).
    pub(crate) fn take(&self, task: TaskId) -> Vec<UsageRecord> {
        lock(&self.pending).remove(&task).unwrap_or_default()
    }

    /// The records not yet in the usage table that `requester` (or, with `None`, the
    /// stream `stream`) spent since `since`: the budgets count them too, so a tool call in the
    /// round that crossed a budget already sees it.
    pub(crate) fn waiting_sum(
        &self,
        requester: Option<&str>,
        stream: &str,
        since: DateTime<Utc>,
    ) -> UsageTotals {
        let mut sum = UsageTotals::default();
        for record in lock(&self.pending).values().flatten() {
            let matches = match requester {
                Some(person) => record.requester.as_deref() == Some(person),
                None => record.stream_id == stream,
            };
            if matches && record.at >= since {
                sum.add(&UsageTotals {
                    prompt_tokens: record.prompt_tokens,
                    completion_tokens: record.completion_tokens,
                    cached_tokens: record.cached_tokens,
                    calls: 1,
                    cost: record.cost.unwrap_or(0.0),
                    ..UsageTotals::default()
                });
            }
        }
        sum
    }

    /// The sums since the process started, by model and purpose.
    pub fn sums(&self) -> Vec<(String, UsagePurpose, UsageTotals)> {
        lock(&self.sums)
            .iter()
            .map(|((model, purpose), sum)| (model.clone(), *purpose, sum.clone()))
            .collect()
    }
}

/// The record of one answered model call.
pub(crate) fn record_of(
    deps: &Deps,
    served: &Served,
    purpose: UsagePurpose,
    request: &ChatRequest,
    response: &ChatResponse,
    started: Instant,
) -> UsageRecord {
    let config = deps.config.config();
    let model = config.llm.models.for_purpose(request.purpose).to_owned();
    let (usage, estimated) = match response.usage {
        Some(usage) => (usage, false),
        None => (estimate(request, response), true),
    };
    let at = deps.clock.now();
    UsageRecord {
        // Time-ordered, so the records written together share the index's last page.
        id: uuid::Uuid::now_v7(),
        at,
        day: budget_day(deps, at).0,
        task_id: served.task_id,
        round: served.round,
        purpose,
        cost: cost_of(&config.prices, &model, &usage),
        model,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        cached_tokens: usage.cached_tokens,
        estimated,
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        owner: served.owner.clone(),
        requester: served.requester.clone(),
        stream_id: served.stream_id.clone(),
    }
}

/// Token counts estimated from the texts, for a provider that reports none.
fn estimate(request: &ChatRequest, response: &ChatResponse) -> Usage {
    let prompt: u64 = request
        .messages
        .iter()
        .map(|m| estimate_tokens(&m.content) + 4)
        .sum::<u64>()
        + request
            .tools
            .iter()
            .map(|t| estimate_tokens(&t.description) + estimate_tokens(&t.name) + 8)
            .sum::<u64>();
    let completion = estimate_tokens(&response.message.content)
        + response
            .message
            .tool_calls
            .iter()
            .map(|c| estimate_tokens(&c.arguments.to_string()) + estimate_tokens(&c.name))
            .sum::<u64>();
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        cached_tokens: 0,
    }
}

/// The budget day `at` falls in — a calendar day in `[task] timezone`, else the system's
/// zone — with the instants it starts and ends (when a daily budget resets).
pub(crate) fn budget_day(
    deps: &Deps,
    at: DateTime<Utc>,
) -> (chrono::NaiveDate, DateTime<Utc>, DateTime<Utc>) {
    let zone = deps
        .config
        .config()
        .task
        .timezone
        .as_deref()
        .and_then(|name| mai_core::time_zone::parse_time_zone(name).ok())
        .unwrap_or(deps.system_zone.0);
    let day = at.with_timezone(&zone).date_naive();
    let start_of = |date: chrono::NaiveDate| {
        let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default();
        // A zone whose midnight is skipped (a DST jump) starts the day at the first instant.
        midnight
            .and_local_timezone(zone)
            .earliest()
            .map_or_else(|| at, |start| start.with_timezone(&Utc))
    };
    let next = day.succ_opt().unwrap_or(day);
    (day, start_of(day), start_of(next))
}

impl Engine {
    /// Writes what `task`'s runs left unwritten (a run's last call, records put back after a
    /// conflict). A failure is logged: usage is bookkeeping and never fails a task.
    pub(crate) async fn flush_usage(&self, task: TaskId) {
        let records = self.meter.take(task);
        if records.is_empty() {
            return;
        }
        if let Err(error) = self.store.record_usage(&records).await {
            tracing::error!(%task, %error, "could not record model usage");
        }
    }

    /// Records a call made outside a round (a title, a polish) at once.
    pub(crate) async fn record_usage_now(&self, record: UsageRecord) {
        self.meter.count(&record);
        if let Err(error) = self.store.record_usage(std::slice::from_ref(&record)).await {
            tracing::error!(%error, "could not record model usage");
        }
    }
}

/// `at` as people in `[task] timezone` read it, with the zone's name.
pub(crate) fn local_time(deps: &Deps, at: DateTime<Utc>) -> String {
    let config = deps.config.config();
    let zone = config
        .task
        .timezone
        .as_deref()
        .and_then(|name| mai_core::time_zone::parse_time_zone(name).ok())
        .unwrap_or(deps.system_zone.0);
    format!(
        "{} ({})",
        at.with_timezone(&zone).format("%Y-%m-%d %H:%M"),
        zone.name()
    )
}

impl Engine {
    /// The process's usage sums by model and purpose, since it started (for the metrics).
    pub fn usage_sums(&self) -> Vec<(String, UsagePurpose, UsageTotals)> {
        self.meter.sums()
    }

    /// The currency of every cost (`[prices] currency`).
    pub fn currency(&self) -> String {
        self.config.config().prices.currency.clone()
    }

    /// What task `id`'s model calls cost so far (its sub-agents, title and reply polish
    /// included).
    pub async fn task_usage(&self, id: TaskId) -> Result<UsageTotals, crate::EngineError> {
        let query = mai_core::usage::UsageQuery {
            task: Some(id),
            ..Default::default()
        };
        Ok(self.store.usage(&query).await?.pop().unwrap_or_default())
    }

    /// Usage sums the caller may see: an admin any; anyone else only the calls made for them
    /// (`requester` is forced to the caller's person, and nobody else's figures are read).
    /// Returns the groups and their total.
    pub async fn usage(
        &self,
        caller: &crate::Caller,
        mut query: mai_core::usage::UsageQuery,
    ) -> Result<(Vec<UsageTotals>, UsageTotals), crate::EngineError> {
        if caller.role != mai_core::role::Role::Admin {
            let Some(person) = &caller.requester else {
                return Err(crate::EngineError::PermissionDenied(
                    "usage figures are shown to admins and to the person they were spent for; \
                     this caller acts for nobody"
                        .into(),
                ));
            };
            query.requester = Some(person.to_string());
        }
        let groups = self.store.usage(&query).await?;
        let mut total = UsageTotals::default();
        for group in &groups {
            total.add(group);
        }
        let groups = if query.group_by.is_some() {
            groups
        } else {
            Vec::new()
        };
        Ok((groups, total))
    }

    /// The start of today (a budget day in `[task] timezone`), for "today's usage".
    pub fn start_of_today(&self) -> DateTime<Utc> {
        budget_day(self, self.now()).1
    }
}

impl Engine {
    /// A time a person gives for a usage range: RFC 3339 (`2026-12-04T08:00:00Z`), a date
    /// (`2026-12-04`: the start of that day in `[task] timezone`) or `today`.
    pub fn parse_usage_time(&self, text: &str) -> Result<DateTime<Utc>, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("today") {
            return Ok(self.start_of_today());
        }
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return Ok(at.with_timezone(&Utc));
        }
        match chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
            Ok(date) => {
                let noon = date.and_hms_opt(12, 0, 0).unwrap_or_default().and_utc();
                // The day containing that date's noon in the zone starts at its midnight.
                let (day, start, _) = budget_day(self, noon);
                Ok(if day == date {
                    start
                } else {
                    date.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc()
                })
            }
            Err(_) => Err(format!(
                "`{text}` is not a time: give RFC 3339 (2026-12-04T08:00:00Z), a date \
                 (2026-12-04, read in [task] timezone) or `today`"
            )),
        }
    }
}

/// Usage sums as JSON, the cost in `currency` beside the tokens.
pub fn usage_json(totals: &UsageTotals, currency: &str) -> serde_json::Value {
    let mut value = serde_json::json!({
        "prompt_tokens": totals.prompt_tokens,
        "completion_tokens": totals.completion_tokens,
        "cached_tokens": totals.cached_tokens,
        "calls": totals.calls,
        "estimated_calls": totals.estimated_calls,
        "cost": totals.cost,
        "currency": currency,
    });
    if let Some(key) = &totals.key {
        value["key"] = serde_json::Value::String(key.clone());
    }
    value
}

/// One line of usage for people: tokens, calls and cost.
pub fn usage_line(totals: &UsageTotals, currency: &str) -> String {
    let estimated = if totals.estimated_calls > 0 {
        format!(", {} estimated", totals.estimated_calls)
    } else {
        String::new()
    };
    format!(
        "{} tokens ({} prompt, {} cached, {} completion) in {} call(s){estimated}, cost {:.4} {currency}",
        totals.tokens(),
        totals.prompt_tokens,
        totals.cached_tokens,
        totals.completion_tokens,
        totals.calls,
        totals.cost,
    )
}
