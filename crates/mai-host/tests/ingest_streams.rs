//! Ingestion, streams and the shared database file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::{at, group_msg, host, private_msg};
use mai_core::host::{ChatTarget, Host};
use mai_core::ids::StreamId;
use mai_host::{EmbeddedConfig, EmbeddedHost, IncomingMessage, stream_id_for};

fn sid(id: &str) -> StreamId {
    StreamId::new(id).unwrap()
}

#[tokio::test]
async fn the_host_shares_the_task_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mai-agent.db");
    let store = mai_store::SqliteStore::open(&path).await.unwrap();
    let host = EmbeddedHost::open(&path, EmbeddedConfig::default())
        .await
        .unwrap();
    host.ingest_message(&private_msg("1", "A", "hello", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap();
    assert_eq!(host.schema_version().await.unwrap(), 2);
    assert_eq!(store.schema_version().await.unwrap(), 8);
    host.close().await;
    store.close().await;

    // Reopened in the other order, each still sees only its own migrations.
    let host = EmbeddedHost::open(&path, EmbeddedConfig::default())
        .await
        .unwrap();
    let store = mai_store::SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 8);
    assert_eq!(
        host.recent_messages(&sid("qq:1"), 5).await.unwrap()[0].text,
        "hello"
    );
}

/// As `serve` has it: the host writes through the task store's writer, in the same queue.
/// Messages and task writes interleaving on one file all land, none waits for SQLite's busy
/// handler to give up, and nothing deadlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_and_the_task_store_write_one_file_through_one_queue() {
    use mai_core::store::TaskStore;
    use mai_core::task::{NewTask, TaskLevel, TaskRecord, TaskStatus, Trigger};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        mai_store::SqliteStore::open(dir.path().join("mai-agent.db"))
            .await
            .unwrap(),
    );
    let host = Arc::new(
        EmbeddedHost::with_database(store.database().clone(), EmbeddedConfig::default())
            .await
            .unwrap(),
    );
    let mut writes = Vec::new();
    for i in 0..40_i64 {
        let host = host.clone();
        writes.push(tokio::spawn(async move {
            let when = at(2024, 5, 1, 9, 0) + chrono::Duration::seconds(i);
            host.ingest_message(&group_msg("7", "1", "A", &format!("message {i}"), when))
                .await
                .unwrap();
        }));
        let store = store.clone();
        writes.push(tokio::spawn(async move {
            let task = TaskRecord::new(
                NewTask {
                    title: format!("task {i}"),
                    intent: "i".into(),
                    level: TaskLevel::Agent,
                    owner: "qq:1".parse().unwrap(),
                    stream_id: StreamId::new("qq:group:7").unwrap(),
                    platform: "qq".into(),
                    reply_stream_id: None,
                    trigger: Trigger::Now,
                    priority: 0,
                    max_runtime_min: 0,
                },
                TaskStatus::Pending,
                "qq:1",
                chrono::Utc::now(),
            );
            store.insert(&task).await.unwrap();
        }));
    }
    let all = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        for write in writes {
            write.await.unwrap();
        }
    });
    assert!(all.await.is_ok(), "the writers deadlocked");
    assert_eq!(
        host.recent_messages(&sid("qq:group:7"), 100)
            .await
            .unwrap()
            .len(),
        40
    );
    let tasks = store
        .list(&mai_core::store::TaskFilter::default())
        .await
        .unwrap();
    assert_eq!(tasks.len(), 40);
}

on_both_backends! {
async fn ingesting_creates_streams_and_people() {
    let t = host().await;
    let mut first = group_msg("42", "1001", "小明", "大家好", at(2024, 5, 1, 9, 0));
    first.group_name = Some("技术交流群".into());
    let stored = t.host.ingest_message(&first).await.unwrap();
    assert_eq!(stored.stream_id.as_str(), "qq:group:42");
    t.host
        .ingest_message(&group_msg(
            "42",
            "1002",
            "Alice",
            "hello",
            at(2024, 5, 1, 9, 1),
        ))
        .await
        .unwrap();
    let private = t
        .host
        .ingest_message(&private_msg(
            "1002",
            "Alice",
            "hi bot",
            at(2024, 5, 2, 8, 0),
        ))
        .await
        .unwrap();
    assert_eq!(private.stream_id.as_str(), "qq:1002");

    let group = t
        .host
        .stream_info(&sid("qq:group:42"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.name, "技术交流群");
    assert_eq!(group.platform, "qq");
    assert_eq!(
        group.target,
        ChatTarget::Group {
            group_id: "42".into()
        }
    );
    let dm = t.host.stream_info(&sid("qq:1002")).await.unwrap().unwrap();
    assert_eq!(dm.name, "Alice");
    assert_eq!(
        dm.target,
        ChatTarget::Private {
            user_id: "1002".into()
        }
    );
    assert!(t.host.stream_info(&sid("qq:404")).await.unwrap().is_none());

    let listed: Vec<String> = t
        .host
        .list_streams(10)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.stream_id.to_string())
        .collect();
    assert_eq!(
        listed,
        ["qq:1002", "qq:group:42"],
        "most recently active first"
    );

    let ming = t.host.find_person("小明").await.unwrap().unwrap();
    assert_eq!(ming.accounts, vec![("qq".to_owned(), "1001".to_owned())]);
    let alice = t.host.find_person("Alice").await.unwrap().unwrap();
    assert_eq!(alice.accounts, vec![("qq".to_owned(), "1002".to_owned())]);

    let recent = t
        .host
        .recent_messages(&sid("qq:group:42"), 1)
        .await
        .unwrap();
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0].sender, "Alice");
    let all = t
        .host
        .recent_messages(&sid("qq:group:42"), 10)
        .await
        .unwrap();
    let texts: Vec<&str> = all.iter().map(|line| line.text.as_str()).collect();
    assert_eq!(texts, ["大家好", "hello"], "oldest first");
    assert_eq!(all[0].at, at(2024, 5, 1, 9, 0));
}

async fn a_new_display_name_becomes_an_alias_and_renames_the_private_chat() {
    let t = host().await;
    t.host
        .ingest_message(&private_msg("7", "小明", "在吗", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap();
    t.host
        .ingest_message(&private_msg("7", "明哥", "在吗?", at(2024, 5, 1, 9, 5)))
        .await
        .unwrap();
    let person = t.host.find_person("明哥").await.unwrap().unwrap();
    assert_eq!(person.name, "小明");
    assert_eq!(person.aliases, ["明哥"]);
    let stream = t.host.stream_info(&sid("qq:7")).await.unwrap().unwrap();
    assert_eq!(stream.name, "明哥");
}

async fn a_channel_stream_id_is_kept_and_found_again_by_target() {
    let t = host().await;
    let mut message = group_msg("9", "1", "Bob", "one", at(2024, 5, 1, 9, 0));
    message.stream_id = Some(sid("tg-chat-9"));
    let first = t.host.ingest_message(&message).await.unwrap();
    assert_eq!(first.stream_id.as_str(), "tg-chat-9");
    let again = t
        .host
        .ingest_message(&group_msg("9", "2", "Carol", "two", at(2024, 5, 1, 9, 1)))
        .await
        .unwrap();
    assert_eq!(
        again.stream_id.as_str(),
        "tg-chat-9",
        "one stream per group"
    );
    assert_eq!(t.host.list_streams(10).await.unwrap().len(), 1);
    assert_eq!(
        t.host
            .recent_messages(&sid("tg-chat-9"), 10)
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn malformed_ids_are_refused_and_nothing_is_stored() {
    let t = host().await;
    let spaced = private_msg("a b", "X", "hi", at(2024, 5, 1, 9, 0));
    let err = t.host.ingest_message(&spaced).await.unwrap_err();
    assert!(err.to_string().contains("whitespace"), "{err}");
    let planner = IncomingMessage {
        platform: "planner".into(),
        ..private_msg("1", "X", "hi", at(2024, 5, 1, 9, 0))
    };
    assert!(t.host.ingest_message(&planner).await.is_err());
    assert!(t.host.list_streams(10).await.unwrap().is_empty());
    assert!(t.host.find_person("X").await.unwrap().is_none());
}

async fn open_stream_is_idempotent_and_uses_the_derived_id() {
    let t = host().await;
    t.host
        .ingest_message(&private_msg("5", "Dana", "hey", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap();
    let group = ChatTarget::Group {
        group_id: "77".into(),
    };
    let first = t.host.open_stream("qq", &group).await.unwrap();
    let second = t.host.open_stream("qq", &group).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(first, stream_id_for("qq", &group).unwrap());
    assert_eq!(first.as_str(), "qq:group:77");

    let dana = ChatTarget::Private {
        user_id: "5".into(),
    };
    assert_eq!(
        t.host.open_stream("qq", &dana).await.unwrap().as_str(),
        "qq:5"
    );
    let fresh = ChatTarget::Private {
        user_id: "6".into(),
    };
    let opened = t.host.open_stream("telegram", &fresh).await.unwrap();
    assert_eq!(opened.as_str(), "telegram:6");
    assert_eq!(t.host.list_streams(10).await.unwrap().len(), 3);
    assert_eq!(
        t.host.list_streams(10).await.unwrap()[0].stream_id.as_str(),
        "qq:5",
        "opening a chat is not activity"
    );
    assert!(
        t.host
            .open_stream(
                "qq",
                &ChatTarget::Group {
                    group_id: "a:b".into()
                }
            )
            .await
            .is_err()
    );
}
}
