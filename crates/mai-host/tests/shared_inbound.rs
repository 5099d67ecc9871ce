//! Two embedded hosts on one PostgreSQL database — what two `serve` instances have: a message
//! both receive (one platform message id) is stored by the first and recognised by the second;
//! both creating the same new stream and person at once succeed, on one of each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::{at, group_msg, pg_cluster::PgCluster};
use mai_host::{EmbeddedConfig, EmbeddedHost, IncomingMessage};
use mai_store::sqlx;

/// Two hosts on one database of `cluster`, and a pool to look with.
async fn two_hosts(cluster: &PgCluster) -> (EmbeddedHost, EmbeddedHost, sqlx::PgPool) {
    let url = cluster.database();
    let mut hosts = Vec::new();
    for _ in 0..2 {
        let pool = mai_store::connect_pool(&url, &mai_store::PgOptions::default())
            .await
            .unwrap();
        hosts.push(
            EmbeddedHost::on(
                mai_store::Backend::Postgres(pool),
                EmbeddedConfig::default(),
            )
            .await
            .unwrap(),
        );
    }
    let look = sqlx::PgPool::connect(&url).await.unwrap();
    let b = hosts.pop().unwrap();
    (hosts.pop().unwrap(), b, look)
}

fn with_id(message: IncomingMessage, id: Option<&str>) -> IncomingMessage {
    IncomingMessage {
        platform_message_id: id.map(str::to_owned),
        ..message
    }
}

async fn stored(look: &sqlx::PgPool, text: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM host_messages WHERE text = $1")
        .bind(text)
        .fetch_one(look)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_two_hosts_receive_is_stored_by_the_first_and_recognised_by_the_second() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let (a, b, look) = two_hosts(&cluster).await;
    let said = |text: &str, id: Option<&str>| {
        with_id(
            group_msg("42", "1001", "Ann", text, at(2024, 5, 1, 9, 0)),
            id,
        )
    };

    let first = a.ingest_message(&said("hello", Some("7"))).await.unwrap();
    let second = b.ingest_message(&said("hello", Some("7"))).await.unwrap();
    assert!(first.message_id.is_some(), "the first copy is stored");
    assert_eq!(second.message_id, None, "the second copy is recognised");
    assert_eq!(second.stream_id, first.stream_id);
    assert_eq!(stored(&look, "hello").await, 1);

    // Another id, another platform's same id, and a message without an id are all new.
    let other = b.ingest_message(&said("again", Some("8"))).await.unwrap();
    assert!(other.message_id.is_some());
    let telegram = IncomingMessage {
        platform: "telegram".into(),
        ..said("elsewhere", Some("7"))
    };
    assert!(
        a.ingest_message(&telegram)
            .await
            .unwrap()
            .message_id
            .is_some()
    );
    for host in [&a, &b] {
        let plain = host.ingest_message(&said("no id", None)).await.unwrap();
        assert!(
            plain.message_id.is_some(),
            "without an id nothing can be recognised"
        );
    }
    assert_eq!(stored(&look, "no id").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_creating_the_same_new_streams_and_people_at_once_both_succeed_once_each() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let (a, b, look) = two_hosts(&cluster).await;
    let when = at(2024, 5, 1, 9, 0);
    for n in 0..30 {
        // The same new group, from two people.
        let group = format!("g{n}");
        let (ann, bob) = (
            group_msg(&group, &format!("a{n}"), "Ann", "from a", when),
            group_msg(&group, &format!("b{n}"), "Bob", "from b", when),
        );
        let (from_a, from_b) = tokio::join!(a.ingest_message(&ann), b.ingest_message(&bob));
        let (from_a, from_b) = (from_a.unwrap(), from_b.unwrap());
        assert_eq!(from_a.stream_id, from_b.stream_id, "{group}");
        // The same new person, in two groups.
        let user = format!("c{n}");
        let (here, there) = (
            group_msg(&format!("h{n}"), &user, "Cat", "here", when),
            group_msg(&format!("t{n}"), &user, "Cat", "there", when),
        );
        let (from_a, from_b) = tokio::join!(a.ingest_message(&here), b.ingest_message(&there));
        from_a.unwrap();
        from_b.unwrap();
    }
    let (streams, persons, accounts): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM host_streams), (SELECT count(*) FROM host_persons), \
         (SELECT count(*) FROM host_accounts)",
    )
    .fetch_one(&look)
    .await
    .unwrap();
    assert_eq!(streams, 90, "30 shared groups, 60 others");
    assert_eq!((persons, accounts), (90, 90), "one person per new account");
    assert_eq!(
        stored(&look, "from a").await + stored(&look, "from b").await,
        60
    );
    assert_eq!(
        stored(&look, "here").await + stored(&look, "there").await,
        60
    );
}
