//! Data care, as an operator meets it: the data directory and database are private from the
//! first start (and tightened when they were not), `mai-agent backup` copies a live database,
//! and the copy restores into a new data directory with the tasks in it.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use sse::SseReader;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The database and its WAL companions.
const DATABASE_FILES: [&str; 3] = ["mai-agent.db", "mai-agent.db-wal", "mai-agent.db-shm"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_dir_and_database_are_private_from_the_start_and_tightened_when_not() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut served = Served::start(serve_command(&data, &model, None));
    assert_eq!(mode(&data), 0o700);
    for file in DATABASE_FILES {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    drop(served);

    // Left readable by an older build or by hand: the next start tightens them.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    for file in DATABASE_FILES {
        std::fs::set_permissions(data.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let mut served = Served::start(serve_command(&data, &model, None));
    assert_eq!(mode(&data), 0o700);
    for file in DATABASE_FILES {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    assert!(served.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_serve_runs_restores_into_a_new_data_dir_with_the_task() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut served = Served::start(serve_command(&data, &model, None));
    let client = reqwest::Client::new();
    let mut events = SseReader::new(events(&client, &served.base).await);
    let id = create_console_task(&client, &served.base, "say done").await;
    events
        .wait_status(&id, "completed", "the task completes")
        .await;

    let file = root.path().join("backup.db");
    let backup = mai(&data, &model)
        .arg("backup")
        .arg(&file)
        .output()
        .unwrap();
    assert!(backup.status.success(), "{backup:?}");
    assert!(
        String::from_utf8_lossy(&backup.stdout).contains("backed up"),
        "{backup:?}"
    );
    assert_eq!(mode(&file), 0o600);
    let again = mai(&data, &model)
        .arg("backup")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already exists"),
        "{again:?}"
    );
    assert!(served.terminate().success());

    // Restore (docs/backup.md): the copy becomes the database of a new data directory.
    let restored = root.path().join("restored");
    std::fs::create_dir(&restored).unwrap();
    std::fs::copy(&file, restored.join("mai-agent.db")).unwrap();
    let status = mai(&restored, &model)
        .args(["task", "status", &id, "--json"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let task: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["metadata"]["answer"], "done", "{task}");
}

#[tokio::test]
async fn an_older_build_refuses_a_database_a_newer_one_migrated_and_leaves_it_alone() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let created = mai(&data, &model).args(["task", "list"]).output().unwrap();
    assert!(created.status.success(), "{created:?}");
    // What a newer build's migration leaves in the file.
    let db = rusqlite::Connection::open(data.join("mai-agent.db")).unwrap();
    db.execute(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99, 'from the future', 1, x'00', 0)",
        [],
    )
    .unwrap();
    drop(db);

    let refused = mai(&data, &model).args(["task", "list"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("schema version 99, newer than the newest this build"),
        "{stderr}"
    );
    assert!(stderr.contains("upgrade mai-agent"), "{stderr}");
    let db = rusqlite::Connection::open(data.join("mai-agent.db")).unwrap();
    let newest: i64 = db
        .query_row("SELECT MAX(version) FROM _sqlx_migrations", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(newest, 99, "the file was changed");
}
