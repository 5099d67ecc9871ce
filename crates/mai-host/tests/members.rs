//! Membership (`is_member`, `add_member`) and display names: the questions a task's reach check
//! asks the embedded host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::{RecordingChannel, at, group_msg, host, private_msg};
use mai_core::host::{Delivery, Host};
use mai_core::ids::{PersonId, StreamId};
use mai_host::{EmbeddedConfig, EmbeddedHost, IncomingMessage};

fn sid(id: &str) -> StreamId {
    StreamId::new(id).unwrap()
}

fn person(id: &str) -> PersonId {
    id.parse().unwrap()
}

/// A database written by a build before membership was recorded: opening it records everyone who
/// had written in a group, and not the bot.
#[tokio::test]
async fn upgrading_records_everyone_already_seen_writing() {
    use sha2::Digest as _;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.db");
    // Schema version 1 as that build left it: its script, and its record with sqlx's layout.
    let first = include_str!("../migrations/0001_host.sql");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(first).unwrap();
    conn.execute_batch(
        "CREATE TABLE _mai_host_migrations (version BIGINT PRIMARY KEY, \
         description TEXT NOT NULL, installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, \
         success BOOLEAN NOT NULL, checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
    )
    .unwrap();
    let checksum = sha2::Sha384::digest(first.as_bytes()).to_vec();
    conn.execute(
        "INSERT INTO _mai_host_migrations (version, description, success, checksum, \
         execution_time) VALUES (1, 'host', 1, ?, 0)",
        [checksum],
    )
    .unwrap();
    for statement in [
        "INSERT INTO host_streams VALUES ('qq:group:42', 'qq', 'group', '42', 'g', 1)",
        "INSERT INTO host_messages (stream_id, user_id, sender_name, text, at, is_bot) \
         VALUES ('qq:group:42', '1001', '小明', 'hi', 1, 0), \
                ('qq:group:42', 'self', 'mai', 'hello', 2, 1)",
    ] {
        conn.execute_batch(statement).unwrap();
    }
    drop(conn);

    let host = EmbeddedHost::open(&path, EmbeddedConfig::default())
        .await
        .unwrap();
    assert_eq!(host.schema_version().await.unwrap(), 2);
    let group = sid("qq:group:42");
    assert!(host.is_member(&person("qq:1001"), &group).await.unwrap());
    assert!(!host.is_member(&person("qq:self"), &group).await.unwrap());
}

on_both_backends! {
async fn a_person_belongs_to_the_groups_they_wrote_in_and_to_their_own_private_chat_only() {
    let t = host().await;
    let group = t
        .host
        .ingest_message(&group_msg("42", "1001", "小明", "hi", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap()
        .stream_id;
    t.host
        .ingest_message(&group_msg(
            "43",
            "1002",
            "Alice",
            "yo",
            at(2024, 5, 1, 9, 1),
        ))
        .await
        .unwrap();
    let alice_private = t
        .host
        .ingest_message(&private_msg(
            "1002",
            "Alice",
            "hi bot",
            at(2024, 5, 1, 9, 2),
        ))
        .await
        .unwrap()
        .stream_id;
    let member = |p: &'static str, s: StreamId| {
        let host = &t.host;
        async move { host.is_member(&person(p), &s).await.unwrap() }
    };
    assert!(member("qq:1001", group.clone()).await);
    assert!(
        !member("qq:1002", group.clone()).await,
        "Alice never wrote in group 42"
    );
    assert!(member("qq:1002", alice_private.clone()).await);
    assert!(
        !member("qq:1001", alice_private).await,
        "a private chat is its person's only"
    );
    assert!(
        !member("telegram:1001", group.clone()).await,
        "the same user id on another platform is someone else"
    );
    assert!(
        !member("qq:1001", sid("qq:group:99")).await,
        "unknown stream"
    );

    // What the bot says in a group makes no one a member.
    let channel = RecordingChannel::new(Delivery::Sent);
    t.host.register_channel("qq", channel);
    t.host.send_text(&group, "hello all").await.unwrap();
    assert!(!member("qq:self", group).await);
}

async fn a_message_written_into_someone_elses_private_chat_does_not_make_its_sender_a_member() {
    let t = host().await;
    let bob = t
        .host
        .ingest_message(&private_msg("2002", "Bob", "hi", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap()
        .stream_id;
    // A channel that names the stream itself could file a message from someone else there.
    let stray = IncomingMessage {
        stream_id: Some(bob.clone()),
        ..private_msg("1001", "Mallory", "let me in", at(2024, 5, 1, 9, 1))
    };
    assert_eq!(t.host.ingest_message(&stray).await.unwrap().stream_id, bob);
    assert!(!t.host.is_member(&person("qq:1001"), &bob).await.unwrap());
    assert!(t.host.is_member(&person("qq:2002"), &bob).await.unwrap());
}

async fn a_known_member_who_never_wrote_belongs_to_the_group() {
    let t = host().await;
    let group = t
        .host
        .ingest_message(&group_msg("42", "1001", "小明", "hi", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap()
        .stream_id;
    let private = t
        .host
        .ingest_message(&private_msg("1002", "Alice", "hi", at(2024, 5, 1, 9, 1)))
        .await
        .unwrap()
        .stream_id;
    let carol = person("qq:3003");
    assert!(!t.host.is_member(&carol, &group).await.unwrap());
    t.host.add_member(&carol, &group).await.unwrap();
    t.host.add_member(&carol, &group).await.unwrap(); // idempotent
    assert!(t.host.is_member(&carol, &group).await.unwrap());

    for (who, stream, why) in [
        (&carol, &private, "a private chat"),
        (&carol, &sid("qq:group:99"), "an unknown stream"),
        (&person("telegram:3003"), &group, "another platform"),
    ] {
        let error = t.host.add_member(who, stream).await.unwrap_err();
        assert!(
            error.to_string().contains("not a known group chat"),
            "{why}: {error}"
        );
    }
    assert!(!t.host.is_member(&carol, &private).await.unwrap());
}

async fn display_names_are_the_latest_an_account_used() {
    let t = host().await;
    let alice = person("qq:1002");
    assert_eq!(t.host.display_name(&alice).await.unwrap(), None);
    for (name, minute) in [("Alice", 0), ("Ally", 1)] {
        t.host
            .ingest_message(&group_msg(
                "42",
                "1002",
                name,
                "hi",
                at(2024, 5, 1, 9, minute),
            ))
            .await
            .unwrap();
    }
    assert_eq!(
        t.host.display_name(&alice).await.unwrap().as_deref(),
        Some("Ally")
    );
    assert_eq!(
        t.host.display_name(&person("telegram:1002")).await.unwrap(),
        None
    );
}
}
