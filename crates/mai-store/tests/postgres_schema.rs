//! The task store's schema on PostgreSQL: migrated by the database's owner (no superuser), by
//! one of several instances starting together, refused when newer than this build, and its logs
//! append-only even for a person with psql. Behaviour shared with SQLite: `conformance.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;
#[path = "../../../testing/postgres.rs"]
mod pg_cluster;

use common::{at, task};
use mai_core::store::{TaskFilter, TaskStore};
use mai_core::task::TaskStatus;
use mai_store::PgStore;
use pg_cluster::PgCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_together_migrate_once_as_the_owner_under_the_advisory_lock() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let starters: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PgStore::connect(&url).await })
        })
        .collect();
    for starter in starters {
        let store = starter.await.unwrap().unwrap();
        assert_eq!(
            store.schema_version().await.unwrap(),
            PgStore::latest_schema_version()
        );
    }
    let name = PgCluster::database_name(&url);
    let recorded = cluster.psql_as_superuser(
        name,
        "SELECT count(*) || ' ' || pg_get_userbyid(c.relowner) FROM _mai_task_migrations, \
         pg_class c WHERE c.relname = 'tasks' GROUP BY c.relowner",
    );
    let scripts = PgStore::latest_schema_version();
    assert_eq!(recorded, format!("{scripts} {}", pg_cluster::OWNER));
}

#[tokio::test]
async fn a_database_with_a_newer_schema_is_refused_before_anything_is_written() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let store = PgStore::connect(&url).await.unwrap();
    store.insert(&task("kept", 0)).await.unwrap();
    store.close().await;
    let name = PgCluster::database_name(&url);
    cluster.psql_as_superuser(
        name,
        "INSERT INTO _mai_task_migrations (version, description, success, checksum, \
         execution_time) VALUES (99, 'from the future', TRUE, '\\x00', 0)",
    );
    let error = PgStore::connect(&url).await.unwrap_err().to_string();
    assert!(error.contains("schema version 99"), "{error}");
    assert!(error.contains("upgrade mai-agent"), "{error}");
    assert_eq!(
        cluster.psql_as_superuser(name, "SELECT count(*) FROM tasks"),
        "1"
    );
}

#[tokio::test]
async fn the_status_log_and_history_cannot_be_rewritten_even_by_hand() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let store = PgStore::connect(&url).await.unwrap();
    let agent = task("agent", 0);
    store.insert(&agent).await.unwrap();
    store
        .append_history(agent.id, &[common::message(1, "hello")])
        .await
        .unwrap();
    let mut connection = store.pool().acquire().await.unwrap();
    for sql in [
        "UPDATE task_status_log SET reason = 'rewritten'",
        "UPDATE task_history SET payload = '{}'",
    ] {
        let error = mai_store::sqlx::query(sql)
            .execute(&mut *connection)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("is append-only"), "{error}");
    }
}

#[tokio::test]
async fn pruning_deletes_old_finished_tasks_with_their_log_and_history_but_keeps_a_busy_parent() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let store = PgStore::connect(&cluster.database()).await.unwrap();
    let mut old = task("old", 0);
    old.force(TaskStatus::Completed, "agent", "done", at(1));
    let mut parent = task("parent", 0);
    parent.force(TaskStatus::Completed, "agent", "done", at(1));
    let mut child = task("child", 2);
    child.metadata.parent_task_id = Some(parent.id);
    let mut fresh = task("fresh", 0);
    fresh.force(TaskStatus::Failed, "agent", "broke", at(500));
    for record in [&old, &parent, &child, &fresh] {
        store.insert(record).await.unwrap();
    }
    store
        .append_history(old.id, &[common::message(1, "gone")])
        .await
        .unwrap();
    assert_eq!(store.prune_finished(at(100)).await.unwrap(), 1);
    let mut left: Vec<String> = store
        .list(&TaskFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.title)
        .collect();
    left.sort();
    assert_eq!(left, ["child", "fresh", "parent"]);
    assert!(store.history(old.id, 0).await.unwrap().is_empty());
}
