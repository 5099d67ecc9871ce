//! [`EmbeddedHost`]: opening the host database, the public ingestion and curation API the
//! channels and the binary use, and the [`Host`] implementation the engine sees. Each
//! operation delegates to the module that owns its tables; this module owns connections, the
//! write turn and the clock.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mai_core::clock::{Clock, SystemClock};
use mai_core::host::{
    ChatLine, ChatTarget, Delivery, Host, HostError, Jargon, MemoryQuery, Person, Persona,
    StreamInfo, UserHit, UserQuery,
};
use mai_core::ids::{PersonId, StreamId};
use serde::{Deserialize, Serialize};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use tokio::sync::{Mutex, MutexGuard};

use crate::channels::{ChannelSender, Channels, no_channel};
use crate::error::{OpenError, corrupt, db};
use crate::ingest::{IncomingMessage, IngestedMessage, ingest, insert_message};
use crate::members;
use crate::memory::{MemorySettings, search_memory};
use crate::notes::{self, ContextNote};
use crate::people::{self, NewPerson};
use crate::schema::{self, from_millis, to_millis};
use crate::streams::{self, StreamNames, ensure_stream, sql_limit};
use crate::user_search::{Found, find_targets};

/// The user id the bot's own stored messages carry (they are also flagged `is_bot`).
const BOT_USER_ID: &str = "self";
/// What a `search_users` limit of 0 means, and the most it returns.
const DEFAULT_USER_LIMIT: usize = 10;
const MAX_USER_LIMIT: usize = 200;

/// How the embedded host behaves; the binary fills it from its config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EmbeddedConfig {
    /// Bot name, personality and reply style.
    pub persona: Persona,
    /// How far either side of a match an `episode` search gathers messages.
    pub episode_window_minutes: u32,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            persona: Persona::default(),
            episode_window_minutes: 10,
        }
    }
}

/// The embedded host over SQLite. Cheap to share behind an `Arc`; safe to call concurrently.
pub struct EmbeddedHost {
    pool: SqlitePool,
    /// Where writes go: `pool`, or the writer connection of the task store sharing the file.
    writer: SqlitePool,
    /// Serializes this process's writes to the file, which then take SQLite's write lock with
    /// `BEGIN IMMEDIATE`. Shared with the task store when the file is shared
    /// ([`EmbeddedHost::with_shared_writer`]): other writers then wait their turn in order here
    /// instead of in SQLite's busy handler, which sleeps 1–100 ms between tries.
    write_gate: Arc<Mutex<()>>,
    config: EmbeddedConfig,
    clock: Arc<dyn Clock>,
    channels: Channels,
}

/// This process's write turn and the open `BEGIN IMMEDIATE` transaction.
type WriteTurn<'a> = (MutexGuard<'a, ()>, Transaction<'static, Sqlite>);

impl EmbeddedHost {
    /// Opens (creating it and its directory if missing) the database file at `path` — the task
    /// database `<data_dir>/mai-agent.db` or a file of its own — with its own pool (WAL,
    /// `synchronous = NORMAL`, foreign keys, 10 s busy timeout) and creates or migrates the
    /// host tables.
    pub async fn open(path: impl AsRef<Path>, config: EmbeddedConfig) -> Result<Self, OpenError> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|source| OpenError::CreateDir {
                    path: dir.to_owned(),
                    source,
                })?;
        }
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(connect)
            .await
            .map_err(|source| OpenError::Connect {
                path: path.to_owned(),
                source,
            })?;
        Self::with_pool(pool, config).await
    }

    /// Uses an existing pool (its pragmas are the caller's; foreign keys should be on; an
    /// in-memory database needs a pool of exactly one connection that is never recycled) and
    /// creates or migrates the host tables in it.
    pub async fn with_pool(pool: SqlitePool, config: EmbeddedConfig) -> Result<Self, OpenError> {
        let writer = pool.clone();
        Self::with_shared_writer(pool, writer, Arc::default(), config).await
    }

    /// [`EmbeddedHost::with_pool`] for a file another component writes too (the task store):
    /// reads use `pool`; writes use `writer` and take `write_gate` first — pass the other
    /// component's, so both write in one orderly queue.
    pub async fn with_shared_writer(
        pool: SqlitePool,
        writer: SqlitePool,
        write_gate: Arc<Mutex<()>>,
        config: EmbeddedConfig,
    ) -> Result<Self, OpenError> {
        schema::migrate(&pool).await?;
        tracing::debug!(
            schema_version = schema::latest_version(),
            "embedded host ready"
        );
        Ok(EmbeddedHost {
            pool,
            writer,
            write_gate,
            config,
            clock: Arc::new(SystemClock),
            channels: Channels::default(),
        })
    }

    /// Replaces the clock that stamps the bot's messages, opened streams and context notes.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The host schema version of the open database.
    pub async fn schema_version(&self) -> Result<i64, OpenError> {
        schema::recorded_version(&self.pool).await
    }

    /// Waits for running statements and closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Registers (or replaces) the outbound sender of `platform`.
    pub fn register_channel(&self, platform: &str, sender: Arc<dyn ChannelSender>) {
        self.channels.register(platform, sender);
    }

    /// Removes the sender of `platform`; true when there was one.
    pub fn unregister_channel(&self, platform: &str) -> bool {
        self.channels.unregister(platform)
    }

    /// Stores a message a channel received: creates or refreshes its stream and its sender's
    /// person, then appends the message.
    pub async fn ingest_message(
        &self,
        message: &IncomingMessage,
    ) -> Result<IngestedMessage, HostError> {
        let (_turn, mut tx) = self.begin_write("ingest a message").await?;
        let stored = ingest(&mut tx, message).await?;
        tx.commit().await.map_err(db("ingest a message"))?;
        Ok(stored)
    }

    /// Creates a person by exact name, or adds aliases, accounts and notes to them.
    pub async fn add_person(&self, person: &NewPerson) -> Result<Person, HostError> {
        let (_turn, mut tx) = self.begin_write("add a person").await?;
        let stored = people::add_person(&mut tx, person).await?;
        tx.commit().await.map_err(db("add a person"))?;
        Ok(stored)
    }

    /// Records `person` as a member of the group `stream` (a channel that knows a group's member
    /// list); people who write in a group are members without it. Refused for an unknown stream,
    /// a private chat or a group on another platform.
    pub async fn add_member(&self, person: &PersonId, stream: &StreamId) -> Result<(), HostError> {
        let (_turn, mut tx) = self.begin_write("add a group member").await?;
        members::add_member(&mut tx, person, stream).await?;
        tx.commit().await.map_err(db("add a group member"))
    }

    /// Adds `alias` to the person found by `person` (exact name or alias).
    pub async fn add_alias(&self, person: &str, alias: &str) -> Result<(), HostError> {
        let (_turn, mut tx) = self.begin_write("add an alias").await?;
        people::add_alias(&mut tx, person, alias).await?;
        tx.commit().await.map_err(db("add an alias"))
    }

    /// Adds or replaces a jargon term of a stream, or of every stream when `stream` is `None`.
    pub async fn add_jargon(
        &self,
        stream: Option<&StreamId>,
        term: &str,
        meaning: &str,
    ) -> Result<(), HostError> {
        let (_turn, mut tx) = self.begin_write("add a jargon term").await?;
        notes::add_jargon(&mut tx, stream, term, meaning).await?;
        tx.commit().await.map_err(db("add a jargon term"))
    }

    /// Stores a knowledge note (found by `search_memory`); `stream: None` = every stream.
    /// Returns its id.
    pub async fn add_note(&self, stream: Option<&StreamId>, text: &str) -> Result<i64, HostError> {
        let at = to_millis(self.clock.now());
        let (_turn, mut tx) = self.begin_write("add a note").await?;
        let id = notes::add_note(&mut tx, stream, text, at).await?;
        tx.commit().await.map_err(db("add a note"))?;
        Ok(id)
    }

    /// Sets the bot's talk frequency in a stream (a finite number ≥ 0).
    pub async fn set_frequency(&self, stream: &StreamId, value: f64) -> Result<(), HostError> {
        let (_turn, mut tx) = self.begin_write("set the talk frequency").await?;
        notes::set_frequency(&mut tx, stream, value).await?;
        tx.commit().await.map_err(db("set the talk frequency"))
    }

    /// The latest `limit` invisible context notes of a stream, oldest first.
    pub async fn context_notes(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ContextNote>, HostError> {
        let mut conn = self.read("read context notes").await?;
        notes::context_notes(&mut conn, stream, limit).await
    }

    async fn read(&self, action: &'static str) -> Result<PoolConnection<Sqlite>, HostError> {
        self.pool.acquire().await.map_err(db(action))
    }

    async fn begin_write(&self, action: &'static str) -> Result<WriteTurn<'_>, HostError> {
        let turn = self.write_gate.lock().await;
        let tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db(action))?;
        Ok((turn, tx))
    }

    /// Finds or creates the stream of `target`, named after the person when they are known.
    /// Opening is not activity: a new stream starts with none, an existing one keeps its own.
    async fn ensure_target(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        const ACTION: &str = "open a stream";
        const NO_ACTIVITY: i64 = 0;
        let (_turn, mut tx) = self.begin_write(ACTION).await?;
        let known_name: Option<String> = match target {
            ChatTarget::Private { user_id } => sqlx::query_scalar(
                "SELECT display_name FROM host_accounts WHERE platform = ? AND user_id = ?",
            )
            .bind(platform)
            .bind(user_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db(ACTION))?,
            ChatTarget::Group { .. } => None,
        };
        let names = StreamNames {
            group: None,
            private: known_name.as_deref(),
        };
        let stream = ensure_stream(&mut tx, None, platform, target, names, NO_ACTIVITY).await?;
        tx.commit().await.map_err(db(ACTION))?;
        Ok(stream)
    }
}

#[async_trait]
impl Host for EmbeddedHost {
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError> {
        let action = || format!("send to stream {stream}");
        let info = {
            let mut conn = self.read("read a stream").await?;
            streams::stream_info(&mut conn, stream).await?
        };
        let Some(info) = info else {
            return Err(HostError::new(
                action(),
                "no such stream; find it with search_users or open it by group or user id",
            ));
        };
        let Some(channel) = self.channels.get(&info.platform) else {
            return Ok(no_channel(&info.platform));
        };
        let delivery = channel.send(&info, text).await?;
        if delivery == Delivery::Sent {
            // Only what people saw enters the history.
            let at = to_millis(self.clock.now());
            let (_turn, mut tx) = self.begin_write("store the bot's message").await?;
            let bot_name = &self.config.persona.bot_name;
            insert_message(&mut tx, stream, BOT_USER_ID, bot_name, text, at, true).await?;
            streams::touch(&mut tx, stream, at).await?;
            tx.commit().await.map_err(db("store the bot's message"))?;
        }
        Ok(delivery)
    }

    async fn append_context(&self, stream: &StreamId, note: &str) -> Result<(), HostError> {
        let at = to_millis(self.clock.now());
        let (_turn, mut tx) = self.begin_write("append a context note").await?;
        notes::append_context(&mut tx, stream, note, at).await?;
        tx.commit().await.map_err(db("append a context note"))
    }

    async fn recent_messages(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ChatLine>, HostError> {
        const ACTION: &str = "read recent messages";
        let mut conn = self.read(ACTION).await?;
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT sender_name, text, at FROM ( \
                 SELECT message_id, sender_name, text, at FROM host_messages \
                 WHERE stream_id = ? ORDER BY at DESC, message_id DESC LIMIT ? \
             ) ORDER BY at, message_id",
        )
        .bind(stream.as_str())
        .bind(sql_limit(limit))
        .fetch_all(&mut *conn)
        .await
        .map_err(db(ACTION))?;
        rows.into_iter()
            .map(|(sender, text, at)| {
                let at = from_millis(at).ok_or_else(|| corrupt(ACTION, format!("time {at}")))?;
                Ok(ChatLine { sender, text, at })
            })
            .collect()
    }

    async fn jargon(&self, stream: &StreamId, text: &str) -> Result<Vec<Jargon>, HostError> {
        let mut conn = self.read("look up jargon").await?;
        notes::jargon_in(&mut conn, stream, text).await
    }

    async fn persona(&self) -> Persona {
        self.config.persona.clone()
    }

    async fn stream_info(&self, stream: &StreamId) -> Result<Option<StreamInfo>, HostError> {
        let mut conn = self.read("read a stream").await?;
        streams::stream_info(&mut conn, stream).await
    }

    async fn is_member(&self, person: &PersonId, stream: &StreamId) -> Result<bool, HostError> {
        let mut conn = self.read("check a membership").await?;
        members::is_member(&mut conn, person, stream).await
    }

    async fn display_name(&self, person: &PersonId) -> Result<Option<String>, HostError> {
        let mut conn = self.read("look up a display name").await?;
        members::display_name(&mut conn, person).await
    }

    async fn open_stream(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        self.ensure_target(platform, target).await
    }

    async fn list_streams(&self, limit: usize) -> Result<Vec<StreamInfo>, HostError> {
        let mut conn = self.read("list streams").await?;
        streams::list_streams(&mut conn, limit).await
    }

    async fn find_person(&self, name: &str) -> Result<Option<Person>, HostError> {
        let mut conn = self.read("look up a person").await?;
        people::find_person(&mut conn, name.trim()).await
    }

    async fn search_users(&self, query: &UserQuery) -> Result<Vec<UserHit>, HostError> {
        let limit = match query.limit {
            0 => DEFAULT_USER_LIMIT,
            limit => limit.min(MAX_USER_LIMIT),
        };
        let found = {
            let mut conn = self.read("search users").await?;
            find_targets(&mut conn, query, limit).await?
        };
        let mut hits = Vec::with_capacity(found.len());
        for target in found {
            let stream = match target.found {
                Found::Stream(stream) => stream,
                // A person seen only in groups: open their private chat so the hit is a real
                // stream `send_message` can use.
                Found::Account {
                    platform, user_id, ..
                } => {
                    let id = self
                        .ensure_target(&platform, &ChatTarget::Private { user_id })
                        .await?;
                    let mut conn = self.read("search users").await?;
                    streams::stream_info(&mut conn, &id).await?.ok_or_else(|| {
                        HostError::new("search users", "an opened stream vanished")
                    })?
                }
            };
            hits.push(UserHit {
                stream,
                matched: target.matched,
            });
        }
        Ok(hits)
    }

    async fn search_memory(&self, query: &MemoryQuery) -> Result<serde_json::Value, HostError> {
        let mut conn = self.read("search memory").await?;
        let settings = MemorySettings {
            episode_window_minutes: self.config.episode_window_minutes,
        };
        search_memory(&mut conn, query, settings).await
    }

    async fn talk_frequency(&self, stream: &StreamId) -> Result<Option<f64>, HostError> {
        let mut conn = self.read("read the talk frequency").await?;
        notes::frequency(&mut conn, stream).await
    }
}
