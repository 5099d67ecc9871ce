//! The task store's behaviour, the same on both backends: every test here runs once on SQLite
//! (`sqlite::…`) and once on a throwaway PostgreSQL cluster (`postgres::…`). Each gets two stores
//! on one database — on SQLite two pools on one file, on PostgreSQL what two `serve` instances
//! would have — so compare-and-set, claims and caps are shown to hold across instances.
//!
//! Backend-specific matters (pragmas, file reopening, migrations of a given backend) stay in the
//! other test files.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;
#[path = "../../../testing/postgres.rs"]
mod pg_cluster;

use std::sync::Arc;

use TaskStatus::*;
use common::{at, full_record, message, owner, stream, task};
use mai_core::ids::PersonId;
use mai_core::store::{
    CountQuery, HistoryKind, Resolved, SaveOutcome, StoreError, TaskCounts, TaskFilter, TaskStore,
    TaskWrite,
};
use mai_core::task::{TaskId, TaskRecord, TaskStatus, Trigger, WaitingQuestion};
use mai_store::{PgStore, SqliteStore};

/// Two stores on one fresh database, and what keeps that database alive.
struct Backend {
    store: Arc<dyn TaskStore>,
    other: Arc<dyn TaskStore>,
    _keep: Box<dyn std::any::Any + Send>,
}

async fn sqlite() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let path = common::db_path(dir.path());
    Backend {
        store: Arc::new(SqliteStore::open(&path).await.unwrap()),
        other: Arc::new(SqliteStore::open(&path).await.unwrap()),
        _keep: Box::new(dir),
    }
}

/// `None` (after SKIP, or a failure under CI=true) without PostgreSQL.
async fn postgres() -> Option<Backend> {
    let cluster = pg_cluster::PgCluster::start()?;
    let url = cluster.database();
    Some(Backend {
        store: Arc::new(PgStore::connect(&url).await.unwrap()),
        other: Arc::new(PgStore::connect(&url).await.unwrap()),
        _keep: Box::new(cluster),
    })
}

/// One test per backend for each behaviour named.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(backend) = super::postgres().await {
                        super::$name(backend).await;
                    }
                }
            )*
        }
    };
}

conformance!(
    a_full_record_round_trips_exactly,
    inserting_an_existing_id_is_a_duplicate_and_changes_nothing,
    saving_a_task_that_was_never_inserted_is_not_found,
    a_stale_snapshot_from_another_instance_never_overwrites_a_terminal_status,
    a_status_that_came_back_to_the_expected_one_still_logs_every_change_in_order,
    an_unconditional_save_writes_but_never_removes_log_lines,
    a_checkpoint_saves_the_task_and_appends_its_history_in_order,
    a_write_of_several_parts_stands_or_falls_together,
    an_answer_to_a_question_the_task_no_longer_waits_on_is_a_conflict,
    history_appends_number_on_from_the_stored_entries,
    lists_filter_and_order_newest_first_and_active_tasks_oldest_first,
    the_store_narrows_lists_by_parent_creation_time_and_search_and_counts_per_status,
    a_reference_resolves_by_id_prefix_or_exact_title,
    the_caps_count_unfinished_and_recurring_tasks_and_children,
    concurrent_creations_on_two_instances_never_pass_a_cap_together,
    an_update_on_one_instance_races_a_cancel_on_another_cleanly,
    usage_rides_on_a_checkpoint_and_sums_by_group_and_time,
    a_title_call_is_counted_with_its_task_and_also_when_the_task_is_refused,
    a_usage_record_written_twice_is_stored_once,
);

async fn a_full_record_round_trips_exactly(b: Backend) {
    let task = full_record();
    b.store.insert(&task).await.unwrap();
    let back = b.other.get(task.id).await.unwrap().expect("stored");
    assert_eq!(back, task, "every field, the metadata and the status log");
    assert_eq!(
        back.created_at.timestamp_subsec_nanos(),
        task.created_at.timestamp_subsec_nanos()
    );
    assert_eq!(b.store.get(TaskId::new()).await.unwrap(), None);
}

async fn inserting_an_existing_id_is_a_duplicate_and_changes_nothing(b: Backend) {
    let first = task("first", 0);
    b.store.insert(&first).await.unwrap();
    let mut again = first.clone();
    again.title = "second".into();
    let error = b.other.insert(&again).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Duplicate(id) if id == first.id),
        "{error}"
    );
    assert_eq!(b.store.get(first.id).await.unwrap(), Some(first));
}

async fn saving_a_task_that_was_never_inserted_is_not_found(b: Backend) {
    let ghost = task("ghost", 0);
    for expected in [None, Some(Pending)] {
        let error = b.store.save(&ghost, expected).await.unwrap_err();
        assert!(
            matches!(error, StoreError::NotFound(id) if id == ghost.id),
            "{error}"
        );
    }
    let error = b
        .store
        .append_history(ghost.id, &[message(1, "x")])
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound(_)), "{error}");
    assert_eq!(b.store.get(ghost.id).await.unwrap(), None);
}

async fn a_stale_snapshot_from_another_instance_never_overwrites_a_terminal_status(b: Backend) {
    let mut original = task("finish me", 0);
    original
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    b.store.insert(&original).await.unwrap();
    let mut stale = b.other.get(original.id).await.unwrap().unwrap();
    let mut finisher = b.store.get(original.id).await.unwrap().unwrap();
    finisher
        .transition(Completed, "agent", "done", at(2))
        .unwrap();
    let saved = b.store.save(&finisher, Some(Running)).await.unwrap();
    assert_eq!(saved, SaveOutcome::Saved);

    stale.transition(Paused, "qq:1", "pause", at(3)).unwrap();
    let conflict = SaveOutcome::Conflict { actual: Completed };
    assert_eq!(b.other.save(&stale, Some(Running)).await.unwrap(), conflict);
    let late = [message(1, "late")];
    let checkpoint = b.other.checkpoint(&stale, Some(Running), &late).await;
    assert_eq!(checkpoint.unwrap(), conflict);
    assert_eq!(b.store.get(original.id).await.unwrap(), Some(finisher));
    assert!(b.store.history(original.id, 0).await.unwrap().is_empty());
}

async fn a_status_that_came_back_to_the_expected_one_still_logs_every_change_in_order(b: Backend) {
    let mut original = task("ask twice", 0);
    original
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    b.store.insert(&original).await.unwrap();
    let mut stale = b.other.get(original.id).await.unwrap().unwrap();
    let mut other = b.store.get(original.id).await.unwrap().unwrap();
    other
        .transition(WaitingInput, "agent", "asks", at(2))
        .unwrap();
    assert_eq!(
        b.store.save(&other, Some(Running)).await.unwrap(),
        SaveOutcome::Saved
    );
    other
        .transition(Running, "qq:1", "answered", at(3))
        .unwrap();
    let saved = b.store.save(&other, Some(WaitingInput)).await.unwrap();
    assert_eq!(saved, SaveOutcome::Saved);

    // Running again, so the stale snapshot's compare-and-set passes; its log is behind.
    stale.transition(Paused, "qq:1", "pause", at(4)).unwrap();
    assert_eq!(
        b.other.save(&stale, Some(Running)).await.unwrap(),
        SaveOutcome::Saved
    );
    let stored = b.store.get(original.id).await.unwrap().unwrap();
    let log: Vec<(TaskStatus, &str)> = stored
        .status_log
        .iter()
        .map(|line| (line.status, line.actor.as_str()))
        .collect();
    assert_eq!(
        log,
        [
            (Pending, "qq:1"),
            (Running, "scheduler"),
            (WaitingInput, "agent"),
            (Running, "qq:1"),
            (Paused, "qq:1"),
        ]
    );
    assert_eq!(stored.status, Paused);
}

async fn an_unconditional_save_writes_but_never_removes_log_lines(b: Backend) {
    let mut current = task("overwrite", 0);
    b.store.insert(&current).await.unwrap();
    let stale = current.clone();
    current
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    current
        .transition(WaitingInput, "agent", "asks", at(2))
        .unwrap();
    assert_eq!(
        b.store.save(&current, None).await.unwrap(),
        SaveOutcome::Saved
    );
    let mut older = stale.clone();
    older.title = "renamed".into();
    assert_eq!(
        b.other.save(&older, None).await.unwrap(),
        SaveOutcome::Saved
    );
    let stored = b.store.get(current.id).await.unwrap().unwrap();
    assert_eq!(stored.title, "renamed");
    assert_eq!(
        stored.status_log, current.status_log,
        "the shorter log removed nothing"
    );
}

fn contents(entries: &[mai_core::store::HistoryEntry]) -> Vec<(u64, u32, HistoryKind, String)> {
    entries
        .iter()
        .map(|entry| {
            let text = entry.payload["content"].as_str().unwrap_or_default();
            (entry.seq, entry.round, entry.kind, text.to_owned())
        })
        .collect()
}

async fn a_checkpoint_saves_the_task_and_appends_its_history_in_order(b: Backend) {
    let mut agent = task("agent", 0);
    b.store.insert(&agent).await.unwrap();
    agent.transition(Running, "scheduler", "go", at(1)).unwrap();
    agent.metadata.rounds = 1;
    let first = [
        message(1, "system"),
        message(1, "user"),
        message(1, "reply"),
    ];
    let outcome = b.store.checkpoint(&agent, Some(Pending), &first).await;
    assert_eq!(outcome.unwrap(), SaveOutcome::Saved);
    agent.metadata.rounds = 2;
    let second = [message(2, "call"), message(2, "result")];
    let outcome = b.other.checkpoint(&agent, Some(Running), &second).await;
    assert_eq!(outcome.unwrap(), SaveOutcome::Saved);

    assert_eq!(b.store.get(agent.id).await.unwrap(), Some(agent.clone()));
    let history = b.other.history(agent.id, 0).await.unwrap();
    let texts: Vec<(u64, u32, String)> = contents(&history)
        .into_iter()
        .map(|(seq, round, _, text)| (seq, round, text))
        .collect();
    let expected = [
        (0, 1, "system"),
        (1, 1, "user"),
        (2, 1, "reply"),
        (3, 2, "call"),
    ];
    for ((seq, round, text), want) in texts.iter().zip(expected) {
        assert_eq!((*seq, *round, text.as_str()), want);
    }
    assert_eq!(texts.len(), 5);
    assert_eq!(history[0].at, at(1));
    assert_eq!(
        contents(&b.store.history(agent.id, 3).await.unwrap())[0].0,
        3
    );
    assert!(b.store.history(agent.id, 5).await.unwrap().is_empty());
    assert!(b.store.history(TaskId::new(), 0).await.unwrap().is_empty());
}

async fn a_write_of_several_parts_stands_or_falls_together(b: Backend) {
    let mut parent = task("parent", 0);
    b.store.insert(&parent).await.unwrap();
    let stale = parent.clone();
    parent
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    b.store.save(&parent, Some(Pending)).await.unwrap();

    // The stale completion loses its compare-and-set: its reply task is not written either.
    let mut completed = stale.clone();
    completed.force(Completed, "agent", "done", at(2));
    let reply = task("reply: parent", 3);
    let writes = [
        TaskWrite::InsertIfAbsent(&reply),
        TaskWrite::Save {
            task: &completed,
            expected: Some(Pending),
            expected_question: None,
            history: &[],
        },
    ];
    let outcome = b.other.write(&writes).await.unwrap();
    assert_eq!(outcome, SaveOutcome::Conflict { actual: Running });
    assert_eq!(b.store.get(reply.id).await.unwrap(), None);

    // From the current copy both are written; writing them again inserts nothing twice.
    let mut completed = parent.clone();
    completed
        .transition(Completed, "agent", "done", at(2))
        .unwrap();
    let writes = [
        TaskWrite::InsertIfAbsent(&reply),
        TaskWrite::Save {
            task: &completed,
            expected: Some(Running),
            expected_question: None,
            history: &[message(1, "answer")],
        },
    ];
    assert_eq!(b.other.write(&writes).await.unwrap(), SaveOutcome::Saved);
    assert_eq!(b.store.get(reply.id).await.unwrap(), Some(reply.clone()));
    assert_eq!(
        b.store.get(parent.id).await.unwrap(),
        Some(completed.clone())
    );
    let again = [TaskWrite::InsertIfAbsent(&reply)];
    assert_eq!(b.store.write(&again).await.unwrap(), SaveOutcome::Saved);
    assert_eq!(b.store.list(&TaskFilter::default()).await.unwrap().len(), 2);
}

async fn an_answer_to_a_question_the_task_no_longer_waits_on_is_a_conflict(b: Backend) {
    let mut asking = task("asking", 0);
    asking
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    asking
        .transition(WaitingInput, "agent", "asks", at(2))
        .unwrap();
    asking.metadata.waiting = Some(WaitingQuestion {
        call_id: "call_2".into(),
        question: "which disk?".into(),
        asked_at: at(2),
        unsent: false,
    });
    b.store.insert(&asking).await.unwrap();
    let mut answered = asking.clone();
    answered.metadata.waiting = None;
    answered
        .transition(Running, "qq:1", "answered", at(3))
        .unwrap();
    let answer = |call: &'static str| TaskWrite::Save {
        task: &answered,
        expected: Some(WaitingInput),
        expected_question: Some(call),
        history: &[],
    };
    let outcome = b.other.write(&[answer("call_1")]).await.unwrap();
    assert_eq!(
        outcome,
        SaveOutcome::Conflict {
            actual: WaitingInput
        }
    );
    assert_eq!(b.store.get(asking.id).await.unwrap(), Some(asking.clone()));
    assert_eq!(
        b.other.write(&[answer("call_2")]).await.unwrap(),
        SaveOutcome::Saved
    );
    assert_eq!(
        b.store.get(asking.id).await.unwrap().unwrap().status,
        Running
    );
}

async fn history_appends_number_on_from_the_stored_entries(b: Backend) {
    let agent = task("agent", 0);
    b.store.insert(&agent).await.unwrap();
    let note = mai_core::store::NewHistoryEntry {
        kind: HistoryKind::Injection,
        ..message(1, "injected")
    };
    b.store
        .checkpoint(&agent, Some(Pending), &[message(1, "a")])
        .await
        .unwrap();
    b.other
        .append_history(agent.id, &[note, message(1, "b")])
        .await
        .unwrap();
    let history = contents(&b.store.history(agent.id, 0).await.unwrap());
    assert_eq!(
        history,
        [
            (0, 1, HistoryKind::Message, "a".to_owned()),
            (1, 1, HistoryKind::Injection, "injected".to_owned()),
            (2, 1, HistoryKind::Message, "b".to_owned()),
        ]
    );
    assert_eq!(
        b.store.get(agent.id).await.unwrap(),
        Some(agent),
        "the task is untouched"
    );
}

async fn lists_filter_and_order_newest_first_and_active_tasks_oldest_first(b: Backend) {
    let mut records = Vec::new();
    for (n, (who, where_, status)) in [
        ("qq:1", "s1", Pending),
        ("qq:2", "s1", Completed),
        ("qq:1", "s2", Scheduled),
        ("qq:1", "s1", Cancelled),
    ]
    .into_iter()
    .enumerate()
    {
        let mut record = task(&format!("t{n}"), n as i64);
        record.owner = owner(who);
        record.stream_id = stream(where_);
        record.force(status, "test", "setup", at(10));
        b.store.insert(&record).await.unwrap();
        records.push(record);
    }
    let titles = |tasks: Vec<TaskRecord>| -> Vec<String> {
        tasks.into_iter().map(|task| task.title).collect()
    };
    let all = b.other.list(&TaskFilter::default()).await.unwrap();
    assert_eq!(titles(all), ["t3", "t2", "t1", "t0"]);
    let mine_in_s1 = TaskFilter {
        owner: Some(owner("qq:1")),
        stream_id: Some(stream("s1")),
        ..TaskFilter::default()
    };
    assert_eq!(
        titles(b.other.list(&mine_in_s1).await.unwrap()),
        ["t3", "t0"]
    );
    let finished = TaskFilter {
        statuses: vec![Completed, Cancelled],
        limit: Some(1),
        ..TaskFilter::default()
    };
    assert_eq!(titles(b.other.list(&finished).await.unwrap()), ["t3"]);
    assert_eq!(titles(b.other.list_active().await.unwrap()), ["t0", "t2"]);
}

async fn the_store_narrows_lists_by_parent_creation_time_and_search_and_counts_per_status(
    b: Backend,
) {
    let parent = task("Parent job", 0);
    let mut sub = task("Sub Errand", 1);
    sub.metadata.parent_task_id = Some(parent.id);
    sub.force(Running, "test", "setup", at(10));
    let mut reply = task("reply", 2);
    reply.metadata.parent_task_id = Some(parent.id);
    reply.metadata.is_reply = true;
    reply.force(Completed, "test", "setup", at(10));
    let mut late = task("late errand", 3);
    late.force(Completed, "test", "setup", at(10));
    for record in [&parent, &sub, &reply, &late] {
        b.store.insert(record).await.unwrap();
    }
    let titles = |tasks: Vec<TaskRecord>| -> Vec<String> {
        tasks.into_iter().map(|task| task.title).collect()
    };
    let counted = |mut counts: Vec<(TaskStatus, u64)>| {
        counts.sort_by_key(|(status, _)| status.as_str());
        counts
            .into_iter()
            .map(|(status, n)| (status.as_str().to_owned(), n))
            .collect::<Vec<_>>()
    };
    let pair = |status: &str, n: u64| (status.to_owned(), n);
    // Counts take every matching task: the statuses and the limit of the filter aside.
    let one_finished = TaskFilter {
        statuses: vec![Completed],
        limit: Some(1),
        ..TaskFilter::default()
    };
    assert_eq!(
        titles(b.other.list(&one_finished).await.unwrap()),
        ["late errand"]
    );
    assert_eq!(
        counted(b.other.count_by_status(&one_finished).await.unwrap()),
        [pair("completed", 2), pair("pending", 1), pair("running", 1)]
    );
    // Counted in some states only: the others, and states with no task, left out.
    assert_eq!(
        counted(
            b.other
                .count_in_states(&[Running, Pending, TaskStatus::Paused])
                .await
                .unwrap()
        ),
        [pair("pending", 1), pair("running", 1)]
    );
    // The tasks the parent made: its sub-task and its reply task.
    let made = TaskFilter {
        parent: Some(parent.id),
        ..TaskFilter::default()
    };
    assert_eq!(
        titles(b.other.list(&made).await.unwrap()),
        ["reply", "Sub Errand"]
    );
    assert_eq!(
        counted(b.other.count_by_status(&made).await.unwrap()),
        [pair("completed", 1), pair("running", 1)]
    );
    let between = TaskFilter {
        created_since: Some(sub.created_at),
        created_before: Some(late.created_at),
        ..TaskFilter::default()
    };
    assert_eq!(
        titles(b.other.list(&between).await.unwrap()),
        ["reply", "Sub Errand"]
    );
    searches_match_a_piece_of_the_title_or_the_start_of_the_id(&b, &parent).await;
    pages_start_at_an_offset_in_either_order(&b).await;
}

/// Over the tasks of the test above (created in this order: Parent job, Sub Errand, reply, late
/// errand): a page is cut at its offset, newest or oldest first, with or without a limit.
async fn pages_start_at_an_offset_in_either_order(b: &Backend) {
    let titles = |tasks: Vec<TaskRecord>| -> Vec<String> {
        tasks.into_iter().map(|task| task.title).collect()
    };
    let oldest = TaskFilter {
        oldest_first: true,
        offset: Some(1),
        limit: Some(2),
        ..TaskFilter::default()
    };
    assert_eq!(
        titles(b.other.list(&oldest).await.unwrap()),
        ["Sub Errand", "reply"]
    );
    let rest = TaskFilter {
        offset: Some(3),
        ..TaskFilter::default()
    };
    assert_eq!(titles(b.other.list(&rest).await.unwrap()), ["Parent job"]);
}

/// Over the tasks of the test above: a search finds a piece of a title in any case, or the
/// start of an id (dashes optional), and counts what it finds.
async fn searches_match_a_piece_of_the_title_or_the_start_of_the_id(
    b: &Backend,
    parent: &TaskRecord,
) {
    let titles = |tasks: Vec<TaskRecord>| -> Vec<String> {
        tasks.into_iter().map(|task| task.title).collect()
    };
    let search = |text: &str| TaskFilter {
        search: Some(text.to_owned()),
        ..TaskFilter::default()
    };
    assert_eq!(
        titles(b.other.list(&search("ERRAND")).await.unwrap()),
        ["late errand", "Sub Errand"]
    );
    // The start of an id, dashes optional.
    let id = parent.id.to_string();
    assert_eq!(
        titles(b.other.list(&search(&id[..13])).await.unwrap()),
        ["Parent job"]
    );
    let mut counts = b.other.count_by_status(&search("errand")).await.unwrap();
    counts.sort_by_key(|(status, _)| status.as_str());
    assert_eq!(counts, [(Completed, 1), (Running, 1)]);
}

async fn a_reference_resolves_by_id_prefix_or_exact_title(b: Backend) {
    let disk = task("disk", 0);
    let mut twin = task("twin", 1);
    let mut twin2 = task("twin", 2);
    twin.id = TaskId(uuid::Uuid::parse_str("0192ab3c-0000-4000-8000-000000000001").unwrap());
    twin2.id = TaskId(uuid::Uuid::parse_str("0192ab3c-0000-4000-8000-000000000002").unwrap());
    for record in [&disk, &twin, &twin2] {
        b.store.insert(record).await.unwrap();
    }
    let found = |resolved: Resolved| match resolved {
        Resolved::Found(task) => Some(task.id),
        _ => None,
    };
    let full = disk.id.to_string();
    assert_eq!(found(b.other.resolve(&full).await.unwrap()), Some(disk.id));
    assert_eq!(
        found(b.other.resolve(&full[..8]).await.unwrap()),
        Some(disk.id)
    );
    assert_eq!(found(b.other.resolve("disk").await.unwrap()), Some(disk.id));
    assert_eq!(b.other.resolve("Disk").await.unwrap(), Resolved::NotFound);
    let Resolved::Ambiguous(mut ids) = b.other.resolve("0192ab3c").await.unwrap() else {
        panic!("two tasks share the prefix");
    };
    ids.sort_by_key(|id| id.to_string());
    assert_eq!(ids, [twin.id, twin2.id]);
    assert!(matches!(
        b.other.resolve("twin").await.unwrap(),
        Resolved::Ambiguous(_)
    ));
    assert_eq!(b.other.resolve("").await.unwrap(), Resolved::NotFound);
}

fn person(text: &str) -> PersonId {
    text.parse().unwrap()
}

async fn the_caps_count_unfinished_and_recurring_tasks_and_children(b: Backend) {
    let parent = task("parent", 0);
    b.store.insert(&parent).await.unwrap();
    let mut plan = Vec::new();
    for (index, status) in [Scheduled, Completed].into_iter().enumerate() {
        let mut cron = task(&format!("cron {index}"), 1 + index as i64);
        cron.trigger = Trigger::Cron {
            expr: "0 18 * * *".into(),
            timezone: None,
        };
        cron.force(status, "test", "setup", at(10));
        plan.push(cron);
    }
    for index in 0..3 {
        let mut child = task(&format!("child {index}"), 5 + index);
        child.metadata.parent_task_id = Some(parent.id);
        plan.push(child);
    }
    let mut reply = task("reply: parent", 9);
    reply.metadata.parent_task_id = Some(parent.id);
    reply.metadata.is_reply = true;
    plan.push(reply);
    let mut elsewhere = task("elsewhere", 13);
    elsewhere.stream_id = stream("s2");
    plan.push(elsewhere);
    let writes: Vec<TaskWrite<'_>> = plan.iter().map(TaskWrite::InsertIfAbsent).collect();
    b.store.write(&writes).await.unwrap();

    let me = person("qq:1");
    let query = CountQuery {
        requester: Some(&me),
        stream: &stream("s1"),
        created_by: Some(parent.id),
        recurring: true,
        created_since: Some(at(5)),
    };
    let counts = b.other.counts(&query).await.unwrap();
    assert_eq!(
        counts,
        TaskCounts {
            // parent, scheduled cron, 3 children, the reply, elsewhere
            unfinished_by_requester: 7,
            // the same but elsewhere
            unfinished_in_stream: 6,
            recurring_by_requester: 1,
            recurring_in_stream: 1,
            children: 3,
            // created at 5 s or later, the reply not counted: 3 children and elsewhere
            created_by_requester_since: 4,
            // the same but elsewhere
            created_in_stream_since: 3,
        }
    );
}

async fn concurrent_creations_on_two_instances_never_pass_a_cap_together(b: Backend) {
    const CAP: u64 = 3;
    let me = person("qq:1");
    let mut attempts = Vec::new();
    for n in 0..12 {
        let store = if n % 2 == 0 {
            b.store.clone()
        } else {
            b.other.clone()
        };
        let (record, me) = (task(&format!("t{n}"), n), me.clone());
        attempts.push(tokio::spawn(async move {
            let query = CountQuery {
                requester: Some(&me),
                stream: &record.stream_id,
                created_by: None,
                recurring: false,
                created_since: None,
            };
            let admit = Box::new(|counts: &TaskCounts| {
                if counts.unfinished_by_requester < CAP {
                    Ok(())
                } else {
                    Err(format!("at most {CAP}"))
                }
            });
            store
                .insert_admitted(&record, &query, admit, &[])
                .await
                .unwrap()
        }));
    }
    let mut admitted = 0;
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok(()) => admitted += 1,
            Err(reason) => assert_eq!(reason, "at most 3"),
        }
    }
    assert_eq!(admitted, CAP);
    assert_eq!(b.store.list(&TaskFilter::default()).await.unwrap().len(), 3);
}

async fn an_update_on_one_instance_races_a_cancel_on_another_cleanly(b: Backend) {
    let claim = |task: &mut TaskRecord| {
        task.status == Scheduled
            && task.transition(Pending, "scheduler", "due", at(5)).is_ok()
            && task
                .transition(Running, "scheduler", "dispatched", at(5))
                .is_ok()
    };
    let missing = task("never stored", 0);
    assert_eq!(
        b.store.update(missing.id, Box::new(claim)).await.unwrap(),
        None
    );
    let mut races = Vec::new();
    for n in 0..20 {
        let mut scheduled = task(&format!("due {n}"), n);
        scheduled.status = Scheduled;
        scheduled.status_log.clear();
        b.store.insert(&scheduled).await.unwrap();
        let (claimer, canceller) = (b.store.clone(), b.other.clone());
        let mut cancelled = scheduled.clone();
        cancelled
            .transition(Cancelled, "qq:1", "cancel", at(6))
            .unwrap();
        races.push(tokio::spawn(async move {
            let id = cancelled.id;
            let claimed = tokio::spawn(async move { claimer.update(id, Box::new(claim)).await });
            let cancel = canceller.save(&cancelled, Some(Scheduled)).await.unwrap();
            (claimed.await.unwrap().unwrap(), cancel, cancelled)
        }));
    }
    for race in races {
        let (claimed, cancel, cancelled) = race.await.unwrap();
        let stored = b.store.get(cancelled.id).await.unwrap().unwrap();
        match (claimed, cancel) {
            (Some(claimed), SaveOutcome::Conflict { actual: Running }) => {
                assert_eq!(stored, claimed);
                let steps: Vec<_> = stored.status_log.iter().map(|c| c.status).collect();
                assert_eq!(steps, [Pending, Running]);
            }
            (None, SaveOutcome::Saved) => assert_eq!(stored, cancelled),
            other => panic!("both or neither won: {other:?}"),
        }
    }
}

fn usage_record(
    task: Option<TaskId>,
    model: &str,
    purpose: mai_core::usage::UsagePurpose,
    tokens: (u64, u64, u64),
    minute: i64,
) -> mai_core::usage::UsageRecord {
    let at = common::at(minute * 60);
    mai_core::usage::UsageRecord {
        id: uuid::Uuid::new_v4(),
        at,
        day: at.date_naive(),
        task_id: task,
        round: 1,
        purpose,
        model: model.to_owned(),
        prompt_tokens: tokens.0,
        completion_tokens: tokens.1,
        cached_tokens: tokens.2,
        estimated: model == "guess",
        latency_ms: 5,
        owner: "qq:1".to_owned(),
        requester: Some("qq:1".to_owned()),
        stream_id: "s1".to_owned(),
        cost: (model == "priced").then_some(0.25),
    }
}

async fn usage_rides_on_a_checkpoint_and_sums_by_group_and_time(b: Backend) {
    use mai_core::usage::{UsageGroup, UsagePurpose, UsageQuery};
    let mut task = task("spends", 0);
    b.store.insert(&task).await.unwrap();
    task.metadata.history_len = 1;
    let spent = [
        usage_record(
            Some(task.id),
            "priced",
            UsagePurpose::Agent,
            (100, 10, 40),
            1,
        ),
        usage_record(Some(task.id), "guess", UsagePurpose::Polish, (7, 3, 0), 2),
    ];
    let history = [common::message(1, "round")];
    let outcome = b
        .store
        .checkpoint_with_usage(&task, Some(task.status), &history, &spent)
        .await
        .unwrap();
    assert_eq!(outcome, SaveOutcome::Saved);
    let title = usage_record(None, "priced", UsagePurpose::Title, (5, 1, 0), 3);
    b.other.record_usage(&[title]).await.unwrap();

    let total = b.other.usage(&UsageQuery::default()).await.unwrap();
    assert_eq!(total.len(), 1);
    let total = &total[0];
    assert_eq!(
        (
            total.prompt_tokens,
            total.completion_tokens,
            total.cached_tokens
        ),
        (112, 14, 40)
    );
    assert_eq!((total.calls, total.estimated_calls), (3, 1));
    assert!((total.cost - 0.5).abs() < 1e-9, "{}", total.cost);

    let by_model = UsageQuery {
        group_by: Some(UsageGroup::Model),
        ..UsageQuery::default()
    };
    let keys: Vec<_> = b.store.usage(&by_model).await.unwrap();
    let keys: Vec<_> = keys.iter().map(|t| (t.key.clone(), t.calls)).collect();
    assert_eq!(
        keys,
        [
            (Some("guess".to_owned()), 1),
            (Some("priced".to_owned()), 2)
        ]
    );
    let of_task = UsageQuery {
        task: Some(task.id),
        since: Some(common::at(90)),
        ..UsageQuery::default()
    };
    let late = b.store.usage(&of_task).await.unwrap();
    assert_eq!(
        (late[0].calls, late[0].prompt_tokens),
        (1, 7),
        "the polish only"
    );
    let by_task = UsageQuery {
        group_by: Some(UsageGroup::Task),
        ..UsageQuery::default()
    };
    let tasks = b.store.usage(&by_task).await.unwrap();
    assert!(
        tasks
            .iter()
            .any(|t| t.key.as_deref() == Some(task.id.to_string().as_str()) && t.calls == 2),
        "{tasks:?}"
    );
}

async fn a_title_call_is_counted_with_its_task_and_also_when_the_task_is_refused(b: Backend) {
    use mai_core::usage::{UsagePurpose, UsageQuery};
    let me = person("qq:1");
    let query = CountQuery {
        requester: Some(&me),
        stream: &task("x", 0).stream_id,
        created_by: None,
        recurring: false,
        created_since: None,
    };
    let admitted = task("named", 0);
    let title = usage_record(Some(admitted.id), "m", UsagePurpose::Title, (9, 2, 0), 1);
    let outcome = b
        .store
        .insert_admitted(&admitted, &query, Box::new(|_| Ok(())), &[title])
        .await
        .unwrap();
    assert_eq!(outcome, Ok(()));
    assert!(b.other.get(admitted.id).await.unwrap().is_some());

    let refused = task("refused", 1);
    let title = usage_record(Some(refused.id), "m", UsagePurpose::Title, (4, 1, 0), 2);
    let outcome = b
        .store
        .insert_admitted(
            &refused,
            &query,
            Box::new(|_| Err("over the cap".to_owned())),
            &[title],
        )
        .await
        .unwrap();
    assert_eq!(outcome, Err("over the cap".to_owned()));
    assert!(
        b.other.get(refused.id).await.unwrap().is_none(),
        "refused: not stored"
    );

    let totals = b.other.usage(&UsageQuery::default()).await.unwrap();
    assert_eq!(
        (
            totals[0].calls,
            totals[0].prompt_tokens,
            totals[0].completion_tokens
        ),
        (2, 13, 3),
        "both title calls are counted"
    );
}

async fn a_usage_record_written_twice_is_stored_once(b: Backend) {
    use mai_core::usage::{UsagePurpose, UsageQuery};
    let mut task = task("spent", 0);
    b.store.insert(&task).await.unwrap();
    let first = usage_record(Some(task.id), "m", UsagePurpose::Agent, (10, 2, 0), 1);
    let second = usage_record(Some(task.id), "m", UsagePurpose::Agent, (20, 4, 0), 2);
    // Carried in the task's record by a checkpoint, then written by recovery and once more by
    // the run that resumed it: the same two records, and one of them twice in one write.
    task.metadata.usage_unwritten = vec![first.clone(), second.clone()];
    let history = [message(1, "round 1")];
    b.store
        .checkpoint(&task, Some(task.status), &history)
        .await
        .unwrap();
    let carried = b.other.get(task.id).await.unwrap().unwrap();
    assert_eq!(
        carried.metadata.usage_unwritten,
        [first.clone(), second.clone()]
    );
    b.store
        .record_usage(std::slice::from_ref(&first))
        .await
        .unwrap();
    b.other
        .record_usage(&[first.clone(), second.clone(), second])
        .await
        .unwrap();
    let totals = b.other.usage(&UsageQuery::default()).await.unwrap();
    assert_eq!(
        (totals[0].calls, totals[0].prompt_tokens),
        (2, 30),
        "each record once"
    );
}
