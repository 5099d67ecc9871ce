//! The information tools: defaults, `[search] max_results` caps, times, which chats a task may
//! read (its reach), and host failures.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use mai_core::config::Config;
use mai_core::host::{MemoryMode, UserQuery};
use mai_core::role::Role;
use mai_core::tool::{OutcomeKind, ToolRegistry, Visibility};
use mai_tools::info::info_tools;
use serde_json::json;

use crate::fakes::{
    FakeHost, HostCall, REQUESTER, STREAM, call, ctx, ctx_for, ctx_with, error_of, registry,
};

const NAMES: [&str; 5] = [
    "search_memory",
    "fetch_history",
    "query_person",
    "search_users",
    "get_frequency",
];

fn setup() -> (Arc<FakeHost>, ToolRegistry) {
    let host = Arc::new(FakeHost::default());
    let registry = registry(info_tools(host.clone()).unwrap());
    (host, registry)
}

fn max_results(n: u32) -> Config {
    let mut config = Config::default();
    config.search.max_results = n;
    config
}

#[test]
fn all_five_are_discoverable_for_guests() {
    let (_, registry) = setup();
    let names: Vec<String> = registry
        .list_discoverable(Role::Guest)
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(names, NAMES);
    for name in NAMES {
        let tool = registry.get(name).unwrap();
        assert_eq!(tool.visibility(), Visibility::Discoverable);
        assert_eq!(tool.min_role(), Role::Guest);
    }
}

#[tokio::test]
async fn search_memory_defaults_to_this_chat_hybrid_and_five() {
    let (host, registry) = setup();
    let outcome = call(
        &registry,
        &ctx(Role::Guest),
        "search_memory",
        json!({"query": "cake"}),
    )
    .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.value["results"][0]["text"], "about cake");
    let calls = host.calls();
    let [HostCall::SearchMemory(query)] = calls.as_slice() else {
        panic!("expected one memory search, got {calls:?}");
    };
    assert_eq!(query.stream.as_ref().unwrap().as_str(), STREAM);
    assert_eq!(query.mode, MemoryMode::Hybrid);
    assert_eq!(query.limit, 5);
}

#[tokio::test]
async fn search_memory_passes_mode_person_and_times_in_utc() {
    let (host, registry) = setup();
    let args = json!({
        "query": "trip", "chat_id": "s1", "mode": "episode", "person_name": "Alice",
        "time_start": "2025-01-31T18:00:00+08:00", "time_end": "2025-02-01T00:00:00Z",
    });
    let outcome = call(&registry, &ctx(Role::User), "search_memory", args).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let HostCall::SearchMemory(query) = &host.calls()[0] else {
        panic!("expected a memory search");
    };
    assert_eq!(query.mode, MemoryMode::Episode);
    assert_eq!(query.person_name.as_deref(), Some("Alice"));
    assert_eq!(
        query.time_start,
        Some(Utc.with_ymd_and_hms(2025, 1, 31, 10, 0, 0).unwrap())
    );
    assert_eq!(
        query.time_end,
        Some(Utc.with_ymd_and_hms(2025, 2, 1, 0, 0, 0).unwrap())
    );
}

#[tokio::test]
async fn limits_are_capped_by_search_max_results() {
    let (host, registry) = setup();
    let ctx = ctx_with(Role::User, max_results(3));
    let outcome = call(
        &registry,
        &ctx,
        "search_memory",
        json!({"query": "x", "limit": 10}),
    )
    .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        outcome.value["note"]
            .as_str()
            .unwrap()
            .contains("lowered to the maximum of 3")
    );
    let outcome = call(&registry, &ctx, "fetch_history", json!({})).await;
    assert_eq!(outcome.value["messages"].as_array().unwrap().len(), 3);
    let outcome = call(&registry, &ctx, "search_users", json!({"keyword": "bob"})).await;
    assert_eq!(outcome.value["found"].as_array().unwrap().len(), 3);
    let calls = host.calls();
    assert!(matches!(&calls[0], HostCall::SearchMemory(q) if q.limit == 3));
    assert_eq!(calls[1], HostCall::Recent(STREAM.into(), 3));
    assert!(matches!(&calls[2], HostCall::SearchUsers(q) if q.limit == 3));
}

#[tokio::test]
async fn fetch_history_defaults_to_20_and_never_exceeds_50() {
    let (host, registry) = setup();
    let roomy = ctx_with(Role::User, max_results(1000));
    let outcome = call(&registry, &roomy, "fetch_history", json!({})).await;
    assert_eq!(outcome.value["messages"].as_array().unwrap().len(), 20);
    assert_eq!(outcome.value["messages"][0]["text"], "line 0");
    let outcome = call(&registry, &roomy, "fetch_history", json!({"limit": 80})).await;
    assert_eq!(outcome.value["messages"].as_array().unwrap().len(), 50);
    assert!(outcome.value["note"].as_str().unwrap().contains("80"));
    assert_eq!(host.calls()[1], HostCall::Recent(STREAM.into(), 50));
}

#[tokio::test]
async fn bad_times_are_refused_with_an_example_and_never_reach_the_host() {
    let (host, registry) = setup();
    let ctx = ctx(Role::User);
    let outcome = call(
        &registry,
        &ctx,
        "search_memory",
        json!({"query": "x", "time_start": "yesterday"}),
    )
    .await;
    assert_eq!(outcome.kind, OutcomeKind::Failed);
    let error = error_of(&outcome);
    assert!(
        error.contains("time_start `yesterday` is not an RFC 3339 time"),
        "{error}"
    );
    assert!(error.contains("2025-01-31T18:00:00+08:00"), "{error}");

    let reversed = json!({"query": "x", "time_start": "2025-02-01T00:00:00Z", "time_end": "2025-01-01T00:00:00Z"});
    let outcome = call(&registry, &ctx, "search_memory", reversed).await;
    assert!(
        error_of(&outcome).contains("is after time_end"),
        "{outcome:?}"
    );

    let outcome = call(
        &registry,
        &ctx,
        "search_memory",
        json!({"query": "x", "mode": "vector"}),
    )
    .await;
    assert_eq!(outcome.kind, OutcomeKind::InvalidArguments);
    assert!(host.calls().is_empty());
}

/// The admin's private chat, a group the requester is in, and one they never joined.
const ADMIN_PRIVATE: &str = "qq:private:1";
const JOINED: &str = "qq:group:g1";
const NOT_JOINED: &str = "qq:group:g2";

fn setup_with_membership() -> (Arc<FakeHost>, ToolRegistry) {
    let (host, registry) = setup();
    host.join(REQUESTER, JOINED);
    (host, registry)
}

fn reads(chat: &str) -> [(&'static str, serde_json::Value); 2] {
    [
        ("fetch_history", json!({"chat_id": chat})),
        (
            "search_memory",
            json!({"query": "password", "chat_id": chat}),
        ),
    ]
}

#[tokio::test]
async fn a_guest_task_reads_only_its_own_chat() {
    let (host, registry) = setup_with_membership();
    // Even a group its requester belongs to: guests keep to their own chat.
    let guest = ctx_for(Role::Guest, REQUESTER);
    for chat in ["s2", JOINED] {
        for (tool, args) in reads(chat)
            .into_iter()
            .chain([("get_frequency", json!({"chat_id": chat}))])
        {
            let outcome = call(&registry, &guest, tool, args).await;
            assert!(
                error_of(&outcome).contains("guest task may only read its own chat"),
                "{tool}: {outcome:?}"
            );
        }
    }
    assert!(host.calls().is_empty(), "{:?}", host.calls());
    // Its own chat, named or not.
    assert!(
        call(
            &registry,
            &guest,
            "fetch_history",
            json!({"chat_id": STREAM})
        )
        .await
        .is_ok()
    );
    assert_eq!(host.calls(), [HostCall::Recent(STREAM.into(), 20)]);
}

#[tokio::test]
async fn a_user_task_cannot_read_the_admins_private_chat_or_a_group_it_never_joined() {
    let (host, registry) = setup_with_membership();
    let user = ctx_for(Role::User, REQUESTER);
    for chat in [ADMIN_PRIVATE, NOT_JOINED] {
        for (tool, args) in reads(chat) {
            let outcome = call(&registry, &user, tool, args).await;
            assert_eq!(outcome.kind, OutcomeKind::Failed, "{tool} {chat}");
            let error = error_of(&outcome);
            assert!(
                error.contains(
                    "a user task may only read its own chat (`s1`) and the chats of qq:42"
                ),
                "{error}"
            );
            assert!(error.contains("An admin can do it"), "{error}");
            let value = outcome.value.to_string();
            assert!(
                !value.contains("messages") && !value.contains("results"),
                "{value}"
            );
        }
    }
    let calls = host.calls();
    assert!(
        !calls.iter().any(HostCall::touches_content),
        "no chat was read: {calls:?}"
    );
}

#[tokio::test]
async fn a_user_task_reads_its_own_chat_its_private_chat_and_the_groups_it_belongs_to() {
    let (host, registry) = setup_with_membership();
    let user = ctx_for(Role::User, REQUESTER);
    for chat in [STREAM, JOINED, "qq:private:42"] {
        for (tool, args) in reads(chat) {
            let outcome = call(&registry, &user, tool, args).await;
            assert!(outcome.is_ok(), "{tool} {chat}: {outcome:?}");
            assert_eq!(outcome.value["chat_id"], chat);
        }
    }
    let read: Vec<HostCall> = host
        .calls()
        .into_iter()
        .filter(HostCall::touches_content)
        .collect();
    assert_eq!(read.len(), 6, "{read:?}");
    assert_eq!(read[2], HostCall::Recent(JOINED.into(), 20));
}

#[tokio::test]
async fn a_task_acting_for_no_one_reads_only_its_own_chat() {
    let (host, registry) = setup_with_membership();
    let outcome = call(
        &registry,
        &ctx(Role::User),
        "fetch_history",
        json!({"chat_id": JOINED}),
    )
    .await;
    assert!(
        error_of(&outcome).contains("acts for no one, so it may only read its own chat"),
        "{outcome:?}"
    );
    assert!(host.calls().is_empty(), "{:?}", host.calls());
}

#[tokio::test]
async fn an_admin_task_reads_any_chat() {
    let (host, registry) = setup_with_membership();
    let admin = ctx_for(Role::Admin, REQUESTER);
    for chat in [ADMIN_PRIVATE, NOT_JOINED, "qq:group:unknown"] {
        for (tool, args) in reads(chat) {
            let outcome = call(&registry, &admin, tool, args).await;
            assert!(outcome.is_ok(), "{tool} {chat}: {outcome:?}");
        }
    }
    assert!(
        host.calls().iter().all(HostCall::touches_content),
        "an admin's reach needs no membership question: {:?}",
        host.calls()
    );
}

#[tokio::test]
async fn a_membership_check_that_fails_refuses_the_read() {
    let (host, registry) = setup_with_membership();
    host.fail();
    let outcome = call(
        &registry,
        &ctx_for(Role::User, REQUESTER),
        "fetch_history",
        json!({"chat_id": JOINED}),
    )
    .await;
    let error = error_of(&outcome);
    assert!(
        error.contains("could not check whether qq:42 is in `qq:group:g1`"),
        "{error}"
    );
    assert!(error.contains("nothing was done"), "{error}");
    assert!(!host.calls().iter().any(HostCall::touches_content));
}

#[tokio::test]
async fn query_person_finds_exact_names_and_points_elsewhere_otherwise() {
    let (_, registry) = setup();
    let ctx = ctx(Role::Guest);
    let outcome = call(
        &registry,
        &ctx,
        "query_person",
        json!({"person_name": "Alice"}),
    )
    .await;
    assert_eq!(outcome.value["accounts"], json!(["qq:1001"]));
    assert_eq!(outcome.value["notes"], json!(["likes cake"]));
    let outcome = call(
        &registry,
        &ctx,
        "query_person",
        json!({"person_name": "Ali ce"}),
    )
    .await;
    assert!(
        error_of(&outcome).contains("try search_users"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn search_users_merges_keywords_and_returns_send_targets() {
    let (host, registry) = setup();
    let ctx = ctx(Role::Guest);
    let args = json!({"keyword": " bob ", "keywords": ["bob", "", "鲍勃"], "chat_type": "private", "platform": "qq"});
    let outcome = call(&registry, &ctx, "search_users", args).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let first = &outcome.value["found"][0];
    assert_eq!(first["stream_id"], "qq:private:0");
    assert_eq!(first["user_id"], "0");
    assert_eq!(first["matched"], "bob");
    assert_eq!(
        host.calls()[0],
        HostCall::SearchUsers(UserQuery {
            keywords: vec!["bob".into(), "鲍勃".into()],
            chat_type: Some("private".into()),
            platform: Some("qq".into()),
            limit: 20,
        })
    );
    // No keyword: the host lists recent chats (the query carries no keywords).
    let outcome = call(&registry, &ctx, "search_users", json!({"keywords": [" "]})).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        host.calls()[1],
        HostCall::SearchUsers(UserQuery {
            keywords: vec![],
            chat_type: None,
            platform: None,
            limit: 20,
        })
    );
    let outcome = call(
        &registry,
        &ctx,
        "search_users",
        json!({"keyword": "x", "chat_type": "channel"}),
    )
    .await;
    assert_eq!(outcome.kind, OutcomeKind::InvalidArguments);
    let outcome = call(
        &registry,
        &ctx,
        "search_users",
        json!({"keyword": "x", "owner": "qq:1"}),
    )
    .await;
    assert_eq!(outcome.kind, OutcomeKind::InvalidArguments, "{outcome:?}");
    assert_eq!(host.calls().len(), 2);
    let schema = registry.get("search_users").unwrap().parameters().clone();
    assert_eq!(schema["additionalProperties"], false, "{schema}");
    let mut properties: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    properties.sort();
    assert_eq!(properties, ["chat_type", "keyword", "keywords", "platform"]);
}

#[tokio::test]
async fn get_frequency_reports_the_value_or_that_there_is_none() {
    let (_, registry) = setup();
    let ctx = ctx(Role::User);
    let outcome = call(&registry, &ctx, "get_frequency", json!({})).await;
    assert_eq!(outcome.value["frequency"], 0.5);
    let outcome = call(&registry, &ctx, "get_frequency", json!({"chat_id": "s9"})).await;
    assert!(outcome.is_ok());
    assert!(outcome.value["frequency"].is_null());
    assert!(outcome.value["note"].is_string());
}

#[tokio::test]
async fn host_failures_become_tool_errors_that_say_what_to_do() {
    let (host, registry) = setup();
    host.fail();
    let ctx = ctx(Role::User);
    for (tool, args) in [
        ("search_memory", json!({"query": "x"})),
        ("fetch_history", json!({})),
        ("query_person", json!({"person_name": "Alice"})),
        ("search_users", json!({"keyword": "x"})),
        ("get_frequency", json!({})),
    ] {
        let outcome = call(&registry, &ctx, tool, args).await;
        assert_eq!(outcome.kind, OutcomeKind::Failed, "{tool}");
        let error = error_of(&outcome);
        assert!(
            error.contains("host could not reach the chat store: connection refused"),
            "{error}"
        );
        assert!(
            error.contains("retry") || error.contains("check"),
            "{error}"
        );
    }
}
