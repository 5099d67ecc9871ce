//! The full-text search on PostgreSQL is index-backed and finds Chinese text on a cluster made
//! with `--locale=C` (where PostgreSQL's own trigram extension extracts nothing from it): among
//! thousands of messages, PostgreSQL answers a term's trigram condition from the GIN index
//! `host_messages_by_grams`, and the host's search finds the one message that holds the term.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::{at, group_msg, pg_cluster::PgCluster};
use mai_core::host::{Host, MemoryMode, MemoryQuery};
use mai_host::{EmbeddedConfig, EmbeddedHost};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chinese_term_is_found_among_thousands_of_messages_through_the_gin_index() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let pool = mai_store::connect_pool(&url, &mai_store::PgOptions::default())
        .await
        .unwrap();
    let host = EmbeddedHost::on(
        mai_store::Backend::Postgres(pool),
        EmbeddedConfig::default(),
    )
    .await
    .unwrap();
    let wanted = "我们今天讨论数据库迁移的方案";
    host.ingest_message(&group_msg(
        "42",
        "1001",
        "小明",
        wanted,
        at(2024, 5, 1, 9, 0),
    ))
    .await
    .unwrap();
    let name = PgCluster::database_name(&url);
    assert_eq!(
        cluster.psql_as_superuser(name, "SHOW lc_collate"),
        "C",
        "the hard case: a C-locale cluster"
    );
    cluster.psql_as_superuser(
        name,
        "INSERT INTO host_messages (stream_id, user_id, sender_name, text, at, is_bot, grams) \
         SELECT 'qq:group:42', 'filler', 'filler', md5(i::text), i, FALSE, \
         ARRAY[substr(md5(i::text), 1, 3), substr(md5(i::text), 2, 3)] \
         FROM generate_series(1, 20000) AS i; ANALYZE host_messages",
    );
    let plan = cluster.psql_as_superuser(
        name,
        "EXPLAIN SELECT message_id FROM host_messages \
         WHERE grams @> ARRAY['数据库', '据库迁', '库迁移'] AND strpos(lower(text), '数据库迁移') > 0",
    );
    assert!(plan.contains("host_messages_by_grams"), "{plan}");

    let found = host
        .search_memory(&MemoryQuery {
            query: "数据库迁移".into(),
            mode: MemoryMode::Search,
            limit: 10,
            ..MemoryQuery::default()
        })
        .await
        .unwrap();
    let texts: Vec<&str> = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, [wanted]);
}
