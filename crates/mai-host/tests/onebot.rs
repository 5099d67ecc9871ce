//! The OneBot v11 channel against a fake OneBot implementation: a forward WebSocket server on
//! loopback that checks the access token, pushes v11 events and answers `send_msg` actions the
//! way NapCat does. Every wait is on an event (a frame, an accept, a status change); the
//! `within` guard only turns a hang into a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use mai_core::config::OneBotConfig;
use mai_core::host::{ChatTarget, Delivery, Host};
use mai_core::ids::StreamId;
use mai_host::{
    EmbeddedConfig, EmbeddedHost, IncomingMessage, OneBotChannel, OneBotHandle, OneBotState,
    OneBotStatus,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;

const SELF_ID: i64 = 10_000;

/// Fails the test instead of hanging when something never happens.
async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

// ---------------------------------------------------------------------------------------------
// The fake OneBot implementation.

/// A forward WebSocket server. `token: Some(t)` requires `Authorization: Bearer t`.
struct FakeOneBot {
    url: String,
    accepted: mpsc::UnboundedReceiver<Conn>,
    /// The `Authorization` header of each refused handshake.
    refused: mpsc::UnboundedReceiver<Option<String>>,
    task: JoinHandle<()>,
}

impl Drop for FakeOneBot {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeOneBot {
    async fn start(token: Option<&str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let (accepted_tx, accepted) = mpsc::unbounded_channel();
        let (refused_tx, refused) = mpsc::unbounded_channel();
        let expected = token.map(|token| format!("Bearer {token}"));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let mut auth: Option<String> = None;
                // The return type is tungstenite's handshake callback's, not ours to shrink.
                #[allow(clippy::result_large_err)]
                let check = |request: &Request, response: Response| {
                    auth = request
                        .headers()
                        .get("authorization")
                        .and_then(|value| value.to_str().ok())
                        .map(str::to_owned);
                    match &expected {
                        Some(expected) if auth.as_ref() != Some(expected) => {
                            let mut refusal =
                                ErrorResponse::new(Some("token verify failed".into()));
                            *refusal.status_mut() = StatusCode::UNAUTHORIZED;
                            Err(refusal)
                        }
                        _ => Ok(response),
                    }
                };
                match tokio_tungstenite::accept_hdr_async(stream, check).await {
                    Ok(ws) => {
                        let _ = accepted_tx.send(Conn { ws, auth });
                    }
                    Err(_) => {
                        let _ = refused_tx.send(auth);
                    }
                }
            }
        });
        FakeOneBot {
            url,
            accepted,
            refused,
            task,
        }
    }

    async fn accept(&mut self) -> Conn {
        within("a connection", self.accepted.recv()).await.unwrap()
    }

    async fn refusal(&mut self) -> Option<String> {
        within("a refused handshake", self.refused.recv())
            .await
            .unwrap()
    }
}

/// One accepted client connection, seen from the implementation's side.
struct Conn {
    ws: WebSocketStream<TcpStream>,
    auth: Option<String>,
}

impl Conn {
    async fn push(&mut self, event: Value) {
        self.push_raw(Message::text(event.to_string())).await;
    }

    async fn push_raw(&mut self, message: Message) {
        self.ws.send(message).await.unwrap();
    }

    /// The next action the channel sent.
    async fn action(&mut self) -> Value {
        loop {
            let message = within("an action", self.ws.next())
                .await
                .expect("the channel closed the connection")
                .unwrap();
            if let Message::Text(text) = message {
                return serde_json::from_str(text.as_str()).unwrap();
            }
        }
    }

    /// Answers an action the way NapCat does.
    async fn answer(&mut self, action: &Value, retcode: i64, wording: &str) {
        let status = if retcode == 0 { "ok" } else { "failed" };
        self.push(json!({
            "status": status,
            "retcode": retcode,
            "data": if retcode == 0 { json!({"message_id": 1}) } else { Value::Null },
            "message": wording,
            "wording": wording,
            "echo": action["echo"],
        }))
        .await;
    }

    /// Waits until the channel closes the connection.
    async fn closed(&mut self) {
        loop {
            match within("the connection to close", self.ws.next()).await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// OneBot v11 events, as NapCat sends them.

fn group_event(group: i64, user: i64, message: Value, raw: &str) -> Value {
    json!({
        "self_id": SELF_ID, "user_id": user, "time": 1_717_243_200, "message_id": 99,
        "message_seq": 99, "real_id": 99, "message_type": "group",
        "sender": {"user_id": user, "nickname": "Nick", "card": "Card Name", "role": "member"},
        "raw_message": raw, "font": 14, "sub_type": "normal",
        "message": message, "message_format": if message.is_array() { "array" } else { "string" },
        "post_type": "message", "group_id": group
    })
}

fn private_event(user: i64, message: Value) -> Value {
    json!({
        "self_id": SELF_ID, "user_id": user, "time": 1_717_243_260, "message_id": 7,
        "message_type": "private", "sub_type": "friend",
        "sender": {"user_id": user, "nickname": "Pat", "card": ""},
        "raw_message": "", "font": 14, "message": message,
        "message_format": if message.is_array() { "array" } else { "string" },
        "post_type": "message"
    })
}

fn heartbeat(interval_ms: u64) -> Value {
    json!({
        "time": 1_717_243_200, "self_id": SELF_ID, "post_type": "meta_event",
        "meta_event_type": "heartbeat", "status": {"online": true, "good": true},
        "interval": interval_ms
    })
}

// ---------------------------------------------------------------------------------------------
// The channel under test.

fn config(url: &str, token: Option<&str>) -> OneBotConfig {
    OneBotConfig {
        enabled: true,
        url: url.to_owned(),
        access_token: token.map(str::to_owned),
        platform: "qq".into(),
        reconnect_initial_ms: 10,
        reconnect_max_secs: 1,
        send_timeout_secs: 1,
        ..OneBotConfig::default()
    }
}

struct Bot {
    host: Arc<EmbeddedHost>,
    handle: OneBotHandle,
    inbound: mpsc::Receiver<IncomingMessage>,
    _dir: TempDir,
}

impl Bot {
    async fn start(config: OneBotConfig) -> Bot {
        Bot::start_with_queue(config, 64).await
    }

    async fn start_with_queue(config: OneBotConfig, queue: usize) -> Bot {
        let dir = tempfile::tempdir().unwrap();
        let host = Arc::new(
            EmbeddedHost::open(dir.path().join("host.db"), EmbeddedConfig::default())
                .await
                .unwrap(),
        );
        let (inbound_tx, inbound) = mpsc::channel(queue);
        let handle = OneBotChannel::start(config, Arc::clone(&host), inbound_tx);
        Bot {
            host,
            handle,
            inbound,
            _dir: dir,
        }
    }

    async fn wait_for(&self, what: &str, check: impl FnMut(&OneBotStatus) -> bool) -> OneBotStatus {
        let mut status = self.handle.watch_status();
        within(what, status.wait_for(check)).await.unwrap().clone()
    }

    async fn connected(&self) {
        self.wait_for("Connected", |status| status.state == OneBotState::Connected)
            .await;
    }

    async fn next_message(&mut self) -> IncomingMessage {
        within("an inbound message", self.inbound.recv())
            .await
            .unwrap()
    }

    async fn group(&self, group: &str) -> StreamId {
        let target = ChatTarget::Group {
            group_id: group.into(),
        };
        self.host.open_stream("qq", &target).await.unwrap()
    }

    async fn private(&self, user: &str) -> StreamId {
        let target = ChatTarget::Private {
            user_id: user.into(),
        };
        self.host.open_stream("qq", &target).await.unwrap()
    }

    /// Sends in the background, so the test can play the implementation meanwhile.
    fn send(
        &self,
        stream: &StreamId,
        text: &str,
    ) -> JoinHandle<Result<Delivery, mai_core::host::HostError>> {
        let host = Arc::clone(&self.host);
        let stream = stream.clone();
        let text = text.to_owned();
        tokio::spawn(async move { host.send_text(&stream, &text).await })
    }
}

/// A connected bot and the implementation's side of its connection.
async fn connected_bot() -> (Bot, FakeOneBot, Conn) {
    let mut server = FakeOneBot::start(None).await;
    let bot = Bot::start(config(&server.url, None)).await;
    let conn = server.accept().await;
    bot.connected().await;
    (bot, server, conn)
}

// ---------------------------------------------------------------------------------------------
// Events in.

#[tokio::test]
async fn group_message_segments_arrive_mapped() {
    let (mut bot, _server, mut conn) = connected_bot().await;
    conn.push(group_event(
        123_456,
        42,
        json!([
            {"type": "reply", "data": {"id": "5"}},
            {"type": "at", "data": {"qq": "10000", "name": "mai"}},
            {"type": "text", "data": {"text": " look at this "}},
            {"type": "image", "data": {"file": "a.jpg", "url": "http://x/a.jpg", "summary": ""}},
            {"type": "face", "data": {"id": "14"}},
            {"type": "text", "data": {"text": " [CQ:at,qq=all] &amp;"}}
        ]),
        "[CQ:reply,id=5][CQ:at,qq=10000] look at this [CQ:image,file=a.jpg][CQ:face,id=14] &#91;CQ:at,qq=all&#93; &amp;amp;",
    ))
    .await;
    let message = bot.next_message().await;
    assert_eq!(
        message,
        IncomingMessage {
            platform: "qq".into(),
            stream_id: None,
            group_id: Some("123456".into()),
            group_name: None,
            user_id: "42".into(),
            sender_name: "Card Name".into(),
            // Segment text is already plain: no CQ unescaping happens to it.
            text: "[reply] @mai look at this [image][face] [CQ:at,qq=all] &amp;".into(),
            at: chrono::DateTime::from_timestamp(1_717_243_200, 0).unwrap(),
            anonymous: false,
            platform_message_id: Some("99".into()),
        }
    );
}

#[tokio::test]
async fn cq_string_messages_are_unescaped_and_private_chats_have_no_group() {
    let (mut bot, _server, mut conn) = connected_bot().await;
    conn.push(private_event(
        7_777,
        json!("hi [CQ:at,qq=10000] &#91;not a code&#93; a&#44;b &amp; [CQ:image,file=x.png,url=http://a?b=1&amp;c=2]"),
    ))
    .await;
    let private = bot.next_message().await;
    assert_eq!(private.group_id, None);
    assert_eq!(private.user_id, "7777");
    assert_eq!(
        private.sender_name, "Pat",
        "empty card falls back to nickname"
    );
    assert_eq!(private.text, "hi @10000 [not a code] a,b & [image]");
    assert_eq!(private.at.timestamp(), 1_717_243_260);

    let mut group = group_event(5, 6, json!("[CQ:at,qq=all] 开会了"), "");
    group["sender"]["card"] = json!("");
    group["group_name"] = json!("技术群");
    conn.push(group).await;
    let message = bot.next_message().await;
    assert_eq!(message.group_id.as_deref(), Some("5"));
    assert_eq!(message.group_name.as_deref(), Some("技术群"));
    assert_eq!(message.sender_name, "Nick");
    assert_eq!(message.text, "@全体成员 开会了");
}

#[tokio::test]
async fn an_anonymous_group_members_message_arrives_marked_anonymous() {
    let (mut bot, _server, mut conn) = connected_bot().await;
    // As NapCat sends one: QQ's shared anonymous id, `sub_type` and the `anonymous` object.
    let mut masked = group_event(5, 80_000_000, json!("/mt create x"), "/mt create x");
    masked["sub_type"] = json!("anonymous");
    masked["anonymous"] = json!({"id": 2_333, "name": "Masked Cat", "flag": "2333|Masked Cat"});
    masked["sender"] = json!({"user_id": 80_000_000, "nickname": "", "card": ""});
    conn.push(masked).await;
    let message = bot.next_message().await;
    assert!(message.anonymous, "{message:?}");
    assert_eq!(message.user_id, "80000000");
    assert_eq!(message.group_id.as_deref(), Some("5"));
    assert_eq!(message.sender_name, "Masked Cat");
    assert_eq!(message.text, "/mt create x");
    // A named member (NapCat sends `"anonymous": null`) is not.
    let mut named = group_event(5, 6, json!("hi"), "hi");
    named["anonymous"] = Value::Null;
    conn.push(named).await;
    assert!(!bot.next_message().await.anonymous);
}

#[tokio::test]
async fn own_messages_meta_events_notices_and_bad_frames_are_skipped() {
    let (mut bot, _server, mut conn) = connected_bot().await;
    let own = group_event(
        1,
        SELF_ID,
        json!([{"type": "text", "data": {"text": "mine"}}]),
        "mine",
    );
    let mut sent = own.clone();
    sent["post_type"] = json!("message_sent");
    let skipped = [
        json!({"time": 1, "self_id": SELF_ID, "post_type": "meta_event", "meta_event_type": "lifecycle", "sub_type": "connect"}),
        heartbeat(30_000),
        own,
        sent,
        json!({"time": 1, "self_id": SELF_ID, "post_type": "notice", "notice_type": "group_increase", "group_id": 1, "user_id": 2}),
        json!({"time": 1, "self_id": SELF_ID, "post_type": "request", "request_type": "friend", "user_id": 2, "comment": "hi"}),
        json!({"time": 1, "self_id": SELF_ID, "post_type": "something_new"}),
        // An unknown message type, a group message without its group, an image-only-less
        // empty message.
        json!({"post_type": "message", "message_type": "guild", "user_id": 2, "message": "x"}),
        json!({"post_type": "message", "message_type": "group", "user_id": 2, "message": "x"}),
        private_event(3, json!([])),
        // An answer to nothing this channel sent.
        json!({"status": "failed", "retcode": 1403, "data": null, "message": "token verify failed", "echo": null}),
    ];
    for event in skipped {
        conn.push(event).await;
    }
    conn.push_raw(Message::text("{not json")).await;
    conn.push_raw(Message::text("[1, 2, 3]")).await;
    conn.push_raw(Message::binary(vec![0xff, 0xfe, 0x00])).await;
    // Over the 1 MiB frame limit, but a well-formed message: skipped unread.
    let huge = "x".repeat(2 * 1024 * 1024);
    conn.push(private_event(
        4,
        json!([{"type": "text", "data": {"text": huge}}]),
    ))
    .await;
    conn.push(group_event(
        1,
        2,
        json!([{"type": "text", "data": {"text": "after"}}]),
        "after",
    ))
    .await;

    let message = bot.next_message().await;
    assert_eq!(message.text, "after", "nothing skipped arrived first");
    assert_eq!(message.user_id, "2");

    // The same connection still carries sends.
    let stream = bot.group("1").await;
    let sending = bot.send(&stream, "still here");
    let action = conn.action().await;
    conn.answer(&action, 0, "").await;
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);
    assert_eq!(bot.handle.status().state, OneBotState::Connected);
}

#[tokio::test]
async fn a_busy_consumer_does_not_hold_up_send_answers() {
    let mut server = FakeOneBot::start(None).await;
    // Room for one message, and nobody reads it.
    let bot = Bot::start_with_queue(config(&server.url, None), 1).await;
    let mut conn = server.accept().await;
    bot.connected().await;
    for n in 0..5 {
        conn.push(private_event(100 + n, json!("queued"))).await;
    }
    let stream = bot.private("100").await;
    let sending = bot.send(&stream, "answer");
    let action = conn.action().await;
    conn.answer(&action, 0, "").await;
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);
}

// ---------------------------------------------------------------------------------------------
// Sending.

#[tokio::test]
async fn send_to_a_group_is_a_send_msg_action_and_sent_on_retcode_0() {
    let (bot, _server, mut conn) = connected_bot().await;
    let stream = bot.group("123456").await;
    let text = "[CQ:at,qq=all] & &#91; hello";
    let sending = bot.send(&stream, text);
    let action = conn.action().await;
    assert_eq!(action["action"], "send_msg");
    assert!(action["echo"].as_str().is_some_and(|echo| !echo.is_empty()));
    assert_eq!(
        action["params"],
        json!({
            "message_type": "group",
            "group_id": 123_456,
            // One text segment: the implementation never reads CQ codes out of it.
            "message": [{"type": "text", "data": {"text": text}}]
        })
    );
    conn.answer(&action, 0, "").await;
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);
    let history = bot.host.recent_messages(&stream, 10).await.unwrap();
    assert_eq!(history.len(), 1, "a sent message enters the history");
    assert_eq!(history[0].text, text);
}

#[tokio::test]
async fn send_to_a_private_chat_targets_the_user() {
    let (bot, _server, mut conn) = connected_bot().await;
    let stream = bot.private("7777").await;
    let sending = bot.send(&stream, "hi");
    let action = conn.action().await;
    assert_eq!(action["params"]["message_type"], "private");
    assert_eq!(action["params"]["user_id"], 7777);
    assert!(action["params"].get("group_id").is_none());
    conn.answer(&action, 0, "").await;
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);
}

#[tokio::test]
async fn a_failed_retcode_is_rejected_with_the_implementations_reason() {
    let (bot, _server, mut conn) = connected_bot().await;
    let stream = bot.group("1").await;
    let sending = bot.send(&stream, "hi");
    let action = conn.action().await;
    conn.answer(&action, 1200, "bot is muted in this group")
        .await;
    assert_eq!(
        sending.await.unwrap().unwrap(),
        Delivery::Rejected("OneBot retcode 1200: bot is muted in this group".into())
    );
    let history = bot.host.recent_messages(&stream, 10).await.unwrap();
    assert!(history.is_empty(), "a rejected message is not history");
}

#[tokio::test]
async fn an_unanswered_send_times_out_and_a_late_answer_confuses_nothing() {
    let (bot, _server, mut conn) = connected_bot().await;
    let stream = bot.group("1").await;
    let sending = bot.send(&stream, "first");
    let unanswered = conn.action().await;
    let error = sending.await.unwrap().unwrap_err();
    assert!(error.detail.contains("no answer from OneBot"), "{error:?}");

    conn.answer(&unanswered, 0, "").await;
    let sending = bot.send(&stream, "second");
    let action = conn.action().await;
    assert_ne!(action["echo"], unanswered["echo"]);
    conn.answer(&action, 1, "failed").await;
    assert_eq!(
        sending.await.unwrap().unwrap(),
        Delivery::Rejected("OneBot retcode 1: failed".into()),
        "the late `ok` for the first send was not taken for the second"
    );
}

#[tokio::test]
async fn twenty_concurrent_sends_answered_out_of_order_are_each_correlated() {
    let (bot, _server, mut conn) = connected_bot().await;
    let mut sends = Vec::new();
    for n in 0..20 {
        let stream = bot.group(&format!("{}", 1000 + n)).await;
        sends.push((n, bot.send(&stream, &format!("to {n}"))));
    }
    let mut actions = Vec::new();
    for _ in 0..20 {
        actions.push(conn.action().await);
    }
    let echoes: std::collections::HashSet<_> = actions
        .iter()
        .map(|action| action["echo"].to_string())
        .collect();
    assert_eq!(echoes.len(), 20, "every action has its own echo");
    actions.reverse();
    for action in &actions {
        let group = action["params"]["group_id"].as_i64().unwrap();
        assert_eq!(
            action["params"]["message"][0]["data"]["text"],
            format!("to {}", group - 1000)
        );
        if group % 2 == 0 {
            conn.answer(action, 0, "").await;
        } else {
            conn.answer(action, 100, &format!("group {group}")).await;
        }
    }
    for (n, sending) in sends {
        let delivery = sending.await.unwrap().unwrap();
        let group = 1000 + n;
        if group % 2 == 0 {
            assert_eq!(delivery, Delivery::Sent, "send {n}");
        } else {
            assert_eq!(
                delivery,
                Delivery::Rejected(format!("OneBot retcode 100: group {group}")),
                "send {n}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The connection.

#[tokio::test]
async fn the_access_token_is_sent_and_a_refusal_is_reported() {
    // One server per case, so a retry of one client is never mistaken for another's.
    let mut server = FakeOneBot::start(Some("s3cret")).await;
    let missing = Bot::start(config(&server.url, None)).await;
    assert_eq!(server.refusal().await, None);
    let status = missing
        .wait_for("a refusal", |status| {
            status.state == OneBotState::Reconnecting
        })
        .await;
    let error = status.last_error.unwrap();
    assert!(
        error.contains("refused the access token") && error.contains("401"),
        "{error}"
    );

    let mut server = FakeOneBot::start(Some("s3cret")).await;
    let _wrong = Bot::start(config(&server.url, Some("guess"))).await;
    assert_eq!(server.refusal().await.as_deref(), Some("Bearer guess"));

    let mut server = FakeOneBot::start(Some("s3cret")).await;
    let right = Bot::start(config(&server.url, Some("s3cret"))).await;
    let conn = server.accept().await;
    assert_eq!(conn.auth.as_deref(), Some("Bearer s3cret"));
    right.connected().await;
    assert_eq!(right.handle.status().last_error, None);
}

#[tokio::test]
async fn after_the_server_drops_the_connection_the_channel_reconnects_and_sends_again() {
    let (bot, mut server, conn) = connected_bot().await;
    let stream = bot.group("1").await;
    drop(conn);
    let mut conn = server.accept().await;
    bot.connected().await;
    let sending = bot.send(&stream, "back");
    let action = conn.action().await;
    conn.answer(&action, 0, "").await;
    assert_eq!(sending.await.unwrap().unwrap(), Delivery::Sent);
}

#[tokio::test]
async fn a_send_waiting_when_the_connection_drops_fails() {
    let (bot, mut server, mut conn) = connected_bot().await;
    let stream = bot.group("1").await;
    let sending = bot.send(&stream, "lost");
    conn.action().await;
    drop(conn);
    let error = sending.await.unwrap().unwrap_err();
    assert!(
        error
            .detail
            .contains("closed before the implementation answered"),
        "{error:?}"
    );
    server.accept().await;
}

#[tokio::test]
async fn a_silent_connection_is_replaced_once_heartbeats_stop() {
    let (_bot, mut server, mut conn) = connected_bot().await;
    conn.push(heartbeat(20)).await;
    // The fake keeps the socket open but says nothing more.
    let _second = server.accept().await;
    drop(conn);
}

#[tokio::test]
async fn sends_while_disconnected_fail_and_say_why() {
    // A port nobody listens on.
    let url = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("ws://{}", listener.local_addr().unwrap())
    };
    let bot = Bot::start(config(&url, None)).await;
    let status = bot
        .wait_for("a failed connect", |status| {
            status.state == OneBotState::Reconnecting
        })
        .await;
    assert!(status.last_error.unwrap().contains("cannot connect"));
    let stream = bot.group("1").await;
    let error = bot.host.send_text(&stream, "hello").await.unwrap_err();
    assert!(
        error.detail.contains("OneBot connection is down"),
        "{error:?}"
    );
    assert!(
        bot.host
            .recent_messages(&stream, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn shutdown_closes_the_connection_stops_the_loop_and_unregisters() {
    let (bot, _server, mut conn) = connected_bot().await;
    let stream = bot.group("1").await;
    let status = bot.handle.watch_status();
    within("shutdown", bot.handle.shutdown()).await;
    conn.closed().await;
    assert_eq!(status.borrow().state, OneBotState::Stopped);
    assert_eq!(
        bot.host.send_text(&stream, "anyone?").await.unwrap(),
        Delivery::Rejected("no channel connected for platform qq".into())
    );
}

#[tokio::test]
async fn a_wss_url_speaks_tls_and_a_failed_handshake_is_retried() {
    // The fake speaks plain WebSocket: the channel's TLS ClientHello is not an upgrade request.
    let mut server = FakeOneBot::start(None).await;
    let url = server.url.replace("ws://", "wss://");
    let bot = Bot::start(config(&url, None)).await;
    server.refusal().await;
    let status = bot
        .wait_for("a failed TLS connect", |status| {
            status.state == OneBotState::Reconnecting
        })
        .await;
    assert!(
        status.last_error.unwrap().contains("cannot connect"),
        "the error names the failure"
    );
    server.refusal().await;
}
