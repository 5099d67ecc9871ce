//! Two MaiBot hosts on one PostgreSQL database — what two `serve` instances have, the plugin's
//! bridge connected to one of them: a request made on the other is answered through the bridge,
//! a send made while no instance holds a bridge is held until one does, and a send whose holder
//! died unanswered is held and made again, with the same part id, through the next bridge; a
//! chat whose part was given up is told through the next bridge, wherever it connects.
//!
//! The bridges are in-process ([`MaiBotHost::attach`] and [`MaiBotHost::receive`], what the
//! server's WebSocket pump calls); the database and its notices are real. The tests wait on
//! frames, answers and the hosts' `held` counts, never on a clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::pg_cluster::PgCluster;
use mai_core::host::{Delivery, Host};
use mai_core::ids::{PersonId, StreamId};
use mai_host::maibot::{BridgeLink, Hello};
use mai_host::{EmbeddedConfig, EmbeddedHost, MaiBotConfig, MaiBotHost, RelayConfig};
use mai_store::sqlx;
use serde_json::{Value, json};

/// How long a test waits for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(30);

struct Instance {
    host: MaiBotHost,
    pool: sqlx::PgPool,
}

/// The MaiBot host of instance `name` on the database at `url` (migrated as `serve` does).
async fn instance(url: &str, name: &str, request_timeout: Duration) -> Instance {
    let config = MaiBotConfig {
        request_timeout,
        offline_timeout: Duration::from_secs(600),
    };
    instance_with(url, name, config).await
}

async fn instance_with(url: &str, name: &str, config: MaiBotConfig) -> Instance {
    let pool = mai_store::connect_pool(url, &mai_store::PgOptions::default())
        .await
        .unwrap();
    EmbeddedHost::on(
        mai_store::Backend::Postgres(pool.clone()),
        EmbeddedConfig::default(),
    )
    .await
    .unwrap();
    let relay = RelayConfig {
        instance: name.to_owned(),
        lease: Duration::from_secs(1),
        heartbeat: Duration::from_millis(250),
    };
    let host = MaiBotHost::shared(config, pool.clone(), relay)
        .await
        .unwrap();
    Instance { host, pool }
}

/// Attaches an in-process bridge to `instance` and waits until the database names it a holder
/// (the other instances route to it from then on).
async fn attach(instance: &Instance, look: &sqlx::PgPool, name: &str) -> BridgeLink {
    let mut listener = sqlx::postgres::PgListener::connect_with(look)
        .await
        .unwrap();
    listener.listen("mai_bridge").await.unwrap();
    let link = instance.host.attach(Hello::default());
    tokio::time::timeout(PATIENCE, async {
        loop {
            let holders: Vec<String> =
                sqlx::query_scalar("SELECT instance FROM host_bridge_holders")
                    .fetch_all(look)
                    .await
                    .unwrap();
            if holders.iter().any(|h| h == name) {
                return;
            }
            listener.recv().await.unwrap();
        }
    })
    .await
    .expect("the bridge's instance was recorded as a holder");
    link
}

/// The next request the bridge of `link` is sent.
async fn next_request(link: &mut BridgeLink) -> Value {
    let frame = tokio::time::timeout(PATIENCE, link.outbox.recv())
        .await
        .expect("a request reached the bridge")
        .unwrap();
    serde_json::from_str(&frame).unwrap()
}

fn answer(instance: &Instance, link: &BridgeLink, request: &Value, result: Value) {
    let frame = json!({"id": request["id"], "result": result}).to_string();
    assert_eq!(instance.host.receive(link.generation, &frame), None);
}

async fn wait_held(host: &MaiBotHost, count: usize) {
    let mut held = host.held();
    tokio::time::timeout(PATIENCE, held.wait_for(|n| *n == count))
        .await
        .expect("the part was held")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_made_where_no_bridge_is_connected_is_answered_through_the_instance_holding_one() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let (a, b) = (
        instance(&url, "a", Duration::from_secs(20)).await,
        instance(&url, "b", Duration::from_secs(20)).await,
    );
    let stream = StreamId::new("session-1").unwrap();
    // No bridge anywhere: a read fails at once, as on one instance.
    let error = b.host.recent_messages(&stream, 5).await.unwrap_err();
    assert!(error.to_string().contains("no MaiBot bridge"), "{error}");

    let mut link = attach(&a, &b.pool, "a").await;
    let reading = {
        let (host, stream) = (b.host.clone(), stream.clone());
        tokio::spawn(async move { host.recent_messages(&stream, 5).await })
    };
    let request = next_request(&mut link).await;
    assert_eq!(request["method"], "recent_messages");
    assert_eq!(
        request["params"],
        json!({"stream_id": "session-1", "limit": 5})
    );
    let line = json!({"sender": "Ann", "text": "blue", "at": "2026-01-02T03:04:05Z"});
    answer(&a, &link, &request, json!([line]));
    let lines = reading.await.unwrap().unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (lines[0].sender.as_str(), lines[0].text.as_str()),
        ("Ann", "blue")
    );
    // An error answer keeps its meaning: `unsupported` is the empty answer there too.
    let asking = {
        let host = b.host.clone();
        tokio::spawn(async move { host.list_apis().await })
    };
    let request = next_request(&mut link).await;
    let unsupported =
        json!({"id": request["id"], "error": {"code": "unsupported", "message": "no apis"}});
    a.host.receive(link.generation, &unsupported.to_string());
    assert_eq!(asking.await.unwrap().unwrap(), Vec::new());
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM host_bridge_calls")
        .fetch_one(&b.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "each caller deletes its call once answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_made_while_no_instance_holds_a_bridge_is_held_then_sent_through_the_first_to_hold_one()
 {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let (a, b) = (
        instance(&url, "a", Duration::from_secs(20)).await,
        instance(&url, "b", Duration::from_secs(20)).await,
    );
    let sending = {
        let host = b.host.clone();
        let stream = StreamId::new("session-1").unwrap();
        tokio::spawn(async move { host.send_part(&stream, "the answer", "t1:0").await })
    };
    wait_held(&b.host, 1).await;
    let mut link = attach(&a, &b.pool, "a").await;
    let request = next_request(&mut link).await;
    assert_eq!(request["method"], "send_text");
    assert_eq!(request["params"]["part_id"], "t1:0");
    assert_eq!(request["params"]["text"], "the answer");
    answer(&a, &link, &request, json!({"sent": true}));
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);
    assert_eq!(*b.host.held().borrow(), 0);
    // Sent once: nothing more reaches the bridge.
    assert!(link.outbox.try_recv().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_holder_died_unanswered_is_held_and_made_again_with_its_part_id_through_the_next_bridge()
 {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let (a, b) = (
        instance(&url, "a", Duration::from_secs(3)).await,
        instance(&url, "b", Duration::from_secs(3)).await,
    );
    let mut dead_link = attach(&a, &b.pool, "a").await;
    let sending = {
        let host = b.host.clone();
        let stream = StreamId::new("session-1").unwrap();
        tokio::spawn(async move { host.send_part(&stream, "the answer", "t1:0").await })
    };
    let first = next_request(&mut dead_link).await;
    assert_eq!(first["params"]["part_id"], "t1:0");
    // Instance a dies with the request unanswered: no answer, no release, no more heartbeats.
    a.pool.close().await;
    // b's wait ends unanswered, a's lease runs out: the part is held, not failed.
    wait_held(&b.host, 1).await;
    let mut link = b.host.attach(Hello::default());
    let again = next_request(&mut link).await;
    assert_eq!(again["method"], "send_text");
    assert_eq!(
        again["params"]["part_id"], "t1:0",
        "the same id, which the plugin drops if it sent the part already"
    );
    answer(&b, &link, &again, json!({"sent": true, "duplicate": true}));
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_queued_request_is_taken_by_one_holder_when_two_instances_hold_a_bridge() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let (a, b, c) = (
        instance(&url, "a", Duration::from_secs(20)).await,
        instance(&url, "b", Duration::from_secs(20)).await,
        instance(&url, "c", Duration::from_secs(20)).await,
    );
    let mut link_a = attach(&a, &c.pool, "a").await;
    let mut link_b = attach(&b, &c.pool, "b").await;
    let asks: Vec<_> = (0..8)
        .map(|n| {
            let host = c.host.clone();
            let person = PersonId::new("qq", &n.to_string()).unwrap();
            tokio::spawn(async move { host.display_name(&person).await })
        })
        .collect();
    let mut seen = Vec::new();
    while seen.len() < 8 {
        let (instance, link) = tokio::select! {
            frame = link_a.outbox.recv() => (&a, (frame.unwrap(), link_a.generation)),
            frame = link_b.outbox.recv() => (&b, (frame.unwrap(), link_b.generation)),
        };
        let request: Value = serde_json::from_str(&link.0).unwrap();
        let person = request["params"]["person"].as_str().unwrap().to_owned();
        let frame = json!({"id": request["id"], "result": format!("name of {person}")});
        instance.host.receive(link.1, &frame.to_string());
        seen.push(person);
    }
    for (n, ask) in asks.into_iter().enumerate() {
        let name = ask.await.unwrap().unwrap();
        assert_eq!(name.as_deref(), Some(format!("name of qq:{n}").as_str()));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen.len(),
        8,
        "every request reached one bridge once: {seen:?}"
    );
    assert!(link_a.outbox.try_recv().is_err() && link_b.outbox.try_recv().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_whose_part_was_given_up_is_told_through_the_next_bridge_on_another_instance() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let a = instance(&url, "a", Duration::from_secs(20)).await;
    let no_patience = MaiBotConfig {
        request_timeout: Duration::from_secs(20),
        offline_timeout: Duration::ZERO,
    };
    let b = instance_with(&url, "b", no_patience).await;
    let stream = StreamId::new("session-1").unwrap();
    let error = b.host.send_part(&stream, "lost", "t1:0").await.unwrap_err();
    assert!(error.to_string().contains("offline_timeout_min"), "{error}");

    let mut link = attach(&a, &b.pool, "a").await;
    let notice = next_request(&mut link).await;
    assert_eq!(notice["method"], "send_text");
    assert_eq!(notice["params"]["stream_id"], "session-1");
    let part = notice["params"]["part_id"].as_str().unwrap();
    assert!(part.starts_with("notice:"), "{notice}");
    let text = notice["params"]["text"].as_str().unwrap();
    assert!(text.contains("could not deliver 1 message(s)"), "{text}");
    answer(&a, &link, &notice, json!({"sent": true}));
}
