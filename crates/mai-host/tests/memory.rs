//! `search_memory`: full-text search in Chinese and English, the five modes and their shapes,
//! the filters, and hostile query text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::{TestHost, at, group_msg, host, private_msg};
use mai_core::host::{Host, MemoryMode, MemoryQuery};
use mai_core::ids::StreamId;
use serde_json::Value;

fn sid(id: &str) -> StreamId {
    StreamId::new(id).unwrap()
}

/// Two groups, a private chat and two notes.
async fn seeded() -> TestHost {
    let t = host().await;
    let messages = [
        group_msg(
            "42",
            "1003",
            "Bob",
            "great, migration migration done",
            at(2024, 4, 1, 10, 0),
        ),
        group_msg(
            "42",
            "1001",
            "小明",
            "我们今天讨论数据库迁移的方案",
            at(2024, 5, 1, 9, 0),
        ),
        group_msg(
            "42",
            "1002",
            "Alice",
            "数据库迁移要先备份",
            at(2024, 5, 1, 9, 3),
        ),
        group_msg("42", "1001", "小明", "好的，我先备份", at(2024, 5, 1, 9, 5)),
        group_msg("42", "1003", "Bob", "午饭吃什么", at(2024, 5, 1, 9, 40)),
        group_msg("43", "1003", "Bob", "周末去爬山", at(2024, 5, 10, 20, 0)),
        group_msg(
            "42",
            "1002",
            "Alice",
            "The migration to Postgres finished",
            at(2024, 5, 20, 15, 0),
        ),
        private_msg(
            "1002",
            "Alice",
            "remind me about the database backup",
            at(2024, 5, 25, 10, 0),
        ),
    ];
    for message in &messages {
        t.host.ingest_message(message).await.unwrap();
    }
    t.host
        .add_note(None, "数据库迁移手册：先备份再迁移")
        .await
        .unwrap();
    t.host
        .add_note(Some(&sid("qq:group:43")), "爬山群的集合地点在北门")
        .await
        .unwrap();
    t
}

fn query(text: &str, mode: MemoryMode) -> MemoryQuery {
    MemoryQuery {
        query: text.into(),
        mode,
        limit: 10,
        ..MemoryQuery::default()
    }
}

async fn run(t: &TestHost, q: &MemoryQuery) -> Value {
    t.host.search_memory(q).await.unwrap()
}

fn texts(items: &Value) -> Vec<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["text"].as_str().unwrap().to_owned())
        .collect()
}

on_both_backends! {
async fn chinese_and_english_full_text_search() {
    let t = seeded().await;
    let found = run(&t, &query("数据库迁移", MemoryMode::Search)).await;
    assert_eq!(found["mode"], "search");
    let results = found["results"].as_array().unwrap();
    let got = texts(&found["results"]);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.contains(&"我们今天讨论数据库迁移的方案".to_owned()));
    assert!(got.contains(&"数据库迁移要先备份".to_owned()));
    assert!(got.contains(&"数据库迁移手册：先备份再迁移".to_owned()));
    assert!(
        results.iter().all(|r| r["bm25"].is_f64()),
        "full-text hits carry bm25"
    );
    assert!(results.iter().any(|r| r["kind"] == "note"));

    // 3 characters inside a longer word: the trigram index finds substrings.
    let inner = run(&t, &query("据库迁", MemoryMode::Search)).await;
    assert_eq!(texts(&inner["results"]).len(), 3);

    // 2 characters: below the trigram size, found by substring matching.
    let short = run(&t, &query("据库", MemoryMode::Search)).await;
    let short_results = short["results"].as_array().unwrap();
    assert_eq!(short_results.len(), 3, "{short}");
    assert!(short_results.iter().all(|r| r["bm25"].is_null()));

    let english = run(&t, &query("MIGRATION", MemoryMode::Search)).await;
    assert_eq!(
        texts(&english["results"]),
        [
            "great, migration migration done",
            "The migration to Postgres finished"
        ],
        "case-insensitive, best bm25 first"
    );
    let first = &english["results"][0];
    assert_eq!(first["kind"], "message");
    assert_eq!(first["stream_id"], "qq:group:42");
    assert_eq!(first["sender"], "Bob");
    assert_eq!(first["at"], "2024-04-01T10:00:00Z");
    assert!(first["bm25"].as_f64().unwrap() < english["results"][1]["bm25"].as_f64().unwrap());

    let either = run(&t, &query("Postgres 爬山", MemoryMode::Search)).await;
    assert_eq!(
        texts(&either["results"]).len(),
        3,
        "terms are OR-ed: {either}"
    );
}

async fn hybrid_mode_lets_a_newer_match_overtake_a_better_older_one() {
    let t = seeded().await;
    let search = run(&t, &query("migration", MemoryMode::Search)).await;
    let hybrid = run(&t, &query("migration", MemoryMode::Hybrid)).await;
    assert_eq!(hybrid["mode"], "hybrid");
    assert_eq!(
        texts(&search["results"])[0],
        "great, migration migration done"
    );
    assert_eq!(
        texts(&hybrid["results"]),
        [
            "The migration to Postgres finished",
            "great, migration migration done"
        ],
        "{hybrid}"
    );
    let top = &hybrid["results"][0];
    assert_eq!(top["recency"], 1.0, "the newest candidate has full recency");
    assert!(top["relevance"].as_f64().unwrap() < 1.0);
    assert_eq!(
        hybrid["results"][1]["relevance"], 1.0,
        "the best bm25 has full relevance"
    );
    assert!(top["score"].as_f64().unwrap() > hybrid["results"][1]["score"].as_f64().unwrap());
    assert!(
        top.get("bm25").is_none(),
        "hybrid items are scored, not bm25-ranked"
    );
}

async fn time_mode_returns_the_window_oldest_first() {
    let t = seeded().await;
    let mut q = query("", MemoryMode::Time);
    q.stream = Some(sid("qq:group:42"));
    q.time_start = Some(at(2024, 5, 1, 9, 0));
    q.time_end = Some(at(2024, 5, 1, 9, 10));
    let window = run(&t, &q).await;
    assert_eq!(window["mode"], "time");
    assert_eq!(window["time_start"], "2024-05-01T09:00:00Z");
    assert_eq!(
        texts(&window["messages"]),
        [
            "我们今天讨论数据库迁移的方案",
            "数据库迁移要先备份",
            "好的，我先备份"
        ]
    );
    assert_eq!(window["messages"][0]["is_bot"], false);
    assert!(window.get("results").is_none());

    q.query = "备份".into();
    assert_eq!(
        texts(&run(&t, &q).await["messages"]),
        ["数据库迁移要先备份", "好的，我先备份"],
        "the query filters the window"
    );

    // No start: the last `limit` messages up to the end, still oldest first.
    let mut tail = query("", MemoryMode::Time);
    tail.stream = Some(sid("qq:group:42"));
    tail.time_end = Some(at(2024, 5, 1, 23, 0));
    tail.limit = 2;
    assert_eq!(
        texts(&run(&t, &tail).await["messages"]),
        ["好的，我先备份", "午饭吃什么"]
    );
}

async fn episode_mode_returns_the_bursts_around_matches() {
    let t = seeded().await;
    let mut q = query("备份", MemoryMode::Episode);
    q.stream = Some(sid("qq:group:42"));
    let found = run(&t, &q).await;
    assert_eq!(found["mode"], "episode");
    assert_eq!(found["window_minutes"], 10);
    let episodes = found["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 1, "both matches are one burst: {found}");
    let episode = &episodes[0];
    assert_eq!(episode["stream_id"], "qq:group:42");
    assert_eq!(episode["stream_name"], "42");
    assert_eq!(episode["match_count"], 2);
    assert_eq!(episode["start"], "2024-05-01T09:00:00Z");
    assert_eq!(episode["end"], "2024-05-01T09:05:00Z");
    assert_eq!(
        texts(&episode["messages"]),
        [
            "我们今天讨论数据库迁移的方案",
            "数据库迁移要先备份",
            "好的，我先备份"
        ],
        "context from everyone in the burst, not the lunch talk 35 minutes later"
    );
    let matched: Vec<bool> = episode["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["matched"].as_bool().unwrap())
        .collect();
    assert_eq!(matched, [false, true, true]);

    let apart = run(&t, &query("migration", MemoryMode::Episode)).await;
    let episodes = apart["episodes"].as_array().unwrap();
    assert_eq!(
        episodes.len(),
        2,
        "matches weeks apart are separate episodes"
    );
    assert_eq!(
        texts(&episodes[0]["messages"]),
        ["great, migration migration done"],
        "ordered by their best match"
    );
}

async fn aggregate_mode_counts_instead_of_listing() {
    let t = seeded().await;
    let mut q = query("", MemoryMode::Aggregate);
    q.stream = Some(sid("qq:group:42"));
    let all = run(&t, &q).await;
    assert_eq!(all["mode"], "aggregate");
    assert_eq!(all["total"], 6);
    assert_eq!(all["first_at"], "2024-04-01T10:00:00Z");
    assert_eq!(all["last_at"], "2024-05-20T15:00:00Z");
    assert_eq!(
        all["by_person"],
        serde_json::json!([
            {"name": "Alice", "count": 2, "is_bot": false},
            {"name": "Bob", "count": 2, "is_bot": false},
            {"name": "小明", "count": 2, "is_bot": false},
        ])
    );
    assert_eq!(
        all["by_day"],
        serde_json::json!([
            {"day": "2024-04-01", "count": 1},
            {"day": "2024-05-01", "count": 4},
            {"day": "2024-05-20", "count": 1},
        ])
    );
    assert!(all.get("results").is_none() && all.get("messages").is_none());

    let backups = run(&t, &query("备份", MemoryMode::Aggregate)).await;
    assert_eq!(backups["total"], 2);
    assert_eq!(
        backups["by_day"],
        serde_json::json!([{"day": "2024-05-01", "count": 2}])
    );
}

async fn filters_person_stream_and_time_apply_to_every_mode() {
    let t = seeded().await;
    t.host.add_alias("Alice", "爱丽丝").await.unwrap();
    let mut q = query("", MemoryMode::Search);
    q.person_name = Some("爱丽丝".into());
    let hers = run(&t, &q).await;
    let results = hers["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{hers}");
    assert!(results.iter().all(|r| r["sender"] == "Alice"));

    q.query = "数据库".into();
    q.mode = MemoryMode::Aggregate;
    let counted = run(&t, &q).await;
    assert_eq!(counted["total"], 1, "notes and other people are excluded");

    q.person_name = Some("Nobody".into());
    for mode in [
        MemoryMode::Search,
        MemoryMode::Time,
        MemoryMode::Hybrid,
        MemoryMode::Episode,
        MemoryMode::Aggregate,
    ] {
        q.mode = mode;
        let none = run(&t, &q).await;
        assert!(
            none["warning"].as_str().unwrap().contains("Nobody"),
            "{none}"
        );
        assert!(none.get("mode").is_some());
    }

    // A stream's notes and global notes; not another stream's.
    let mut notes = query("爬山 数据库迁移手册", MemoryMode::Search);
    notes.stream = Some(sid("qq:group:42"));
    let got = texts(&run(&t, &notes).await["results"]);
    assert_eq!(got, ["数据库迁移手册：先备份再迁移"]);

    let mut window = query("migration", MemoryMode::Hybrid);
    window.time_start = Some(at(2024, 5, 1, 0, 0));
    assert_eq!(
        texts(&run(&t, &window).await["results"]),
        ["The migration to Postgres finished"]
    );
}

async fn hostile_query_text_never_errors() {
    let t = seeded().await;
    let hostile = [
        "\"",
        "\"\"",
        "\"unterminated",
        "NEAR(",
        "NEAR(a b",
        "NEAR(数据库 迁移, 2)",
        "*",
        "migr*",
        "-",
        "-migration",
        "OR",
        "AND OR NOT",
        "a OR",
        "据库",
        "库",
        "%",
        "_",
        "\\",
        "'; DROP TABLE host_messages; --",
        "text:migration",
        "^migration",
        "(((",
        "{a b}",
        "a + b",
        "🙂🙂🙂",
        "nul\0byte",
        "   ",
    ];
    let long = "很长".repeat(500);
    for text in hostile.iter().copied().chain([long.as_str()]) {
        for mode in [
            MemoryMode::Search,
            MemoryMode::Time,
            MemoryMode::Hybrid,
            MemoryMode::Episode,
            MemoryMode::Aggregate,
        ] {
            let q = query(text, mode);
            let result = t.host.search_memory(&q).await;
            assert!(result.is_ok(), "{text:?} in {mode:?}: {result:?}");
        }
    }
    for wildcard in ["%", "_", "\\"] {
        let found = run(&t, &query(wildcard, MemoryMode::Search)).await;
        assert_eq!(
            found["results"],
            serde_json::json!([]),
            "{wildcard:?} is literal"
        );
    }
    let quoted = run(&t, &query("\"migration\"", MemoryMode::Search)).await;
    assert_eq!(
        quoted["results"],
        serde_json::json!([]),
        "quotes are text, not syntax"
    );
    assert_eq!(
        t.host
            .recent_messages(&sid("qq:group:42"), 50)
            .await
            .unwrap()
            .len(),
        6,
        "nothing was dropped"
    );
}
}
