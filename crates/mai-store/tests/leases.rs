//! Several instances on one PostgreSQL database: a running task is leased to the instance that
//! runs it, saves are fenced by that lease, stop requests reach the holder, and changes are
//! announced on `mai_tasks`. Each test has its own throwaway cluster; "instances" are stores
//! writing under different names. Expiry is shown with a zero-length lease (expired as soon as
//! it is taken), never by waiting for a clock. Under a cluster-wide cap, two instances racing for
//! the last slot get one claim between them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;
#[path = "../../../testing/postgres.rs"]
mod pg_cluster;

use std::time::Duration;

use futures::StreamExt;
use mai_core::lease::{Notice, StopKind, StopRequest};
use mai_core::store::{HistoryKind, NewHistoryEntry, Notices, SaveOutcome, TaskStore};
use mai_core::task::{TaskRecord, TaskStatus};
use mai_store::{PgOptions, PgStore};

use common::{at, task};

/// A store on `url` writing as `instance` with leases of `lease`.
async fn instance(url: &str, instance: Option<&str>, lease: Duration) -> PgStore {
    let options = PgOptions {
        instance: instance.map(str::to_owned),
        lease,
        ..PgOptions::default()
    };
    PgStore::connect_with(url, &options).await.unwrap()
}

/// `task` moved to running at `at(seconds)`, as a claim writes it.
fn running(mut task: TaskRecord, seconds: i64) -> TaskRecord {
    task.transition(TaskStatus::Running, "scheduler", "dispatched", at(seconds))
        .unwrap();
    task
}

/// The next notice, waited for (bounded: a missing notice fails the test, it does not hang it).
async fn next(notices: &mut Notices) -> Notice {
    tokio::time::timeout(Duration::from_secs(30), notices.next())
        .await
        .expect("no notice arrived within 30 s")
        .expect("the notice stream ended")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_from_an_instance_whose_lease_was_taken_over_is_refused() {
    let Some(cluster) = pg_cluster::PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    // `a` takes leases that expire as soon as they are taken: as if it had stopped renewing.
    let a = instance(&url, Some("a"), Duration::ZERO).await;
    let b = instance(&url, Some("b"), Duration::from_secs(60)).await;
    let cli = instance(&url, None, Duration::from_secs(60)).await;
    assert!(a.shared() && b.shared());

    let pending = task("leased", 0);
    a.insert(&pending).await.unwrap();
    let claimed = running(pending, 1);
    assert_eq!(
        a.save(&claimed, Some(TaskStatus::Pending)).await.unwrap(),
        SaveOutcome::Saved
    );
    assert_eq!(
        b.expired_leases().await.unwrap(),
        vec![(claimed.id, None)],
        "a's lease ran out: the task is there for another instance to adopt"
    );

    // `b` adopts it: its save passes the fence of an expired lease and takes the lease.
    let mut adopted = claimed.clone();
    adopted.updated_at = at(2);
    assert_eq!(
        b.save(&adopted, Some(TaskStatus::Running)).await.unwrap(),
        SaveOutcome::Saved
    );
    assert!(
        b.expired_leases().await.unwrap().is_empty(),
        "b's lease is live"
    );

    // `a` comes back and checkpoints: refused, nothing written.
    let mut stale = claimed.clone();
    stale.updated_at = at(3);
    assert_eq!(
        a.checkpoint(
            &stale,
            Some(TaskStatus::Running),
            &[common::message(0, "late")]
        )
        .await
        .unwrap(),
        SaveOutcome::Conflict {
            actual: TaskStatus::Running
        },
        "a save under another instance's live lease is a conflict"
    );
    assert!(a.history(claimed.id, 0).await.unwrap().is_empty());
    assert_eq!(a.get(claimed.id).await.unwrap().unwrap().updated_at, at(2));

    // Nor can a command that holds no lease end it behind the runner's back…
    let mut cancelled = adopted.clone();
    cancelled
        .transition(TaskStatus::Cancelled, "cli", "cancelled", at(4))
        .unwrap();
    assert!(matches!(
        cli.save(&cancelled, Some(TaskStatus::Running))
            .await
            .unwrap(),
        SaveOutcome::Conflict { .. }
    ));
    // …while the holder's own save moves it on, and clears the lease.
    let mut done = adopted.clone();
    done.transition(TaskStatus::Completed, "scheduler", "answered", at(5))
        .unwrap();
    assert_eq!(
        b.save(&done, Some(TaskStatus::Running)).await.unwrap(),
        SaveOutcome::Saved
    );
    assert!(b.renew_leases().await.unwrap().is_empty());
    let owner = cluster.psql_as_superuser(
        pg_cluster::PgCluster::database_name(&url),
        "SELECT coalesce(lease_owner, 'none') || '|' || (lease_until IS NULL) FROM tasks",
    );
    assert_eq!(owner, "none|true", "a finished task holds no lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_requests_and_changes_are_announced_to_every_listening_instance() {
    let Some(cluster) = pg_cluster::PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let a = instance(&url, Some("a"), Duration::from_secs(60)).await;
    let b = instance(&url, Some("b"), Duration::from_secs(60)).await;
    let mut heard = b.notices().await.unwrap().expect("a shared store listens");

    let pending = task("announced", 0);
    let id = pending.id;
    let cancel = StopRequest {
        kind: StopKind::Cancel,
        actor: "qq:7".to_owned(),
    };
    assert!(
        !b.request_stop(id, &cancel).await.unwrap(),
        "no such task yet: nothing to stop"
    );
    a.insert(&pending).await.unwrap();
    assert_eq!(next(&mut heard).await, Notice::Changed(id), "inserted");
    assert!(
        !b.request_stop(id, &cancel).await.unwrap(),
        "a pending task is stopped directly, not by request"
    );
    let claimed = running(pending, 1);
    a.save(&claimed, Some(TaskStatus::Pending)).await.unwrap();
    assert_eq!(next(&mut heard).await, Notice::Changed(id), "claimed");

    // A checkpoint of a running task announces nothing; the injection after it does.
    a.checkpoint(
        &claimed,
        Some(TaskStatus::Running),
        &[common::message(0, "r")],
    )
    .await
    .unwrap();
    let injection = NewHistoryEntry {
        kind: HistoryKind::Injection,
        ..common::message(0, "also this")
    };
    b.append_history(id, &[injection]).await.unwrap();
    assert_eq!(next(&mut heard).await, Notice::Injected(id));

    assert!(b.request_stop(id, &cancel).await.unwrap());
    assert_eq!(next(&mut heard).await, Notice::Stop(id, cancel.clone()));
    assert_eq!(
        a.renew_leases().await.unwrap(),
        vec![(id, Some(cancel))],
        "the holder finds the request on its next renewal, even had it missed the notice"
    );
    assert!(
        b.renew_leases().await.unwrap().is_empty(),
        "b holds nothing"
    );
}

/// The claim of a pending task, as the engine's runner makes it.
fn claim_pending() -> mai_core::store::Change {
    Box::new(|task| {
        task.status == TaskStatus::Pending
            && task
                .transition(TaskStatus::Running, "scheduler", "dispatched", at(5))
                .is_ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_racing_for_the_last_slot_of_a_cluster_wide_cap_get_one_claim() {
    use mai_core::store::Claim;
    let Some(cluster) = pg_cluster::PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let a = instance(&url, Some("a"), Duration::from_secs(60)).await;
    let b = instance(&url, Some("b"), Duration::from_secs(60)).await;
    let (first, second, third) = (task("one", 0), task("two", 1), task("three", 2));
    for pending in [&first, &second, &third] {
        a.insert(pending).await.unwrap();
    }
    // Cap 2, one slot taken: the two claims race for the other.
    let taken = a.claim(first.id, claim_pending(), Some(2)).await.unwrap();
    assert!(matches!(taken, Claim::Claimed(_)), "{taken:?}");
    for _ in 0..3 {
        let (on_a, on_b) = tokio::join!(
            a.claim(second.id, claim_pending(), Some(2)),
            b.claim(third.id, claim_pending(), Some(2)),
        );
        let outcomes = [on_a.unwrap(), on_b.unwrap()];
        let claimed = outcomes
            .iter()
            .filter(|o| matches!(o, Claim::Claimed(_)))
            .count();
        assert_eq!(claimed, 1, "one claim takes the last slot: {outcomes:?}");
        assert!(outcomes.contains(&Claim::Full), "{outcomes:?}");
        // The refused task is as it was: still pending, claimable once a slot frees.
        let (won, lost, holder) = match &outcomes[0] {
            Claim::Claimed(_) => (&second, &third, &a),
            _ => (&third, &second, &b),
        };
        assert_eq!(
            b.get(lost.id).await.unwrap().unwrap().status,
            TaskStatus::Pending
        );
        // Its holder puts the winner back to pending for the next round of the race.
        let mut back = holder.get(won.id).await.unwrap().unwrap();
        back.force(TaskStatus::Pending, "test", "raced again", at(6));
        assert_eq!(
            holder.save(&back, Some(TaskStatus::Running)).await.unwrap(),
            SaveOutcome::Saved
        );
    }
    // Without a cap nothing is counted; a task no longer pending is declined, not refused.
    assert!(matches!(
        b.claim(second.id, claim_pending(), None).await.unwrap(),
        Claim::Claimed(_)
    ));
    assert_eq!(
        b.claim(second.id, claim_pending(), Some(1)).await.unwrap(),
        Claim::Declined
    );
}
