//! Usage: what one model call cost (tokens, latency, money) and which task, round and purpose it
//! served; the query that sums such records by owner, requester, stream, model, purpose or day;
//! and the price arithmetic.
//!
//! Plain data and arithmetic: the engine builds the records, a store keeps them (they are never
//! pruned with the tasks they served), front ends show the sums. Must not do I/O.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::config::PricesConfig;
use crate::model::Usage;
use crate::task::TaskId;

/// What a model call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsagePurpose {
    /// A round of a task's agent loop (its final summary round included).
    Agent,
    /// A round of a sub-agent (`ask_subagent(s)`), counted against the task that asked.
    Subagent,
    /// A task's title.
    Title,
    /// Rewriting a reply or a question in the bot's persona.
    Polish,
}

impl UsagePurpose {
    pub const ALL: [UsagePurpose; 4] = [
        UsagePurpose::Agent,
        UsagePurpose::Subagent,
        UsagePurpose::Title,
        UsagePurpose::Polish,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            UsagePurpose::Agent => "agent",
            UsagePurpose::Subagent => "subagent",
            UsagePurpose::Title => "title",
            UsagePurpose::Polish => "polish",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == text)
    }
}

/// One model call, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Names the call: a record written twice (once from a task's record after a crash, say)
    /// is stored once.
    #[serde(default = "uuid::Uuid::new_v4")]
    pub id: uuid::Uuid,
    pub at: DateTime<Utc>,
    /// The calendar day of `at` in `[task] timezone` when it was recorded (what "per day"
    /// groups by).
    pub day: NaiveDate,
    /// The task it served (a title's task may have been refused by a limit after the call).
    pub task_id: Option<TaskId>,
    /// The task's round (0 outside the agent loop).
    pub round: u32,
    pub purpose: UsagePurpose,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, how many the provider served from its cache.
    pub cached_tokens: u64,
    /// The provider sent no usage: the figures are an estimate from the text.
    pub estimated: bool,
    pub latency_ms: u64,
    /// The task's owner (`platform:user_id`, or `planner:<stream>`).
    pub owner: String,
    /// The person the task acts for.
    pub requester: Option<String>,
    pub stream_id: String,
    /// From `[prices]` at the time of the call; `None` when the model has no price.
    pub cost: Option<f64>,
}

// A cost is a finite sum of finite prices (never NaN), so equality is total.
impl Eq for UsageRecord {}

/// The form of the records a running task carries in its record until they are written
/// (`TaskMetadata::usage_unwritten`): each one a JSON array of its fields in declaration order,
/// not an object — the record is rewritten by every checkpoint, and the field names were more
/// than half of its bytes. Reads the object form too (what earlier builds saved).
pub mod carried {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{DateTime, NaiveDate, TaskId, UsagePurpose, UsageRecord, Utc};

    /// A record's fields, in [`UsageRecord`]'s order.
    type Row = (
        uuid::Uuid,
        DateTime<Utc>,
        NaiveDate,
        Option<TaskId>,
        u32,
        UsagePurpose,
        String,
        u64,
        u64,
        u64,
        bool,
        u64,
        String,
        Option<String>,
        String,
        Option<f64>,
    );

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Row(Row),
        Record(UsageRecord),
    }

    pub fn serialize<S: Serializer>(records: &[UsageRecord], to: S) -> Result<S::Ok, S::Error> {
        // The same fields as `Row`, borrowed (this runs with every checkpoint).
        to.collect_seq(records.iter().map(|r| {
            (
                r.id,
                r.at,
                r.day,
                r.task_id,
                r.round,
                r.purpose,
                &r.model,
                r.prompt_tokens,
                r.completion_tokens,
                r.cached_tokens,
                r.estimated,
                r.latency_ms,
                &r.owner,
                &r.requester,
                &r.stream_id,
                r.cost,
            )
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Vec<UsageRecord>, D::Error> {
        let forms = Vec::<Form>::deserialize(from)?;
        Ok(forms.into_iter().map(record_of).collect())
    }

    fn record_of(form: Form) -> UsageRecord {
        let row = match form {
            Form::Record(record) => return record,
            Form::Row(row) => row,
        };
        UsageRecord {
            id: row.0,
            at: row.1,
            day: row.2,
            task_id: row.3,
            round: row.4,
            purpose: row.5,
            model: row.6,
            prompt_tokens: row.7,
            completion_tokens: row.8,
            cached_tokens: row.9,
            estimated: row.10,
            latency_ms: row.11,
            owner: row.12,
            requester: row.13,
            stream_id: row.14,
            cost: row.15,
        }
    }
}

impl UsageRecord {
    /// Prompt plus completion tokens: what the token budgets count.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// How [`UsageQuery`] groups its sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageGroup {
    Owner,
    Requester,
    Stream,
    Model,
    Purpose,
    Day,
    Task,
}

impl UsageGroup {
    pub const ALL: [UsageGroup; 7] = [
        UsageGroup::Owner,
        UsageGroup::Requester,
        UsageGroup::Stream,
        UsageGroup::Model,
        UsageGroup::Purpose,
        UsageGroup::Day,
        UsageGroup::Task,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            UsageGroup::Owner => "owner",
            UsageGroup::Requester => "requester",
            UsageGroup::Stream => "stream",
            UsageGroup::Model => "model",
            UsageGroup::Purpose => "purpose",
            UsageGroup::Day => "day",
            UsageGroup::Task => "task",
        }
    }

    /// Parses a `--by` / `group_by` value, saying which values exist when it is none of them.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|g| g.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|g| g.as_str()).collect();
                format!(
                    "cannot group usage by `{text}`: use one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Which usage records to sum. Empty fields do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageQuery {
    /// Records at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Records before this time.
    pub until: Option<DateTime<Utc>>,
    pub task: Option<TaskId>,
    pub owner: Option<String>,
    pub requester: Option<String>,
    pub stream: Option<String>,
    /// One sum per value of this; `None`: one sum over everything.
    pub group_by: Option<UsageGroup>,
}

/// The sums of a group of usage records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// The group's value (`None` for the total, and for a requester or task that is none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub calls: u64,
    /// Calls whose figures are estimates (the provider sent no usage).
    pub estimated_calls: u64,
    /// The sum of the known costs, in `[prices] currency`.
    pub cost: f64,
}

impl UsageTotals {
    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Adds `other`'s figures to these.
    pub fn add(&mut self, other: &UsageTotals) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.calls = self.calls.saturating_add(other.calls);
        self.estimated_calls = self.estimated_calls.saturating_add(other.estimated_calls);
        self.cost += other.cost;
    }
}

/// The cost of `usage` on `model` from the price table (`None`: the model has no price).
pub fn cost_of(prices: &PricesConfig, model: &str, usage: &Usage) -> Option<f64> {
    let price = prices.models.get(model)?;
    let cached = usage.cached_tokens.min(usage.prompt_tokens);
    let fresh = usage.prompt_tokens - cached;
    let cached_price = price.cached_input.unwrap_or(price.input);
    let micro = fresh as f64 * price.input
        + cached as f64 * cached_price
        + usage.completion_tokens as f64 * price.output;
    Some(micro / 1_000_000.0)
}

/// A token count for `text` when the provider reports none: about four bytes per token for
/// Latin script, one token per character for CJK and other wide scripts (the usual tokenizers
/// come close to both). Always at least 1 for a non-empty text.
pub fn estimate_tokens(text: &str) -> u64 {
    let mut narrow_bytes = 0u64;
    let mut wide = 0u64;
    for c in text.chars() {
        if c.len_utf8() >= 3 {
            wide += 1;
        } else {
            narrow_bytes += c.len_utf8() as u64;
        }
    }
    let tokens = wide + narrow_bytes.div_ceil(4);
    if tokens == 0 && !text.is_empty() {
        1
    } else {
        tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelPrice;

    /// Holds records the way `TaskMetadata::usage_unwritten` does.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Carrier {
        #[serde(with = "carried")]
        records: Vec<UsageRecord>,
    }

    fn sample(round: u32, requester: Option<&str>, cost: Option<f64>) -> UsageRecord {
        UsageRecord {
            id: uuid::Uuid::now_v7(),
            at: "2026-12-06T12:19:19.387592854Z".parse().unwrap(),
            day: NaiveDate::from_ymd_opt(2026, 12, 6).unwrap(),
            task_id: Some(TaskId(uuid::Uuid::new_v4())),
            round,
            purpose: UsagePurpose::Subagent,
            model: "gpt-4o-mini".into(),
            prompt_tokens: 1400,
            completion_tokens: 20,
            cached_tokens: 800,
            estimated: true,
            latency_ms: 7,
            owner: "qq:1".into(),
            requester: requester.map(str::to_owned),
            stream_id: "qq:group:1".into(),
            cost,
        }
    }

    #[test]
    fn carried_records_are_saved_as_arrays_and_read_back_whole() {
        let carrier = Carrier {
            records: vec![sample(1, Some("qq:2"), Some(0.25)), sample(2, None, None)],
        };
        let text = serde_json::to_string(&carrier).unwrap();
        assert!(text.starts_with(r#"{"records":[["#), "{text}");
        assert!(!text.contains("prompt_tokens"), "no field names: {text}");
        let full: usize = carrier
            .records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap().len())
            .sum();
        assert!(text.len() * 3 < full * 2, "{} vs {full}", text.len());
        assert_eq!(serde_json::from_str::<Carrier>(&text).unwrap(), carrier);
    }

    #[test]
    fn carried_records_saved_as_objects_by_an_earlier_build_still_read() {
        let record = sample(3, Some("qq:2"), None);
        let text = format!(
            r#"{{"records":[{}]}}"#,
            serde_json::to_string(&record).unwrap()
        );
        let read: Carrier = serde_json::from_str(&text).unwrap();
        assert_eq!(read.records, vec![record]);
    }

    #[test]
    fn cached_tokens_are_priced_at_the_cached_rate() {
        let mut prices = PricesConfig::default();
        prices.models.insert(
            "m".into(),
            ModelPrice {
                input: 2.0,
                cached_input: Some(0.5),
                output: 8.0,
            },
        );
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 500_000,
            total_tokens: 1_500_000,
            cached_tokens: 400_000,
        };
        let cost = cost_of(&prices, "m", &usage).unwrap();
        assert!((cost - (0.6 * 2.0 + 0.4 * 0.5 + 0.5 * 8.0)).abs() < 1e-9);
        assert_eq!(cost_of(&prices, "other", &usage), None);
    }

    #[test]
    fn an_estimate_counts_wide_characters_one_each() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("你好"), 2);
    }

    #[test]
    fn an_unknown_grouping_names_the_ones_that_exist() {
        let error = UsageGroup::parse("colour").unwrap_err();
        assert!(error.contains("owner, requester, stream, model, purpose, day, task"));
        assert_eq!(UsageGroup::parse("day"), Ok(UsageGroup::Day));
    }
}
