//! The MaiBot host: the [`Host`] capabilities answered by the MaiBot plugin over the bridge, the
//! WebSocket the plugin keeps open to `mai-agent serve` (docs/bridge-protocol.md).
//!
//! Owns the bridge slot (one bridge at a time; a new one replaces the old), the correlation of
//! requests and answers by id, the per-request timeout, *holding* message parts while no bridge
//! is reachable (up to `[host] offline_timeout_min`), and turning an `unsupported` answer into
//! the empty answer of a host without that capability. On a PostgreSQL database shared by
//! several instances ([`MaiBotHost::shared`]) a request made while no bridge is connected here
//! goes to the instance holding one, through the database (`relay`), and a bridge connected here
//! answers the other instances' requests. Must not: speak HTTP or WebSocket (the server's
//! handler moves text frames between a socket and [`MaiBotHost::receive`] /
//! [`BridgeLink::outbox`]), or make up data the plugin did not give.

mod link;
mod relay;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use mai_core::config::HostConfig;
use mai_core::host::{
    ChatLine, ChatTarget, Delivery, Host, HostError, Jargon, MemoryQuery, Person, Persona,
    PluginApi, StreamInfo, UserHit, UserQuery,
};
use mai_core::ids::{PersonId, StreamId};

use link::Slot;
pub use link::{BridgeError, BridgeLink, BridgeStatus, Hello};
use relay::Relay;
pub use relay::RelayConfig;

/// How long the MaiBot host waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaiBotConfig {
    /// One request's wait for the plugin's answer.
    pub request_timeout: Duration,
    /// How long a part is held for a bridge after the last one went away.
    pub offline_timeout: Duration,
}

impl MaiBotConfig {
    pub fn from_config(host: &HostConfig) -> MaiBotConfig {
        MaiBotConfig {
            request_timeout: Duration::from_secs(host.request_timeout_secs.into()),
            offline_timeout: Duration::from_secs(u64::from(host.offline_timeout_min) * 60),
        }
    }
}

impl Default for MaiBotConfig {
    fn default() -> Self {
        MaiBotConfig::from_config(&HostConfig::default())
    }
}

/// The host whose capabilities MaiBot's plugin serves. Cheap to clone; the server attaches
/// bridges to it, the engine calls it.
#[derive(Clone)]
pub struct MaiBotHost {
    slot: Arc<Slot>,
    /// The way to the bridges of other instances, on a shared PostgreSQL database.
    relay: Option<Arc<Relay>>,
    /// Per chat, how many parts failed because no bridge came back within the offline timeout:
    /// the next bridge first delivers a notice saying so into each of these chats.
    undelivered: Arc<std::sync::Mutex<BTreeMap<StreamId, usize>>>,
}

impl MaiBotHost {
    pub fn new(config: MaiBotConfig) -> MaiBotHost {
        MaiBotHost {
            slot: Arc::new(Slot::new(config)),
            relay: None,
            undelivered: Arc::default(),
        }
    }

    /// As [`MaiBotHost::new`], for one of several instances on the PostgreSQL database `pool`
    /// (migrated by [`crate::EmbeddedHost::on`]): a request made while no bridge is connected
    /// here is answered by the instance holding one, and a bridge connected here answers the
    /// others' requests. Runs until `pool` is closed.
    pub async fn shared(
        config: MaiBotConfig,
        pool: mai_store::sqlx::PgPool,
        relay: RelayConfig,
    ) -> Result<MaiBotHost, HostError> {
        let slot = Arc::new(Slot::new(config));
        let relay = Relay::start(pool, relay, slot.clone())
            .await
            .map_err(|error| {
                HostError::new(
                    "start routing MaiBot bridge requests between instances",
                    format!(
                        "{error}; check that PostgreSQL ([storage] url) is reachable and its \
                         host tables migrated"
                    ),
                )
            })?;
        let host = MaiBotHost {
            slot,
            relay: Some(relay.clone()),
            undelivered: Arc::default(),
        };
        tokio::spawn(host.clone().tell_through_others(relay.holders()));
        Ok(host)
    }

    /// On a shared database, the chats whose parts were given up here are told as soon as a
    /// bridge is reachable through another instance (as [`MaiBotHost::attach`] tells them
    /// when one connects here).
    async fn tell_through_others(self, mut holders: tokio::sync::watch::Receiver<u64>) {
        let Some(relay) = self.relay.clone() else {
            return;
        };
        while holders.changed().await.is_ok() && !relay.closed() {
            if self.undelivered_lock().is_empty() || !relay.holder_elsewhere().await {
                continue;
            }
            let notices = std::mem::take(&mut *self.undelivered_lock());
            self.deliver_notices(notices).await;
        }
    }

    /// Reads the plugin's first frame, which must be `hello`; returns what it said and the answer
    /// to send back before anything else.
    pub fn handshake(&self, frame: &str) -> Result<(Hello, String), String> {
        link::handshake(frame)
    }

    /// Makes a bridge that said hello the current one, replacing (and closing) any other; then
    /// tells each chat whose messages were given up while no bridge was connected.
    pub fn attach(&self, hello: Hello) -> BridgeLink {
        let link = self.slot.attach(hello);
        let notices = std::mem::take(&mut *self.undelivered_lock());
        if !notices.is_empty()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let host = self.clone();
            runtime.spawn(async move { host.deliver_notices(notices).await });
        }
        link
    }

    fn undelivered_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<StreamId, usize>> {
        // Single inserts and takes: a poisoned lock still holds consistent counts.
        self.undelivered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends each chat the notice of the parts it lost; a notice that cannot go out now waits
    /// for the next bridge.
    async fn deliver_notices(&self, notices: BTreeMap<StreamId, usize>) {
        for (stream, lost) in notices {
            let text = format!(
                "mai-agent could not deliver {lost} message(s) here: MaiBot's bridge was away \
                 longer than [host] offline_timeout_min. Ask for them again, or see /mt list."
            );
            let part_id = format!("notice:{:032x}", rand::random::<u128>());
            if let Err(error) = self.send(&stream, &text, &part_id).await {
                tracing::warn!(%stream, %error, "could not deliver the notice of undelivered messages");
                *self.undelivered_lock().entry(stream).or_default() += lost;
            }
        }
    }

    /// A text frame the plugin sent over bridge `generation`; returns the frame to answer with,
    /// if any (`ping`, or an error for a method mai-agent does not serve).
    pub fn receive(&self, generation: u64, frame: &str) -> Option<String> {
        self.slot.receive(generation, frame)
    }

    /// Bridge `generation` closed. Its unanswered requests fail; a part being sent is held again.
    pub fn detach(&self, generation: u64) {
        self.slot.detach(generation);
    }

    /// Whether a bridge is connected, and who it is; changes as bridges come and go.
    pub fn status(&self) -> tokio::sync::watch::Receiver<BridgeStatus> {
        self.slot.status()
    }

    /// The other instance whose bridge this one's requests go through now: `None` while a
    /// bridge is connected here, on a database not shared, or when no instance holds one.
    pub async fn bridge_elsewhere(&self) -> Option<String> {
        match &self.relay {
            Some(relay) if !self.slot.connected() => relay.holder().await,
            _ => None,
        }
    }

    /// How many message parts are held, waiting for a bridge.
    pub fn held(&self) -> tokio::sync::watch::Receiver<usize> {
        self.slot.held()
    }

    /// Request `method` over this instance's bridge; with none connected, through the instance
    /// holding one (when the database is shared).
    async fn request(&self, method: &str, params: Value) -> Result<Value, BridgeError> {
        let Some(relay) = &self.relay else {
            return self.slot.request(method, params).await;
        };
        match self.slot.request(method, params.clone()).await {
            Err(BridgeError::Offline) => {
                let timeout = self.slot.config().request_timeout;
                relay.forward(method, &params, timeout).await
            }
            outcome => outcome,
        }
    }

    /// Returns once a bridge is reachable — connected here, or held by another instance; while
    /// none is, the caller's part is counted as held, until no bridge has been seen for the
    /// offline timeout.
    async fn wait_for_bridge(&self) -> Result<(), BridgeError> {
        let Some(relay) = &self.relay else {
            return self.slot.wait_for_bridge().await;
        };
        let (mut status, mut holders) = (self.slot.status(), relay.holders());
        let offline_timeout = self.slot.config().offline_timeout;
        let mut held = None;
        loop {
            status.borrow_and_update();
            holders.borrow_and_update();
            if self.slot.connected() || relay.holder_elsewhere().await {
                return Ok(());
            }
            let away_since = match relay.seen_holder() {
                Some(seen) => seen.max(self.slot.offline_since()),
                None => self.slot.offline_since(),
            };
            if held.is_none() {
                tracing::info!(
                    "no MaiBot bridge connected to any instance: holding a message part until one connects"
                );
                held = Some(self.slot.hold());
            }
            tokio::select! {
                () = tokio::time::sleep_until(away_since + offline_timeout) => {
                    return Err(BridgeError::StillOffline {
                        minutes: offline_timeout.as_secs() / 60,
                    });
                }
                _ = status.changed() => {}
                _ = holders.changed() => {}
            }
        }
    }

    /// A request for `method`, as the plugin's answer decoded into `T`; `unsupported` gives
    /// `empty` (what a host without the capability answers).
    async fn ask<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        empty: T,
    ) -> Result<T, HostError> {
        match self.request(method, params).await {
            Ok(value) => decode(method, value),
            Err(BridgeError::Unsupported(_)) => Ok(empty),
            Err(error) => Err(host_error(method, error)),
        }
    }

    /// A request whose `unsupported` answer is an error (sends, opening chats, plugin APIs).
    async fn require<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, HostError> {
        match self.request(method, params).await {
            Ok(value) => decode(method, value),
            Err(error) => Err(host_error(method, error)),
        }
    }

    /// `send_text` with `part_id`, held while no bridge is reachable. A bridge that goes away
    /// before answering (here, or on the instance a request was routed to) leaves it unknown
    /// whether MaiBot sent the part: it is held and sent again with the same id, which the
    /// plugin drops when it already sent it.
    async fn send(
        &self,
        stream: &StreamId,
        text: &str,
        part_id: &str,
    ) -> Result<Delivery, HostError> {
        let params = json!({"stream_id": stream, "text": text, "part_id": part_id});
        loop {
            if let Err(error) = self.wait_for_bridge().await {
                if !part_id.starts_with("notice:") {
                    *self.undelivered_lock().entry(stream.clone()).or_default() += 1;
                }
                return Err(host_error("send_text", error));
            }
            match self.request("send_text", params.clone()).await {
                Ok(answer) => return Ok(delivery(&answer)),
                Err(BridgeError::Offline | BridgeError::Disconnected) => {
                    tracing::info!(%stream, part_id, "the bridge went away during a send; holding the part");
                }
                Err(error) => return Err(host_error("send_text", error)),
            }
        }
    }
}

/// What a `send_text` answer says: `{"sent": true}` (with `"duplicate": true` when the plugin had
/// already sent the part, which is a delivery too).
fn delivery(answer: &Value) -> Delivery {
    if answer.get("sent").and_then(Value::as_bool) == Some(true) {
        Delivery::Sent
    } else {
        Delivery::Rejected(format!("the MaiBot plugin answered {answer}"))
    }
}

fn decode<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, HostError> {
    serde_json::from_value(value).map_err(|error| {
        HostError::new(
            format!("read MaiBot's answer to {method}"),
            format!(
                "it does not have the shape docs/bridge-protocol.md gives ({error}); update the \
                 mai_agent_bridge plugin to the version of this mai-agent"
            ),
        )
    })
}

fn host_error(method: &str, error: BridgeError) -> HostError {
    HostError::new(format!("ask MaiBot for {method}"), error)
}

/// An id for a send that names no part (a planner's `send_message`): random, so never dropped.
fn adhoc_part_id() -> String {
    format!("adhoc:{:032x}", rand::random::<u128>())
}

#[async_trait]
impl Host for MaiBotHost {
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError> {
        self.send(stream, text, &adhoc_part_id()).await
    }

    async fn send_part(
        &self,
        stream: &StreamId,
        text: &str,
        part_id: &str,
    ) -> Result<Delivery, HostError> {
        self.send(stream, text, part_id).await
    }

    async fn append_context(&self, stream: &StreamId, note: &str) -> Result<(), HostError> {
        let params = json!({"stream_id": stream, "note": note});
        self.ask::<Value>("append_context", params, Value::Null)
            .await
            .map(drop)
    }

    async fn recent_messages(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ChatLine>, HostError> {
        let params = json!({"stream_id": stream, "limit": limit});
        self.ask("recent_messages", params, Vec::new()).await
    }

    async fn jargon(&self, stream: &StreamId, text: &str) -> Result<Vec<Jargon>, HostError> {
        let params = json!({"stream_id": stream, "text": text});
        self.ask("jargon", params, Vec::new()).await
    }

    async fn persona(&self) -> Persona {
        match self.ask("persona", json!({}), Persona::default()).await {
            Ok(persona) => persona,
            Err(error) => {
                tracing::debug!(%error, "no persona from MaiBot; using the default");
                Persona::default()
            }
        }
    }

    async fn stream_info(&self, stream: &StreamId) -> Result<Option<StreamInfo>, HostError> {
        self.ask("stream_info", json!({"stream_id": stream}), None)
            .await
    }

    async fn is_member(&self, person: &PersonId, stream: &StreamId) -> Result<bool, HostError> {
        let params = json!({"person": person.to_string(), "stream_id": stream});
        self.ask("is_member", params, false).await
    }

    async fn display_name(&self, person: &PersonId) -> Result<Option<String>, HostError> {
        self.ask("display_name", json!({"person": person.to_string()}), None)
            .await
    }

    async fn open_stream(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        #[derive(serde::Deserialize)]
        struct Opened {
            stream_id: StreamId,
        }
        let params = json!({"platform": platform, "target": target});
        let opened: Opened = self.require("open_stream", params).await?;
        Ok(opened.stream_id)
    }

    async fn list_streams(&self, limit: usize) -> Result<Vec<StreamInfo>, HostError> {
        self.ask("list_streams", json!({"limit": limit}), Vec::new())
            .await
    }

    async fn find_person(&self, name: &str) -> Result<Option<Person>, HostError> {
        self.ask("find_person", json!({"name": name}), None).await
    }

    async fn search_users(&self, query: &UserQuery) -> Result<Vec<UserHit>, HostError> {
        let params = serde_json::to_value(query).unwrap_or_else(|_| json!({}));
        self.ask("search_users", params, Vec::new()).await
    }

    async fn search_memory(&self, query: &MemoryQuery) -> Result<Value, HostError> {
        let params = json!({
            "query": query.query,
            "stream_id": query.stream,
            "mode": query.mode,
            "person_name": query.person_name,
            "time_start": query.time_start,
            "time_end": query.time_end,
            "limit": query.limit,
        });
        self.ask("search_memory", params, Value::Array(Vec::new()))
            .await
    }

    async fn talk_frequency(&self, stream: &StreamId) -> Result<Option<f64>, HostError> {
        self.ask("talk_frequency", json!({"stream_id": stream}), None)
            .await
    }

    async fn list_apis(&self) -> Result<Vec<PluginApi>, HostError> {
        self.ask("list_apis", json!({}), Vec::new()).await
    }

    async fn call_api(&self, name: &str, args: Value) -> Result<Value, HostError> {
        self.require("call_api", json!({"name": name, "args": args}))
            .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn host(offline_min: u64) -> MaiBotHost {
        MaiBotHost::new(MaiBotConfig {
            request_timeout: Duration::from_secs(5),
            offline_timeout: Duration::from_secs(offline_min * 60),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_held_past_the_offline_timeout_fails_naming_the_setting() {
        let host = host(30);
        let stream = StreamId::new("s").unwrap();
        let error = host.send_part(&stream, "hi", "t:0").await.unwrap_err();
        assert!(error.to_string().contains("offline_timeout_min"), "{error}");
        assert_eq!(*host.held().borrow(), 0);
        // Away longer than the timeout already: the next part fails at once, not 30 min later.
        let started = tokio::time::Instant::now();
        assert!(host.send_part(&stream, "hi", "t:1").await.is_err());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_bridge_first_tells_each_chat_what_it_lost_while_away() {
        let host = host(30);
        let (a, b) = (StreamId::new("a").unwrap(), StreamId::new("b").unwrap());
        for (stream, part) in [(&a, "t:0"), (&a, "t:1"), (&b, "u:0")] {
            assert!(host.send_part(stream, "answer", part).await.is_err());
        }
        let mut link = host.attach(Hello::default());
        // Taken by this bridge: the next one has nothing to tell unless these fail again.
        assert!(host.undelivered_lock().is_empty());
        let mut noticed = BTreeMap::new();
        for _ in 0..2 {
            let request: Value = serde_json::from_str(&link.outbox.recv().await.unwrap()).unwrap();
            assert_eq!(request["method"], "send_text");
            assert!(
                request["params"]["part_id"]
                    .as_str()
                    .unwrap()
                    .starts_with("notice:")
            );
            let text = request["params"]["text"].as_str().unwrap().to_owned();
            noticed.insert(
                request["params"]["stream_id"].as_str().unwrap().to_owned(),
                text,
            );
        }
        assert!(
            noticed["a"].contains("could not deliver 2 message(s)"),
            "{noticed:?}"
        );
        assert!(
            noticed["b"].contains("could not deliver 1 message(s)"),
            "{noticed:?}"
        );
    }

    #[tokio::test]
    async fn other_calls_fail_at_once_without_a_bridge() {
        let host = host(30);
        let error = host
            .recent_messages(&StreamId::new("s").unwrap(), 3)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("no MaiBot bridge"), "{error}");
        assert_eq!(host.persona().await, Persona::default());
    }

    #[test]
    fn the_first_frame_must_be_hello() {
        let host = host(1);
        let (hello, answer) = host
            .handshake(r#"{"id":"hello","method":"hello","params":{"plugin_version":"1"}}"#)
            .unwrap();
        assert_eq!(hello.plugin_version.as_deref(), Some("1"));
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["id"], "hello");
        let error = host.handshake(r#"{"id":"1","method":"ping"}"#).unwrap_err();
        assert!(error.contains("hello"), "{error}");
        assert!(host.handshake("not json").is_err());
    }

    #[tokio::test]
    async fn answers_match_requests_by_id_and_error_codes_keep_their_meaning() {
        let host = host(1);
        let mut link = host.attach(Hello::default());
        let stream = StreamId::new("s").unwrap();
        let (h, s) = (host.clone(), stream.clone());
        let asking = tokio::spawn(async move { h.stream_info(&s).await });
        let request: Value = serde_json::from_str(&link.outbox.recv().await.unwrap()).unwrap();
        assert_eq!(request["method"], "stream_info");
        let answer =
            json!({"id": request["id"], "error": {"code": "failed", "message": "db down"}});
        assert_eq!(host.receive(link.generation, &answer.to_string()), None);
        let error = asking.await.unwrap().unwrap_err();
        assert!(error.to_string().contains("db down"), "{error}");
        // The plugin's own requests: ping is served, anything else is unsupported.
        let pong = host.receive(link.generation, r#"{"id":"p","method":"ping"}"#);
        assert_eq!(pong.as_deref(), Some(r#"{"id":"p","result":"pong"}"#));
        let other = host
            .receive(link.generation, r#"{"id":"q","method":"reboot"}"#)
            .unwrap();
        assert!(other.contains("unsupported"), "{other}");
        // A bridge that closes fails what was sent over it.
        let (h, s) = (host.clone(), stream.clone());
        let asking =
            tokio::spawn(async move { h.is_member(&PersonId::new("qq", "1").unwrap(), &s).await });
        link.outbox.recv().await.unwrap();
        host.detach(link.generation);
        let error = asking.await.unwrap().unwrap_err();
        assert!(error.to_string().contains("closed"), "{error}");
        assert!(host.status().borrow().connected.is_none());
    }
}
