//! The whole product, as a chat bot would use it: `mai-agent serve` with a fake OpenAI-compatible
//! model and a fake OneBot v11 implementation (NapCat's role) on loopback, driven by a scripted
//! planner over MCP. A group chat's planner creates a background task; the agent asks the user;
//! the user answers in the group through OneBot; the result is delivered to that group; a planner
//! call that forges another stream is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use futures::{SinkExt, StreamExt};
use mai_core::host::ChatTarget;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, RequestMetaObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

const BOT: i64 = 999;
const ALICE: i64 = 10001;
const GROUP: i64 = 20002;
const TOKEN: &str = "planner-secret";

/// A OneBot v11 implementation's forward WebSocket, as NapCat serves it: events go out, actions
/// come in and are answered `ok` with their `echo`.
struct FakeOneBot {
    url: String,
    events: mpsc::UnboundedSender<Value>,
    actions: mpsc::UnboundedReceiver<Value>,
    connected: mpsc::UnboundedReceiver<()>,
}

async fn fake_onebot() -> FakeOneBot {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let (events, mut outgoing) = mpsc::unbounded_channel::<Value>();
    let (seen, actions) = mpsc::unbounded_channel();
    let (joined, connected) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        joined.send(()).unwrap();
        loop {
            tokio::select! {
                event = outgoing.recv() => {
                    let Some(event) = event else { break };
                    ws.send(Message::text(event.to_string())).await.unwrap();
                }
                frame = ws.next() => {
                    let Some(Ok(Message::Text(text))) = frame else { break };
                    let action: Value = serde_json::from_str(&text).unwrap();
                    let answer = json!({"status": "ok", "retcode": 0,
                        "data": {"message_id": 1}, "echo": action["echo"]});
                    ws.send(Message::text(answer.to_string())).await.unwrap();
                    seen.send(action).unwrap();
                }
            }
        }
    });
    FakeOneBot {
        url,
        events,
        actions,
        connected,
    }
}

impl FakeOneBot {
    /// A group message from `user`, shaped as NapCat sends it.
    fn group_message(&self, user: i64, text: &str) {
        self.events
            .send(json!({
                "time": 1_767_000_000, "self_id": BOT, "post_type": "message",
                "message_type": "group", "sub_type": "normal", "message_id": 7,
                "group_id": GROUP, "user_id": user, "font": 0,
                "message": [{"type": "text", "data": {"text": text}}], "raw_message": text,
                "sender": {"user_id": user, "nickname": "Alice", "card": ""}
            }))
            .unwrap();
    }

    /// The next `send_msg` the bot makes (bounded: a hang fails with what was seen).
    async fn next_send(&mut self) -> Value {
        let action = tokio::time::timeout(Duration::from_secs(60), self.actions.recv())
            .await
            .expect("the bot sent nothing to OneBot")
            .unwrap();
        assert_eq!(action["action"], "send_msg", "{action}");
        action
    }
}

fn text_of_send(action: &Value) -> String {
    let message = &action["params"]["message"];
    match message {
        Value::String(text) => text.clone(),
        Value::Array(segments) => segments
            .iter()
            .map(|s| s["data"]["text"].as_str().unwrap_or_default())
            .collect(),
        other => panic!("unexpected message {other}"),
    }
}

/// The QQ id a send mentions with an `at` segment before its text, if it does.
fn mention_of(action: &Value) -> Option<String> {
    let first = &action["params"]["message"][0];
    (first["type"] == "at").then(|| first["data"]["qq"].as_str().unwrap().to_owned())
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

async fn call(
    planner: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
    meta: Value,
) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(object(args));
    params.meta = Some(RequestMetaObject::from(object(meta)));
    planner.call_tool(params).await.unwrap()
}

fn text(result: &CallToolResult) -> String {
    result.content[0].as_text().unwrap().text.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_task_asks_in_the_group_gets_the_answer_over_onebot_and_delivers_there() {
    // The agent asks which city, then answers with what it was told.
    let (model, _) = fake_model(|results, body| {
        if results == 0 {
            return tool_call("q1", "ask_user", json!({"question": "Which city?"}));
        }
        let reply = last_tool_result(body);
        let city: Value = serde_json::from_str(&reply).unwrap();
        answer(&format!(
            "{}: sunny, 24°C",
            city["answer"].as_str().unwrap()
        ))
    })
    .await;
    let mut onebot = fake_onebot().await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nauth_token = \"{TOKEN}\"\n\n[channels.onebot]\nenabled = true\nurl = \"{}\"\n\n\
             [permission]\nusers = [\"qq:{ALICE}\"]\n",
            onebot.url
        ),
    )
    .unwrap();
    let mut command = mai(data.path(), &model);
    command
        .arg("--config")
        .arg(&config)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let served = Served::start(command);
    tokio::time::timeout(Duration::from_secs(60), onebot.connected.recv())
        .await
        .expect("serve never connected to OneBot");

    // Alice talks in the group: a chat command is answered raw in the group.
    onebot.group_message(ALICE, "/mt help");
    let help = onebot.next_send().await;
    assert_eq!(help["params"]["group_id"], GROUP);
    assert!(text_of_send(&help).contains("/maitask"), "{help}");

    // The group's planner, over MCP with the token, sees the 11 tools and creates a task.
    let stream_a = mai_host::stream_id_for(
        "qq",
        &ChatTarget::Group {
            group_id: GROUP.to_string(),
        },
    )
    .unwrap()
    .to_string();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", served.base))
            .auth_header(TOKEN),
    );
    let planner = ().serve(transport).await.unwrap();
    let tools = planner.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 11);
    let host = json!({"chat_id": stream_a, "platform": "qq",
                      "user_id": ALICE.to_string(), "group_id": GROUP.to_string()});
    let created = call(
        &planner,
        "subagent_create",
        json!({"intent": "tell Alice the weather in her city", "stream_id": stream_a}),
        host.clone(),
    )
    .await;
    assert_ne!(created.is_error, Some(true), "{}", text(&created));
    let task: Value = serde_json::from_str(&text(&created)).unwrap();
    let task_id = task["id"].as_str().unwrap().to_owned();

    // A planner call forging another stream is refused and touches nothing.
    let forged = call(
        &planner,
        "subagent_list",
        json!({"stream_id": "qq:group:666"}),
        host.clone(),
    )
    .await;
    assert_eq!(forged.is_error, Some(true));
    assert!(
        text(&forged).contains("not the current conversation"),
        "{}",
        text(&forged)
    );

    // The agent's question reaches the group; Alice answers there.
    let question = onebot.next_send().await;
    assert_eq!(question["params"]["group_id"], GROUP);
    assert!(
        text_of_send(&question).contains("Which city?"),
        "{question}"
    );
    assert_eq!(mention_of(&question), Some(ALICE.to_string()), "{question}");
    onebot.group_message(ALICE, "Kyoto");

    // The result is delivered to the same group.
    let result = onebot.next_send().await;
    assert_eq!(result["params"]["group_id"], GROUP);
    assert_eq!(result["params"]["message_type"], "group");
    assert!(text_of_send(&result).contains("Kyoto: sunny"), "{result}");
    assert_eq!(
        mention_of(&result),
        Some(ALICE.to_string()),
        "names who asked: {result}"
    );
    let status: Value = reqwest::Client::new()
        .get(format!("{}/v1/tasks/{task_id}", served.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["status"], "completed", "{status}");
    planner.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_in_a_quiet_group_get_no_answer_and_a_reply_names_who_asked() {
    const BOB: i64 = 10002;
    let (model, _) = fake_model(|_, _| answer("milk is on the list")).await;
    let mut onebot = fake_onebot().await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(
        &config,
        format!(
            "[channels.onebot]\nenabled = true\nurl = \"{}\"\nguest_replies = false\n\n\
             [permission]\nusers = [\"qq:{ALICE}\"]\n",
            onebot.url
        ),
    )
    .unwrap();
    let mut command = mai(data.path(), &model);
    command
        .arg("--config")
        .arg(&config)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let served = Served::start(command);
    tokio::time::timeout(Duration::from_secs(60), onebot.connected.recv())
        .await
        .expect("serve never connected to OneBot");
    // What an operator looks for: the connection, at the default log level.
    let connected = Served::wait_log(&served, "OneBot connected").await;
    assert!(connected.contains(&onebot.url), "{connected}");

    // Bob is a guest here: his commands go unanswered (and create nothing).
    onebot.group_message(BOB, "/mt help");
    onebot.group_message(BOB, "/mt create spam the group");
    // Alice is a user: her command is answered, and so is her task, naming her.
    onebot.group_message(ALICE, "/mt create add milk to the list");
    let created = onebot.next_send().await;
    assert!(text_of_send(&created).contains("created"), "{created}");
    let reply = onebot.next_send().await;
    assert!(
        text_of_send(&reply).contains("milk is on the list"),
        "{reply}"
    );
    assert_eq!(mention_of(&reply), Some(ALICE.to_string()), "{reply}");
    assert_eq!(text_of_send(&reply), " milk is on the list");
    let tasks = active_tasks(&reqwest::Client::new(), &served.base).await;
    assert!(tasks.is_empty(), "Bob's create made nothing: {tasks:?}");
    assert!(
        onebot.actions.try_recv().is_err(),
        "nothing was sent to Bob"
    );
}
