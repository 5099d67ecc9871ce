//! `mai-agent serve` on PostgreSQL (`[storage] url = "postgres://…"`), against a throwaway
//! cluster (`testing/postgres.rs`): a task created through the HTTP API runs against the fake
//! model and completes, and its record, status log and history are in PostgreSQL, with the
//! chat's messages — no SQLite file is made in the data directory. `backup` refuses, pointing
//! to `pg_dump`. A second instance starts beside the first, each naming itself in `/healthz`;
//! `storage migrate` moves a SQLite store into an empty PostgreSQL database and refuses a
//! filled one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/postgres.rs"]
mod pg_cluster;

use common::*;
use pg_cluster::PgCluster;

/// Multi-threaded: the fake model server must keep answering while this thread waits on lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_postgres_runs_a_task_from_the_api_to_completion_and_keeps_it_there() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let (model, _) = fake_model(|_, _| answer("done on postgres")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, format!("[storage]\nurl = \"{url}\"\n")).unwrap();
    let client = reqwest::Client::new();
    let mut served = Served::start(serve_command(data.path(), &model, Some(&config)));
    let said = client
        .post(format!("{}/v1/messages", served.base))
        .json(&serde_json::json!({"platform": "console", "user_id": "local", "text": "hi"}))
        .send()
        .await
        .unwrap();
    assert!(said.status().is_success(), "{}", said.text().await.unwrap());
    let id = create_console_task(&client, &served.base, "say done").await;
    let answered = |l: &str| l.contains("mai> done on postgres");
    if !served.log.lock().unwrap().iter().any(|l| answered(l)) {
        served.wait_line("the answer in the console chat", answered);
    }
    let task = task_record(&client, &served.base, &id).await;
    assert_eq!(task["status"], "completed", "{task}");

    // A second instance on the same database — from another data directory, as from another
    // machine — starts beside it, and each names itself (several instances: tests/instances.rs).
    let elsewhere = tempfile::tempdir().unwrap();
    let mut second = serve_command(elsewhere.path(), &model, Some(&config));
    second.env("MAI_AGENT__SERVER__INSTANCE_ID", "second");
    let second = Served::start(second);
    let health = |base: String| {
        let client = client.clone();
        async move {
            let body: serde_json::Value = client
                .get(format!("{base}/healthz"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            body["instance"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(health(second.base.clone()).await, "second");
    let first = health(served.base.clone()).await;
    assert!(
        first.ends_with(&format!("-{}", served.child.id())),
        "the default name is host name and pid: {first}"
    );
    drop(second);
    assert!(served.terminate().success());

    let name = PgCluster::database_name(&url);
    let key = id.replace('-', "");
    let stored = cluster.psql_as_superuser(
        name,
        &format!(
            "SELECT t.status, (SELECT count(*) FROM task_status_log l WHERE l.task_id = t.id), \
             (SELECT count(*) FROM task_history h WHERE h.task_id = t.id) > 0 \
             FROM tasks t WHERE t.id = '{key}'"
        ),
    );
    assert_eq!(
        stored, "completed|3|t",
        "pending → running → completed, with history"
    );
    let said = cluster.psql_as_superuser(
        name,
        "SELECT string_agg(text, ' | ' ORDER BY message_id) FROM host_messages",
    );
    assert_eq!(said, "hi | done on postgres", "the chat, both sides");
    assert!(
        !data.path().join("mai-agent.db").exists(),
        "no SQLite file beside a PostgreSQL store"
    );

    // Read back by a command that is not serve, from the same database.
    let output = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "status", &id, "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["status"], "completed", "{status}");

    let backup = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["backup"])
        .arg(data.path().join("copy.db"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&backup.stderr);
    assert!(!backup.status.success());
    assert!(stderr.contains("pg_dump"), "{stderr}");
}

/// Rows of `table` in the SQLite file at `path`.
fn sqlite_count(path: &std::path::Path, table: &str) -> String {
    let connection = mai_store::rusqlite::Connection::open(path).unwrap();
    let count: i64 = connection
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap();
    count.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_migrate_moves_a_sqlite_store_into_an_empty_postgres_and_refuses_a_filled_one() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let (model, _) = fake_model(|_, _| answer("done on sqlite")).await;
    let data = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut served = Served::start(serve_command(data.path(), &model, None));
    let said = client
        .post(format!("{}/v1/messages", served.base))
        .json(&serde_json::json!({"platform": "console", "user_id": "local", "text": "hi"}))
        .send()
        .await
        .unwrap();
    assert!(said.status().is_success(), "{}", said.text().await.unwrap());
    let id = create_console_task(&client, &served.base, "say done").await;
    let answered = |l: &str| l.contains("mai> done on sqlite");
    if !served.log.lock().unwrap().iter().any(|l| answered(l)) {
        served.wait_line("the answer in the console chat", answered);
    }
    assert!(served.terminate().success());

    let moved = mai(data.path(), &model)
        .args(["storage", "migrate", "--to", &url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&moved.stdout);
    assert!(
        moved.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&moved.stderr)
    );
    assert!(
        stdout.contains("the counts match on both sides"),
        "{stdout}"
    );
    let file = data.path().join("mai-agent.db");
    let name = PgCluster::database_name(&url);
    assert_ne!(sqlite_count(&file, "usage"), "0", "the task's model calls");
    assert!(
        stdout.contains(&format!("{} usage record(s)", sqlite_count(&file, "usage"))),
        "{stdout}"
    );
    for table in [
        "tasks",
        "task_status_log",
        "task_history",
        "usage",
        "host_streams",
        "host_messages",
        "host_accounts",
        "host_members",
    ] {
        assert_eq!(
            cluster.psql_as_superuser(name, &format!("SELECT count(*) FROM {table}")),
            sqlite_count(&file, table),
            "{table}"
        );
    }

    // The copy is a working store: read back through PostgreSQL, searchable, and the ids of the
    // copied rows are not handed out again.
    let config = data.path().join("postgres.toml");
    std::fs::write(&config, format!("[storage]\nurl = \"{url}\"\n")).unwrap();
    let output = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "status", &id, "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["status"], "completed", "{status}");
    let found = cluster.psql_as_superuser(
        name,
        "SELECT text FROM host_messages WHERE grams @> ARRAY['don', 'one'] ORDER BY message_id",
    );
    assert_eq!(found, "done on sqlite");

    let again = mai(data.path(), &model)
        .args(["storage", "migrate", "--to", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success());
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert!(stderr.contains("nothing was copied"), "{stderr}");
}
