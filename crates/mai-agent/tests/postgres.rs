//! `mai-agent serve` on PostgreSQL (`[storage] url = "postgres://…"`), against a throwaway
//! cluster (`testing/postgres.rs`): a task created through the HTTP API runs against the fake
//! model and completes, and its record, status log and history are in PostgreSQL — not in the
//! data directory's SQLite file, which keeps only the chat tables. `backup` refuses, pointing to
//! `pg_dump`.

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
    let chats = rusqlite_tables(&data.path().join("mai-agent.db"));
    assert!(chats.iter().any(|t| t == "host_messages"), "{chats:?}");
    assert!(
        !chats.iter().any(|t| t == "tasks"),
        "no task table in the file: {chats:?}"
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

/// The tables of a SQLite file, read with the sqlite3 schema table through the binary's own
/// dependency (no sqlite3 program needed).
fn rusqlite_tables(path: &std::path::Path) -> Vec<String> {
    let connection = mai_store::rusqlite::Connection::open(path).unwrap();
    let mut select = connection
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap();
    select
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<Vec<String>, _>>()
        .unwrap()
}
