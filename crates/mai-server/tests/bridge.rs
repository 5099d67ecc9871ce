//! The MaiBot bridge end to end on loopback: a real engine on the MaiBot host, the real router
//! served on 127.0.0.1:0, and a fake MaiBot plugin (a WebSocket client in the test) that opens
//! `GET /v1/bridge`, says hello and answers the host's requests as docs/bridge-protocol.md says.
//! Proves: host calls reach the plugin and its answers come back (`unsupported` → the empty
//! answer); a reply while no bridge is connected is held and delivered once the bridge comes,
//! without costing a send retry; a second bridge replaces the first; the token guards the
//! bridge; a part resent after the plugin went away mid-send carries the same, derived part id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

use common::{Served, Service, ServiceOptions, TOKEN, json_of, serve, server_config, test_config};
use mai_core::host::{ChatLine, Delivery};
use mai_core::ids::{PersonId, StreamId};
use mai_core::model::ChatResponse;
use mai_core::task::{TaskId, TaskStatus};
use mai_engine::Caller;
use mai_host::{MaiBotConfig, MaiBotHost};
use mai_llm::ScriptedModel;
use mai_server::HttpOptions;

const WAIT: Duration = Duration::from_secs(20);

/// A MaiBot plugin as far as the bridge goes.
struct Plugin {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

async fn open(served: &Served, token: Option<&str>) -> Result<Plugin, Box<dyn std::error::Error>> {
    let url = format!("ws://127.0.0.1:{}/v1/bridge", served.port());
    let mut request = url.into_client_request()?;
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
    }
    let (ws, _) = connect_async(request).await?;
    Ok(Plugin { ws })
}

impl Plugin {
    /// Connects with the token and says hello.
    async fn connect(served: &Served) -> Plugin {
        let mut plugin = open(served, Some(TOKEN)).await.unwrap();
        plugin
            .send(json!({"id": "hello", "method": "hello",
                         "params": {"plugin_version": "test", "maibot_version": "1.3.15"}}))
            .await;
        let answer = plugin.next().await.expect("the hello answer");
        assert_eq!(answer["id"], "hello", "{answer}");
        assert!(answer["result"]["server_version"].is_string(), "{answer}");
        plugin
    }

    async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::Text(frame.to_string().into()))
            .await
            .unwrap();
    }

    /// The next JSON frame, or `None` when mai-agent closed the bridge.
    async fn next(&mut self) -> Option<Value> {
        loop {
            let message = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("timed out waiting for a bridge frame");
            match message {
                Some(Ok(Message::Text(text))) => return Some(serde_json::from_str(&text).unwrap()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// The next request, which must be for `method`.
    async fn request(&mut self, method: &str) -> Value {
        let request = self.next().await.expect("the bridge closed");
        assert_eq!(request["method"], method, "{request}");
        request
    }

    async fn answer(&mut self, request: &Value, result: Value) {
        self.send(json!({"id": request["id"], "result": result}))
            .await;
    }

    async fn unsupported(&mut self, request: &Value) {
        self.send(json!({"id": request["id"], "error": {"code": "unsupported",
                         "message": "MaiBot has no such thing"}}))
            .await;
    }
}

/// A service whose engine runs on the MaiBot host, served with the token.
async fn start(model: ScriptedModel, max_retries: u32) -> (Service, Served, MaiBotHost) {
    let bridge = MaiBotHost::new(MaiBotConfig {
        request_timeout: WAIT,
        offline_timeout: Duration::from_secs(600),
    });
    let mut config = test_config();
    config.send.max_retries = max_retries;
    let options = ServiceOptions {
        config,
        bridge: Some(bridge.clone()),
        ..ServiceOptions::default()
    };
    let service = Service::start_with(model, options).await;
    let served = serve(&service, HttpOptions::new(server_config())).await;
    (service, served, bridge)
}

/// Creates a task in group 42 over the API; returns its id.
async fn create_task(served: &Served) -> TaskId {
    let response = served
        .post("/v1/tasks")
        .json(
            &json!({"intent": "check the disk", "stream_id": "qq:group:42",
                      "platform": "qq", "title": "disk"}),
        )
        .send()
        .await
        .unwrap();
    let (status, created) = json_of(response).await;
    assert_eq!(status, 201, "{created}");
    serde_json::from_value(created["id"].clone()).unwrap()
}

/// The id of the reply task that delivers `task`'s answer.
async fn reply_of(service: &Service, task: TaskId) -> TaskId {
    let admin = Caller::admin_reader("test").unwrap();
    let record = service.state.engine.get(&admin, task).await.unwrap();
    mai_engine::reply_task_id(&record)
}

async fn health(served: &Served) -> Value {
    json_of(served.get("/healthz").send().await.unwrap())
        .await
        .1
}

#[tokio::test]
async fn the_engines_host_calls_reach_the_plugin_and_its_answers_come_back() {
    let (service, served, bridge) = start(ScriptedModel::default(), 3).await;
    assert_eq!(health(&served).await["bridge"], "disconnected");
    let mut plugin = Plugin::connect(&served).await;
    let mut status = bridge.status();
    tokio::time::timeout(WAIT, status.wait_for(|s| s.connected.is_some()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(health(&served).await["bridge"], "connected");
    let metrics = served
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("mai_bridge_connected 1"), "{metrics}");

    let host = service.state.engine.host().clone();
    let stream = StreamId::new("session-42").unwrap();

    let (h, s) = (host.clone(), stream.clone());
    let sending = tokio::spawn(async move { h.send_text(&s, "hello MaiBot").await });
    let request = plugin.request("send_text").await;
    assert_eq!(request["params"]["stream_id"], "session-42");
    assert_eq!(request["params"]["text"], "hello MaiBot");
    assert!(request["params"]["part_id"].is_string(), "{request}");
    plugin.answer(&request, json!({"sent": true})).await;
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);

    let (h, s) = (host.clone(), stream.clone());
    let reading = tokio::spawn(async move { h.recent_messages(&s, 5).await });
    let request = plugin.request("recent_messages").await;
    assert_eq!(request["params"]["limit"], 5);
    plugin
        .answer(
            &request,
            json!([{"sender": "alice", "text": "hi", "at": "2025-01-02T03:04:05Z"}]),
        )
        .await;
    let lines: Vec<ChatLine> = reading.await.unwrap().unwrap();
    assert_eq!(
        (lines[0].sender.as_str(), lines[0].text.as_str()),
        ("alice", "hi")
    );

    let (h, s) = (host.clone(), stream.clone());
    let person = PersonId::new("qq", "10001").unwrap();
    let asking = tokio::spawn(async move { h.is_member(&person, &s).await });
    let request = plugin.request("is_member").await;
    assert_eq!(request["params"]["person"], "qq:10001");
    plugin.answer(&request, json!(true)).await;
    assert!(asking.await.unwrap().unwrap());

    // A capability MaiBot lacks: the empty answer, never an error or made-up data …
    let (h, s) = (host.clone(), stream.clone());
    let slang = tokio::spawn(async move { h.jargon(&s, "gg").await });
    let request = plugin.request("jargon").await;
    plugin.unsupported(&request).await;
    assert!(slang.await.unwrap().unwrap().is_empty());
    // … except where the empty answer would be a lie (a plugin API call).
    let h = host.clone();
    let calling = tokio::spawn(async move { h.call_api("weather.today", json!({})).await });
    let request = plugin.request("call_api").await;
    plugin.unsupported(&request).await;
    let error = calling.await.unwrap().unwrap_err().to_string();
    assert!(error.contains("MaiBot has no such thing"), "{error}");

    // The plugin's ping is answered.
    plugin.send(json!({"id": "p1", "method": "ping"})).await;
    let pong = plugin.next().await.unwrap();
    assert_eq!(pong, json!({"id": "p1", "result": "pong"}));

    // A `/mt` command typed in MaiBot answers through the bridge, not the embedded channels.
    let command = {
        let state = service.state.clone();
        tokio::spawn(async move {
            let mut message = common::message("user", Some("42"), "/mt list");
            message.stream_id = Some(StreamId::new("session-42").unwrap());
            mai_server::deliver(&state, message).await
        })
    };
    let request = plugin.request("send_text").await;
    assert_eq!(request["params"]["stream_id"], "session-42");
    plugin.answer(&request, json!({"sent": true})).await;
    let outcome = command.await.unwrap().unwrap();
    assert!(
        matches!(
            outcome,
            mai_server::Inbound::Command {
                delivered: true,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert!(service.channel.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_reply_without_a_bridge_is_held_and_delivered_once_the_bridge_connects() {
    let model = ScriptedModel::from_responses([ChatResponse::text("The disk is 40% full.")]);
    // No retries at all: holding the part must not cost one.
    let (mut service, served, bridge) = start(model, 0).await;
    let task = create_task(&served).await;
    let mut held = bridge.held();
    tokio::time::timeout(WAIT, held.wait_for(|n| *n == 1))
        .await
        .unwrap()
        .unwrap();
    let metrics = served
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("mai_bridge_held_parts 1"), "{metrics}");

    let mut plugin = Plugin::connect(&served).await;
    let request = plugin.request("send_text").await;
    assert_eq!(request["params"]["text"], "The disk is 40% full.");
    assert_eq!(request["params"]["stream_id"], "qq:group:42");
    let reply = reply_of(&service, task).await;
    assert_eq!(
        request["params"]["part_id"],
        mai_engine::part_id(&reply.to_string(), 0)
    );
    plugin.answer(&request, json!({"sent": true})).await;
    service.wait_status(reply, TaskStatus::Completed).await;
    assert_eq!(*bridge.held().borrow(), 0);
}

#[tokio::test]
async fn a_second_bridge_replaces_the_first() {
    let (service, served, bridge) = start(ScriptedModel::default(), 3).await;
    let mut first = Plugin::connect(&served).await;
    let mut second = Plugin::connect(&served).await;
    // The first is closed by mai-agent …
    assert_eq!(first.next().await, None);
    let mut status = bridge.status();
    let now = tokio::time::timeout(
        WAIT,
        status.wait_for(|s| s.generation == 2 && s.connected.is_some()),
    )
    .await
    .unwrap()
    .unwrap()
    .clone();
    assert_eq!(
        now.connected.unwrap().plugin_version.as_deref(),
        Some("test")
    );
    // … and calls go to the second.
    let host = service.state.engine.host().clone();
    let asking =
        tokio::spawn(async move { host.talk_frequency(&StreamId::new("s").unwrap()).await });
    let request = second.request("talk_frequency").await;
    second.answer(&request, json!(0.5)).await;
    assert_eq!(asking.await.unwrap().unwrap(), Some(0.5));
    assert_eq!(health(&served).await["bridge"], "connected");
}

#[tokio::test]
async fn the_bridge_needs_the_token() {
    let (_service, served, _bridge) = start(ScriptedModel::default(), 3).await;
    let error = open(&served, None)
        .await
        .err()
        .expect("refused without a token");
    let text = error.to_string();
    assert!(text.contains("401"), "{text}");
    let error = open(&served, Some("guess"))
        .await
        .err()
        .expect("refused with a wrong token");
    assert!(error.to_string().contains("401"), "{error}");
}

#[tokio::test]
async fn a_part_resent_after_the_plugin_went_away_mid_send_keeps_its_part_id() {
    let model = ScriptedModel::from_responses([ChatResponse::text("Backup finished.")]);
    let (mut service, served, _bridge) = start(model, 0).await;
    let mut crashed = Plugin::connect(&served).await;
    let task = create_task(&served).await;
    let first = crashed.request("send_text").await;
    // The plugin dies before it answers: nobody knows whether MaiBot sent the part.
    drop(crashed);
    let mut restarted = Plugin::connect(&served).await;
    let again = restarted.request("send_text").await;
    assert_eq!(again["params"]["part_id"], first["params"]["part_id"]);
    assert_eq!(again["params"]["text"], "Backup finished.");
    // Derived from the reply task and the position alone, so a restarted mai-agent sends the
    // same id too.
    let reply = reply_of(&service, task).await;
    assert_eq!(again["params"]["part_id"], format!("{reply}:0"));
    restarted
        .answer(&again, json!({"sent": true, "duplicate": true}))
        .await;
    service.wait_status(reply, TaskStatus::Completed).await;
}

#[tokio::test]
async fn the_embedded_host_answers_409_on_the_bridge_and_healthz_says_not_used() {
    let service = Service::start(ScriptedModel::default()).await;
    let served = serve(&service, HttpOptions::new(server_config())).await;
    assert_eq!(health(&served).await["bridge"], "not used");
    let error = open(&served, Some(TOKEN))
        .await
        .err()
        .expect("no bridge here");
    assert!(error.to_string().contains("409"), "{error}");
}
