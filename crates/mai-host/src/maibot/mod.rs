//! The MaiBot host: the [`Host`] capabilities answered by the MaiBot plugin over the bridge, the
//! WebSocket the plugin keeps open to `mai-agent serve` (docs/bridge-protocol.md).
//!
//! Owns the bridge slot (one bridge at a time; a new one replaces the old), the correlation of
//! requests and answers by id, the per-request timeout, *holding* message parts while no bridge
//! is connected (up to `[host] offline_timeout_min`), and turning an `unsupported` answer into
//! the empty answer of a host without that capability. Must not: speak HTTP or WebSocket (the
//! server's handler moves text frames between a socket and [`MaiBotHost::receive`] /
//! [`BridgeLink::outbox`]), or make up data the plugin did not give.

mod link;

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
}

impl MaiBotHost {
    pub fn new(config: MaiBotConfig) -> MaiBotHost {
        MaiBotHost {
            slot: Arc::new(Slot::new(config)),
        }
    }

    /// Reads the plugin's first frame, which must be `hello`; returns what it said and the answer
    /// to send back before anything else.
    pub fn handshake(&self, frame: &str) -> Result<(Hello, String), String> {
        link::handshake(frame)
    }

    /// Makes a bridge that said hello the current one, replacing (and closing) any other.
    pub fn attach(&self, hello: Hello) -> BridgeLink {
        self.slot.attach(hello)
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

    /// How many message parts are held, waiting for a bridge.
    pub fn held(&self) -> tokio::sync::watch::Receiver<usize> {
        self.slot.held()
    }

    /// A request for `method`, as the plugin's answer decoded into `T`; `unsupported` gives
    /// `empty` (what a host without the capability answers).
    async fn ask<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        empty: T,
    ) -> Result<T, HostError> {
        match self.slot.request(method, params).await {
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
        match self.slot.request(method, params).await {
            Ok(value) => decode(method, value),
            Err(error) => Err(host_error(method, error)),
        }
    }

    /// `send_text` with `part_id`, held while no bridge is connected. A bridge that goes away
    /// before answering leaves it unknown whether MaiBot sent the part: it is held and sent
    /// again with the same id, which the plugin drops when it already sent it.
    async fn send(
        &self,
        stream: &StreamId,
        text: &str,
        part_id: &str,
    ) -> Result<Delivery, HostError> {
        let params = json!({"stream_id": stream, "text": text, "part_id": part_id});
        loop {
            self.slot
                .wait_for_bridge()
                .await
                .map_err(|error| host_error("send_text", error))?;
            match self.slot.request("send_text", params.clone()).await {
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
