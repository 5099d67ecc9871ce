//! Compare-and-set saves under contention on a real SQLite file, through two pools on the same
//! file (as two processes would), and the status log they leave behind.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{at, db_path, message, task};
use mai_core::store::{SaveOutcome, TaskStore};
use mai_core::task::{TaskRecord, TaskStatus};
use mai_store::SqliteStore;
use tokio::sync::Barrier;

use TaskStatus::*;

/// Two stores (two pools) on one fresh file, and the directory that keeps it alive.
async fn two_stores() -> (tempfile::TempDir, Arc<SqliteStore>, Arc<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    let first = SqliteStore::open(db_path(dir.path())).await.unwrap();
    let second = SqliteStore::open(db_path(dir.path())).await.unwrap();
    (dir, Arc::new(first), Arc::new(second))
}

#[derive(Debug)]
struct Attempt {
    writer: usize,
    actor: String,
    snapshot: TaskRecord,
    expected: TaskStatus,
    wrote: TaskStatus,
    outcome: SaveOutcome,
}

/// Loads a snapshot, moves it one step (writer 0 forces `completed` in its last round), saves
/// it with the snapshot's status as the expected one. `None` when the snapshot is terminal.
async fn race_once(
    store: &SqliteStore,
    writer: usize,
    round: usize,
    task: &TaskRecord,
) -> Option<Attempt> {
    let snapshot = store.get(task.id).await.unwrap().unwrap();
    let expected = snapshot.status;
    if expected.is_terminal() {
        return None;
    }
    let mut changed = snapshot.clone();
    let actor = format!("writer-{writer}.{round}");
    let when = at((100 * round + writer) as i64);
    if writer == 0 && round == RACE_ROUNDS - 1 {
        changed.force(Completed, &actor, "forced", when);
    } else {
        let next: Vec<TaskStatus> = TaskStatus::ALL
            .into_iter()
            .filter(|status| !status.is_terminal() && expected.can_become(*status))
            .collect();
        changed
            .transition(next[(writer + round) % next.len()], &actor, "racing", when)
            .unwrap();
    }
    let outcome = store.save(&changed, Some(expected)).await.unwrap();
    Some(Attempt {
        writer,
        actor,
        snapshot,
        expected,
        wrote: changed.status,
        outcome,
    })
}

/// Attempts per writer in the race.
const RACE_ROUNDS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_snapshots_save_exactly_the_winners_and_never_overwrite_a_terminal_status() {
    const WRITERS: usize = 64;
    let (_dir, first, second) = two_stores().await;
    let mut contended = task("contended", 0);
    contended
        .transition(Running, "scheduler", "dispatched", at(1))
        .unwrap();
    first.insert(&contended).await.unwrap();
    let initial_log = contended.status_log.clone();

    let barrier = Arc::new(Barrier::new(WRITERS));
    let racers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let store = Arc::clone(if writer % 2 == 0 { &first } else { &second });
            let barrier = Arc::clone(&barrier);
            let contended = contended.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let mut attempts = Vec::new();
                for round in 0..RACE_ROUNDS {
                    match race_once(&store, writer, round, &contended).await {
                        Some(attempt) => attempts.push(attempt),
                        None => break,
                    }
                }
                attempts
            })
        })
        .collect();
    let mut attempts = Vec::new();
    for racer in racers {
        attempts.extend(racer.await.unwrap());
    }

    let stored = first.get(contended.id).await.unwrap().unwrap();
    let log = &stored.status_log;
    assert_eq!(
        log[..initial_log.len()],
        initial_log[..],
        "nothing before was rewritten"
    );
    let appended = &log[initial_log.len()..];
    let winners: Vec<&Attempt> = attempts
        .iter()
        .filter(|attempt| attempt.outcome == SaveOutcome::Saved)
        .collect();
    assert!(
        !winners.is_empty(),
        "the first commit always finds its expected status"
    );
    assert_eq!(
        appended.len(),
        winners.len(),
        "one log line per winner, nothing else"
    );
    let winner_actors: BTreeSet<String> = winners
        .iter()
        .map(|attempt| attempt.actor.clone())
        .collect();
    let logged_actors: BTreeSet<String> = appended.iter().map(|line| line.actor.clone()).collect();
    assert_eq!(
        logged_actors, winner_actors,
        "exactly the winners were saved"
    );

    for (index, line) in log.iter().enumerate().skip(initial_log.len()) {
        let attempt = winners
            .iter()
            .find(|attempt| attempt.actor == line.actor)
            .unwrap();
        assert_eq!(line.status, attempt.wrote);
        assert_eq!(
            log[index - 1].status,
            attempt.expected,
            "{} won only because the stored status was the one it expected",
            line.actor
        );
    }
    for attempt in &attempts {
        if let SaveOutcome::Conflict { actual } = attempt.outcome {
            assert_ne!(actual, attempt.expected, "{}", attempt.actor);
        }
    }
    let terminal_at = log.iter().position(|line| line.status.is_terminal());
    if let Some(terminal_at) = terminal_at {
        assert_eq!(
            terminal_at,
            log.len() - 1,
            "nothing was written after a terminal status"
        );
    }
    assert_eq!(stored.status, log.last().unwrap().status);

    // A fresh writer cancels; then every stale snapshot tries again, all at once.
    let mut fresh = second.get(contended.id).await.unwrap().unwrap();
    if !fresh.status.is_terminal() {
        let expected = fresh.status;
        fresh.force(Cancelled, "canceller", "cancel", at(1000));
        assert_eq!(
            second.save(&fresh, Some(expected)).await.unwrap(),
            SaveOutcome::Saved
        );
    }
    let settled = first.get(contended.id).await.unwrap().unwrap();
    assert!(settled.status.is_terminal());
    let replays: Vec<_> = attempts
        .into_iter()
        .map(|attempt| {
            let store = Arc::clone(if attempt.writer % 2 == 0 {
                &first
            } else {
                &second
            });
            tokio::spawn(async move {
                let mut stale = attempt.snapshot.clone();
                stale.force(Running, "stale", "replay", at(2000));
                store.save(&stale, Some(attempt.expected)).await.unwrap()
            })
        })
        .collect();
    for replay in replays {
        assert_eq!(
            replay.await.unwrap(),
            SaveOutcome::Conflict {
                actual: settled.status
            }
        );
    }
    assert_eq!(first.get(contended.id).await.unwrap().unwrap(), settled);
}

#[tokio::test]
async fn a_stale_snapshot_never_overwrites_a_terminal_status() {
    let (_dir, store, _) = two_stores().await;
    let mut original = task("finish me", 0);
    original
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    store.insert(&original).await.unwrap();

    let mut stale = store.get(original.id).await.unwrap().unwrap();
    let mut finisher = store.get(original.id).await.unwrap().unwrap();
    finisher
        .transition(Completed, "agent", "done", at(2))
        .unwrap();
    assert_eq!(
        store.save(&finisher, Some(Running)).await.unwrap(),
        SaveOutcome::Saved
    );

    stale.transition(Paused, "qq:1", "pause", at(3)).unwrap();
    assert_eq!(
        store.save(&stale, Some(Running)).await.unwrap(),
        SaveOutcome::Conflict { actual: Completed }
    );
    let history = [message(1, "late")];
    assert_eq!(
        store
            .checkpoint(&stale, Some(Running), &history)
            .await
            .unwrap(),
        SaveOutcome::Conflict { actual: Completed }
    );
    assert_eq!(store.get(original.id).await.unwrap(), Some(finisher));
    assert!(store.history(original.id, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_status_that_came_back_to_the_expected_one_still_logs_every_change_in_order() {
    let (_dir, store, _) = two_stores().await;
    let mut original = task("ask twice", 0);
    original
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    store.insert(&original).await.unwrap();

    let mut stale = store.get(original.id).await.unwrap().unwrap();
    let mut other = store.get(original.id).await.unwrap().unwrap();
    other
        .transition(WaitingInput, "agent", "asks", at(2))
        .unwrap();
    assert_eq!(
        store.save(&other, Some(Running)).await.unwrap(),
        SaveOutcome::Saved
    );
    other
        .transition(Running, "qq:1", "answered", at(3))
        .unwrap();
    assert_eq!(
        store.save(&other, Some(WaitingInput)).await.unwrap(),
        SaveOutcome::Saved
    );

    // Running again, so the stale snapshot's compare-and-set passes; its log is behind.
    stale.transition(Paused, "qq:1", "pause", at(4)).unwrap();
    assert_eq!(
        store.save(&stale, Some(Running)).await.unwrap(),
        SaveOutcome::Saved
    );

    let stored = store.get(original.id).await.unwrap().unwrap();
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

#[tokio::test]
async fn an_unconditional_save_writes_but_never_removes_log_lines() {
    let (_dir, store, _) = two_stores().await;
    let mut current = task("overwrite", 0);
    store.insert(&current).await.unwrap();
    let stale = current.clone();
    current
        .transition(Running, "scheduler", "go", at(1))
        .unwrap();
    current
        .transition(WaitingInput, "agent", "asks", at(2))
        .unwrap();
    assert_eq!(
        store.save(&current, None).await.unwrap(),
        SaveOutcome::Saved
    );

    let mut older = stale.clone();
    older.title = "renamed".into();
    assert_eq!(store.save(&older, None).await.unwrap(), SaveOutcome::Saved);
    let stored = store.get(current.id).await.unwrap().unwrap();
    assert_eq!(stored.title, "renamed");
    assert_eq!(
        stored.status_log, current.status_log,
        "the shorter log removed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_writers_on_two_pools_wait_for_the_write_lock_instead_of_failing() {
    const WRITERS: usize = 48;
    const ROUNDS: u32 = 5;
    let (_dir, first, second) = two_stores().await;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let own = task(&format!("own {writer}"), writer as i64);
        first.insert(&own).await.unwrap();
        tasks.push(own);
    }
    let barrier = Arc::new(Barrier::new(WRITERS));
    let writers: Vec<_> = tasks
        .iter()
        .cloned()
        .enumerate()
        .map(|(writer, mut own)| {
            let store = Arc::clone(if writer % 2 == 0 { &first } else { &second });
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                for round in 1..=ROUNDS {
                    own.metadata.rounds = round;
                    own.metadata.history_len = u64::from(round);
                    let outcome = store
                        .checkpoint(&own, Some(Pending), &[message(round, "step")])
                        .await
                        .unwrap();
                    assert_eq!(outcome, SaveOutcome::Saved);
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    for own in &tasks {
        let stored = second.get(own.id).await.unwrap().unwrap();
        assert_eq!(stored.metadata.rounds, ROUNDS);
        let seqs: Vec<u64> = second
            .history(own.id, 0)
            .await
            .unwrap()
            .iter()
            .map(|entry| entry.seq)
            .collect();
        assert_eq!(seqs, (0..u64::from(ROUNDS)).collect::<Vec<_>>());
    }
}

/// `update` reads, changes and writes in one turn of the writer: a change that declines (or a
/// task that does not exist) writes nothing, and a claim racing a compare-and-set cancel ends
/// with exactly one of them written, whichever came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_reads_and_writes_in_one_step_and_races_a_cancel_cleanly() {
    let (_dir, store, _) = two_stores().await;
    let missing = task("never stored", 0);
    let claim = |task: &mut TaskRecord| {
        task.status == Scheduled
            && task.transition(Pending, "scheduler", "due", at(5)).is_ok()
            && task
                .transition(Running, "scheduler", "dispatched", at(5))
                .is_ok()
    };
    assert_eq!(
        store.update(missing.id, Box::new(claim)).await.unwrap(),
        None
    );

    let mut tasks = Vec::new();
    for n in 0..40 {
        let mut scheduled = task(&format!("due {n}"), n);
        scheduled.status = Scheduled;
        scheduled.status_log.clear();
        store.insert(&scheduled).await.unwrap();
        tasks.push(store.get(scheduled.id).await.unwrap().unwrap());
    }
    let declined = store
        .update(tasks[0].id, Box::new(|_: &mut TaskRecord| false))
        .await
        .unwrap();
    assert_eq!(declined, None);
    assert_eq!(
        store.get(tasks[0].id).await.unwrap().as_ref(),
        Some(&tasks[0])
    );

    let mut races = Vec::new();
    for original in &tasks {
        let (claimer, canceller, id) = (store.clone(), store.clone(), original.id);
        let mut cancelled = original.clone();
        cancelled
            .transition(Cancelled, "qq:1", "cancel", at(6))
            .unwrap();
        races.push(tokio::spawn(async move {
            let claimed = tokio::spawn(async move { claimer.update(id, Box::new(claim)).await });
            let cancel = canceller.save(&cancelled, Some(Scheduled)).await.unwrap();
            (claimed.await.unwrap().unwrap(), cancel, cancelled)
        }));
    }
    for race in races {
        let (claimed, cancel, cancelled) = race.await.unwrap();
        let stored = store.get(cancelled.id).await.unwrap().unwrap();
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
