//! The gate of `[limits]` on work: the structural caps on task creation (how deep sub-tasks
//! nest, how many children one task makes, how many unfinished and recurring tasks one
//! requester and one stream may have) and the daily budgets of `[limits.budgets]` (tasks,
//! tokens and cost per requester and per stream, a day being a calendar day in
//! `[task] timezone`).
//!
//! Owns the check, for every door: task creation (chat commands, HTTP, the planner tools,
//! `create_subtask` all reach [`check`]/[`insert`] through the facade), `ask_subagent(s)` and a
//! running task's round boundary ([`check_spending`]). The caps and the task budgets hold under
//! concurrency because the final count is taken by the store in the transaction that inserts
//! (`TaskStore::insert_admitted`): the store's one writer runs creations one after another, so
//! 32 `create_subtask` calls of one round cannot all pass a count of 0. Token and cost budgets
//! are read just before (a call already made is spent either way).
//! Reply tasks do not come through here: they deliver a result and are never refused.
//! Must not: decide roles or ownership (the facade does), or write anything but the admitted
//! task.

use chrono::{DateTime, Utc};

use mai_core::config::{Budget, BudgetsConfig, LimitsConfig};
use mai_core::ids::{Owner, PersonId, StreamId};
use mai_core::role::Role;
use mai_core::store::{CountQuery, TaskCounts};
use mai_core::task::{TaskRecord, Trigger};
use mai_core::usage::{UsageQuery, UsageRecord, UsageTotals};

use crate::engine::Engine;
use crate::error::EngineError;

fn count_query(task: &TaskRecord, created_since: Option<DateTime<Utc>>) -> CountQuery<'_> {
    CountQuery {
        requester: task.requester(),
        stream: &task.stream_id,
        created_by: task.metadata.parent_task_id,
        recurring: matches!(task.trigger, Trigger::Cron { .. }),
        created_since,
    }
}

/// Refuses `task` when it would exceed a cap or a budget now (an early answer, e.g. before a
/// model call names the task; [`insert`] checks again when it writes).
pub(crate) async fn check(engine: &Engine, task: &TaskRecord) -> Result<(), EngineError> {
    let limits = engine.config.config().limits.clone();
    let who = Who::of_task(engine, task);
    let today = Today::of(engine);
    let since = who.counts_tasks(&limits.budgets).then_some(today.start);
    let counts = engine.store.counts(&count_query(task, since)).await?;
    refuse_over_limits(&limits, task, &counts)?;
    let spent = spent(engine, &who, &limits.budgets, &today).await?;
    match over_budget(&limits.budgets, &who, &counts, &spent, true) {
        Some(reason) => Err(EngineError::LimitReached(today.refusal(engine, &reason))),
        None => Ok(()),
    }
}

/// Inserts `task` unless it would exceed a cap or a budget, counted in the inserting
/// transaction; `usage` (the calls made to create it) is written in that transaction, refused
/// or not.
pub(crate) async fn insert(
    engine: &Engine,
    task: &TaskRecord,
    usage: &[UsageRecord],
) -> Result<(), EngineError> {
    let limits = engine.config.config().limits.clone();
    let who = Who::of_task(engine, task);
    let today = Today::of(engine);
    let since = who.counts_tasks(&limits.budgets).then_some(today.start);
    let spent = spent(engine, &who, &limits.budgets, &today).await?;
    let candidate = task.clone();
    let resets = today.refusal(engine, "");
    let admit: mai_core::store::Admit = Box::new(move |counts| {
        if let Some(reason) = over_limits(&limits, &candidate, counts) {
            return Err(reason);
        }
        match over_budget(&limits.budgets, &who, counts, &spent, true) {
            Some(reason) => Err(format!("{reason}{resets}")),
            None => Ok(()),
        }
    });
    for record in usage {
        engine.meter.count(record);
    }
    engine
        .store
        .insert_admitted(task, &count_query(task, since), admit, usage)
        .await?
        .map_err(EngineError::LimitReached)
}

/// A token or cost budget a running task's requester or stream has used up.
#[derive(Debug, Clone)]
pub(crate) struct BudgetHit {
    /// Names the budget, the figure and when it resets.
    pub message: String,
    pub resets_at: DateTime<Utc>,
}

/// Whether the work of `task` (a round, a sub-agent) may spend more today: `Err` names the
/// budget it used up. Reads nothing when no spending budget is configured.
pub(crate) async fn check_spending(
    engine: &Engine,
    task: &TaskRecord,
) -> Result<Result<(), BudgetHit>, EngineError> {
    let budgets = &engine.config.config().limits.budgets;
    if !budgets.any_spending() {
        return Ok(Ok(()));
    }
    let who = Who::of_task(engine, task);
    let today = Today::of(engine);
    let spent = spent(engine, &who, budgets, &today).await?;
    Ok(
        match over_budget(budgets, &who, &TaskCounts::default(), &spent, false) {
            Some(reason) => Err(BudgetHit {
                message: today.refusal(engine, &reason),
                resets_at: today.end,
            }),
            None => Ok(()),
        },
    )
}

/// Whom a task's budgets count: its requester (none: only the stream) and its stream; `None`
/// budgets when the requester is an exempt admin.
struct Who {
    requester: Option<(PersonId, Role)>,
    stream: StreamId,
    exempt: bool,
}

impl Who {
    fn of_task(engine: &Engine, task: &TaskRecord) -> Who {
        let role = engine.task_role(task);
        let planner = matches!(task.owner, Owner::Planner(_));
        let budgets = &engine.config.config().limits.budgets;
        Who {
            requester: task.requester().map(|person| (person.clone(), role)),
            stream: task.stream_id.clone(),
            // The planner is no exemption: its tasks count whoever speaks.
            exempt: budgets.admins_exempt && role == Role::Admin && !planner,
        }
    }

    fn requester_budget(&self, budgets: &BudgetsConfig) -> Option<(String, Budget)> {
        let (person, role) = self.requester.as_ref()?;
        let person = person.to_string();
        let budget = budgets.for_person(&person, *role);
        Some((person, budget))
    }

    fn counts_tasks(&self, budgets: &BudgetsConfig) -> bool {
        !self.exempt
            && (budgets
                .for_stream(self.stream.as_str())
                .tasks_per_day
                .is_some()
                || self
                    .requester_budget(budgets)
                    .is_some_and(|(_, b)| b.tasks_per_day.is_some()))
    }
}

/// Today in `[task] timezone`: when it began and when it ends.
struct Today {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

impl Today {
    fn of(engine: &Engine) -> Today {
        let (_, start, end) = crate::usage::budget_day(engine, engine.now());
        Today { start, end }
    }

    /// `reason` followed by when the budget resets and what to do.
    fn refusal(&self, engine: &Engine, reason: &str) -> String {
        format!(
            "{reason}; it resets at {} — wait until then, or an operator can raise it under \
             [limits.budgets]",
            crate::usage::local_time(engine, self.end)
        )
    }
}

/// What the requester and the stream spent today (only the figures a budget needs are read).
async fn spent(
    engine: &Engine,
    who: &Who,
    budgets: &BudgetsConfig,
    today: &Today,
) -> Result<[UsageTotals; 2], EngineError> {
    let mut spent = [UsageTotals::default(), UsageTotals::default()];
    if who.exempt {
        return Ok(spent);
    }
    let base = UsageQuery {
        since: Some(today.start),
        ..UsageQuery::default()
    };
    if let Some((person, budget)) = who.requester_budget(budgets)
        && budget.limits_spending()
    {
        let waiting = engine
            .meter
            .waiting_sum(Some(&person), who.stream.as_str(), today.start);
        let query = UsageQuery {
            requester: Some(person),
            ..base.clone()
        };
        spent[0] = engine.store.usage(&query).await?.pop().unwrap_or_default();
        spent[0].add(&waiting);
    }
    if budgets.for_stream(who.stream.as_str()).limits_spending() {
        let stream = who.stream.as_str();
        let waiting = engine.meter.waiting_sum(None, stream, today.start);
        let query = UsageQuery {
            stream: Some(stream.to_owned()),
            ..base
        };
        spent[1] = engine.store.usage(&query).await?.pop().unwrap_or_default();
        spent[1].add(&waiting);
    }
    Ok(spent)
}

/// The one budget check: the first daily budget of `who` that `counts` (tasks created today)
/// or `spent` (tokens and cost today) reaches, naming the key, the figure and what was used.
/// `creating`: a new task would add one to the task counts.
fn over_budget(
    budgets: &BudgetsConfig,
    who: &Who,
    counts: &TaskCounts,
    spent: &[UsageTotals; 2],
    creating: bool,
) -> Option<String> {
    if who.exempt {
        return None;
    }
    let stream = who.stream.as_str();
    let mut scopes: Vec<(String, String, Budget, u64, &UsageTotals)> = Vec::new();
    if let Some((person, budget)) = who.requester_budget(budgets) {
        let role = who.requester.as_ref().map_or(Role::Guest, |(_, r)| *r);
        let key = if budgets.people.contains_key(&person) {
            format!("people.\"{person}\"")
        } else {
            role.as_str().to_owned()
        };
        let count = counts.created_by_requester_since;
        scopes.push((key, person, budget, count, &spent[0]));
    }
    let key = if budgets.streams.contains_key(stream) {
        format!("streams.\"{stream}\"")
    } else {
        "stream".to_owned()
    };
    let budget = budgets.for_stream(stream);
    let whose = format!("this chat ({stream})");
    scopes.push((
        key,
        whose,
        budget,
        counts.created_in_stream_since,
        &spent[1],
    ));
    for (key, whose, budget, created, used) in scopes {
        if let Some(max) = budget.tasks_per_day
            && creating
            && created + 1 > max
        {
            return Some(format!(
                "[limits.budgets] {key}.tasks_per_day = {max}: {whose} created {created} \
                 task(s) today"
            ));
        }
        if let Some(max) = budget.tokens_per_day
            && used.tokens() >= max
        {
            return Some(format!(
                "[limits.budgets] {key}.tokens_per_day = {max}: {whose} used {} tokens today",
                used.tokens()
            ));
        }
        if let Some(max) = budget.cost_per_day
            && used.cost >= max
        {
            return Some(format!(
                "[limits.budgets] {key}.cost_per_day = {max}: {whose} spent {:.4} today",
                used.cost
            ));
        }
    }
    None
}

/// The first cap `task` would exceed, as an error naming the limit, the figure and what to do.
pub(crate) fn refuse_over_limits(
    limits: &LimitsConfig,
    task: &TaskRecord,
    counts: &TaskCounts,
) -> Result<(), EngineError> {
    match over_limits(limits, task, counts) {
        Some(reason) => Err(EngineError::LimitReached(reason)),
        None => Ok(()),
    }
}

/// What [`refuse_over_limits`] says, or `None` when `task` is within every cap.
fn over_limits(limits: &LimitsConfig, task: &TaskRecord, counts: &TaskCounts) -> Option<String> {
    let recurring = matches!(task.trigger, Trigger::Cron { .. });
    let sub_task = task.metadata.parent_task_id.is_some();
    let who = task
        .requester()
        .map(ToString::to_string)
        .unwrap_or_else(|| "this requester".into());
    let caps: [(bool, u64, u32, &str, String); 6] = [
        (
            sub_task,
            u64::from(task.metadata.depth),
            limits.max_depth,
            "max_depth",
            "sub-tasks may nest this deep; do the work in this task instead".into(),
        ),
        (
            sub_task,
            counts.children + 1,
            limits.max_children,
            "max_children",
            "this task may create this many sub-tasks; do the rest in this task".into(),
        ),
        (
            task.requester().is_some(),
            counts.unfinished_by_requester + 1,
            limits.max_active_per_requester,
            "max_active_per_requester",
            format!(
                "{who} may have this many unfinished tasks; wait for one to finish or cancel one"
            ),
        ),
        (
            true,
            counts.unfinished_in_stream + 1,
            limits.max_active_per_stream,
            "max_active_per_stream",
            "this chat may have this many unfinished tasks; wait for one to finish or cancel one"
                .into(),
        ),
        (
            recurring && task.requester().is_some(),
            counts.recurring_by_requester + 1,
            limits.max_cron_per_requester,
            "max_cron_per_requester",
            format!("{who} may have this many recurring tasks; cancel one first"),
        ),
        (
            recurring,
            counts.recurring_in_stream + 1,
            limits.max_cron_per_stream,
            "max_cron_per_stream",
            "this chat may have this many recurring tasks; cancel one first".into(),
        ),
    ];
    for (applies, would_be, max, key, what) in caps {
        if applies && would_be > u64::from(max) {
            return Some(format!(
                "[limits] {key} = {max}: {what} (an operator can raise {key} in [limits])"
            ));
        }
    }
    None
}

/// What `person` (with `role` in `stream`) and `stream` used today against their budgets, for
/// `/mt usage`: one line each, with the limits and when they reset.
pub(crate) async fn describe_budgets(
    engine: &Engine,
    person: &PersonId,
    role: Role,
    stream: &StreamId,
) -> Result<String, EngineError> {
    let budgets = engine.config.config().limits.budgets.clone();
    let today = Today::of(engine);
    let currency = engine.currency();
    let counts = engine
        .store
        .counts(&CountQuery {
            requester: Some(person),
            stream,
            created_by: None,
            recurring: false,
            created_since: Some(today.start),
        })
        .await?;
    let base = UsageQuery {
        since: Some(today.start),
        ..UsageQuery::default()
    };
    let mine = UsageQuery {
        requester: Some(person.to_string()),
        ..base.clone()
    };
    let chat = UsageQuery {
        stream: Some(stream.to_string()),
        ..base
    };
    let mine = engine.store.usage(&mine).await?.pop().unwrap_or_default();
    let chat = engine.store.usage(&chat).await?.pop().unwrap_or_default();
    let limit = |figure: Option<String>| figure.unwrap_or_else(|| "unlimited".into());
    let line = |whose: &str, tasks: u64, used: &UsageTotals, budget: &Budget| {
        format!(
            "{whose} today: {tasks} task(s), {} tokens, cost {:.4} {currency} — limits: \
             {} tasks, {} tokens, {} {currency} per day",
            used.tokens(),
            used.cost,
            limit(budget.tasks_per_day.map(|n| n.to_string())),
            limit(budget.tokens_per_day.map(|n| n.to_string())),
            limit(budget.cost_per_day.map(|n| n.to_string())),
        )
    };
    let mut out = line(
        &format!("{person} ({role})"),
        counts.created_by_requester_since,
        &mine,
        &budgets.for_person(&person.to_string(), role),
    );
    if budgets.admins_exempt && role == Role::Admin {
        out.push_str(" (admins are exempt, except for planner tasks)");
    }
    out.push('\n');
    out.push_str(&line(
        &format!("this chat ({stream})"),
        counts.created_in_stream_since,
        &chat,
        &budgets.for_stream(stream.as_str()),
    ));
    out.push_str(&format!(
        "\nbudgets reset at {}",
        crate::usage::local_time(engine, today.end)
    ));
    Ok(out)
}
