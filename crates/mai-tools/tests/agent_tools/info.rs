//! The information tools: defaults, `[search] max_results` caps, times, which chat a guest may
//! read, and host failures.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use mai_core::config::Config;
use mai_core::host::{MemoryMode, UserQuery};
use mai_core::role::Role;
use mai_core::tool::{OutcomeKind, ToolRegistry, Visibility};
use mai_tools::info::info_tools;
use serde_json::json;

use crate::fakes::{FakeHost, HostCall, STREAM, call, ctx, ctx_with, error_of, registry};

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

#[tokio::test]
async fn a_guest_task_reads_only_its_own_chat() {
    let (host, registry) = setup();
    let guest = ctx(Role::Guest);
    for (tool, args) in [
        ("fetch_history", json!({"chat_id": "s2"})),
        ("search_memory", json!({"query": "x", "chat_id": "s2"})),
        ("get_frequency", json!({"chat_id": "s2"})),
    ] {
        let outcome = call(&registry, &guest, tool, args).await;
        assert!(
            error_of(&outcome).contains("guest task may only read its own chat"),
            "{tool}: {outcome:?}"
        );
    }
    assert!(host.calls().is_empty());
    // Its own chat, named or not, and any chat for a user task.
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
    assert!(
        call(
            &registry,
            &ctx(Role::User),
            "fetch_history",
            json!({"chat_id": "s2"})
        )
        .await
        .is_ok()
    );
    assert_eq!(host.calls()[1], HostCall::Recent("s2".into(), 20));
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
    assert_eq!(host.calls().len(), 2);
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
