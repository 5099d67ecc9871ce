//! People (names, aliases, linked accounts) and `search_users`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::{TestHost, at, group_msg, host, private_msg};
use mai_core::host::{Host, UserQuery};
use mai_core::ids::PersonId;
use mai_host::{IncomingMessage, NewPerson};

/// qq groups 42 `【技术】交流群` and 43 `闲聊群`, a telegram group `Rust 技术`, a private chat
/// with Alice (alias 爱丽丝) and 小明, who has only spoken in a group.
async fn chats() -> TestHost {
    let t = host().await;
    let mut tech = group_msg("42", "1001", "小明", "hi", at(2024, 5, 1, 9, 0));
    tech.group_name = Some("【技术】交流群".into());
    let mut chat = group_msg("43", "1002", "Alice", "hi", at(2024, 5, 2, 9, 0));
    chat.group_name = Some("闲聊群".into());
    let rust = IncomingMessage {
        platform: "telegram".into(),
        group_name: Some("Rust 技术".into()),
        ..group_msg("g1", "t1", "Tom", "hi", at(2024, 5, 3, 9, 0))
    };
    let mut fans = group_msg("44", "1002", "Alice", "hi", at(2024, 5, 4, 9, 0));
    fans.group_name = Some("Alice fans".into());
    let dm = private_msg("1002", "Alice", "hi", at(2024, 5, 1, 8, 0));
    for message in [tech, chat, rust, fans, dm] {
        t.host.ingest_message(&message).await.unwrap();
    }
    t.host.add_alias("Alice", "爱丽丝").await.unwrap();
    t
}

fn keywords(words: &[&str]) -> UserQuery {
    UserQuery {
        keywords: words.iter().map(|w| (*w).to_owned()).collect(),
        limit: 10,
        ..UserQuery::default()
    }
}

async fn hit_ids(t: &TestHost, query: &UserQuery) -> Vec<String> {
    t.host
        .search_users(query)
        .await
        .unwrap()
        .into_iter()
        .map(|hit| hit.stream.stream_id.to_string())
        .collect()
}

on_both_backends! {
async fn find_person_by_exact_name_or_alias_only() {
    let t = host().await;
    let added = t
        .host
        .add_person(&NewPerson {
            name: "小明".into(),
            aliases: vec!["明哥".into()],
            notes: vec!["喜欢 Rust".into()],
            ..NewPerson::default()
        })
        .await
        .unwrap();
    assert_eq!(added.aliases, ["明哥"]);
    let by_alias = t.host.find_person("明哥").await.unwrap().unwrap();
    assert_eq!(by_alias, added);
    assert_eq!(by_alias.notes, ["喜欢 Rust"]);
    assert!(
        t.host.find_person("小").await.unwrap().is_none(),
        "exact only"
    );
    assert!(t.host.add_alias("nobody", "x").await.is_err());
    t.host.add_alias("明哥", "Ming").await.unwrap();
    assert_eq!(
        t.host.find_person("Ming").await.unwrap().unwrap().name,
        "小明"
    );
}

async fn linking_an_account_merges_the_person_created_from_its_messages() {
    let t = host().await;
    t.host
        .ingest_message(&group_msg(
            "42",
            "1001",
            "xm_nick",
            "hi",
            at(2024, 5, 1, 9, 0),
        ))
        .await
        .unwrap();
    let linked = t
        .host
        .add_person(&NewPerson {
            name: "小明".into(),
            accounts: vec![PersonId::new("qq", "1001").unwrap()],
            ..NewPerson::default()
        })
        .await
        .unwrap();
    assert_eq!(linked.accounts, vec![("qq".to_owned(), "1001".to_owned())]);
    assert_eq!(linked.aliases, ["xm_nick"], "the old name became an alias");
    let found = t.host.find_person("xm_nick").await.unwrap().unwrap();
    assert_eq!(
        found.name, "小明",
        "no orphan person is left under the old name"
    );
}

async fn search_users_tolerates_filler_and_ors_keywords() {
    let t = chats().await;
    let mut tech = hit_ids(&t, &keywords(&["技术 群"])).await;
    tech.sort();
    assert_eq!(tech, ["qq:group:42", "telegram:group:g1"]);
    for spelled in ["技术群的", "【技术", "技术交流"] {
        assert!(
            hit_ids(&t, &keywords(&[spelled]))
                .await
                .contains(&"qq:group:42".to_owned()),
            "{spelled}"
        );
    }

    let hits = t
        .host
        .search_users(&keywords(&["爱丽丝的", "闲聊"]))
        .await
        .unwrap();
    let mut found: Vec<(String, String)> = hits
        .into_iter()
        .map(|hit| (hit.stream.stream_id.to_string(), hit.matched))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("qq:1002".to_owned(), "爱丽丝".to_owned()),
            ("qq:group:43".to_owned(), "闲聊群".to_owned()),
        ]
    );

    let by_id = t.host.search_users(&keywords(&["42"])).await.unwrap();
    assert_eq!(by_id[0].stream.stream_id.as_str(), "qq:group:42");
    assert_eq!(by_id[0].matched, "42");

    assert!(hit_ids(&t, &keywords(&["的 群 ！"])).await.is_empty());
    assert!(hit_ids(&t, &keywords(&["nobody"])).await.is_empty());

    // Exact before substring: the person Alice before the group `Alice fans`.
    let alice = hit_ids(&t, &keywords(&["alice"])).await;
    assert_eq!(alice, ["qq:1002", "qq:group:44"]);
}

async fn search_users_filters_by_chat_type_platform_and_limit() {
    let t = chats().await;
    let mut qq_only = keywords(&["技术"]);
    qq_only.platform = Some("qq".into());
    assert_eq!(hit_ids(&t, &qq_only).await, ["qq:group:42"]);

    let mut groups = keywords(&["alice"]);
    groups.chat_type = Some("group".into());
    assert_eq!(hit_ids(&t, &groups).await, ["qq:group:44"]);

    let mut private = keywords(&["alice"]);
    private.chat_type = Some("private".into());
    assert_eq!(hit_ids(&t, &private).await, ["qq:1002"]);

    let mut bad = keywords(&["alice"]);
    bad.chat_type = Some("channel".into());
    assert!(t.host.search_users(&bad).await.is_err());

    let mut everything = UserQuery {
        limit: 2,
        ..UserQuery::default()
    };
    assert_eq!(
        hit_ids(&t, &everything).await,
        ["qq:group:44", "telegram:group:g1"],
        "no keyword: every stream, most recently active first"
    );
    everything.limit = 50;
    assert_eq!(hit_ids(&t, &everything).await.len(), 5);
}

async fn a_person_seen_only_in_groups_is_found_as_a_private_target() {
    let t = chats().await;
    let mut query = keywords(&["小明"]);
    query.chat_type = Some("private".into());
    let hits = t.host.search_users(&query).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].stream.stream_id.as_str(), "qq:1001");
    assert_eq!(hits[0].stream.name, "小明");
    assert_eq!(hits[0].matched, "小明");
    let opened = t.host.stream_info(&hits[0].stream.stream_id).await.unwrap();
    assert_eq!(
        opened.as_ref(),
        Some(&hits[0].stream),
        "the hit is a real stream"
    );
    assert_eq!(
        t.host.search_users(&query).await.unwrap(),
        hits,
        "searching again finds the same stream"
    );
}
}
