//! [`EmbeddedHost`]: opening the host database, the public ingestion and curation API the
//! channels and the binary use, and the [`Host`] implementation the engine sees. Each
//! operation delegates to the module that owns its tables, running it as one closure on a
//! reader or on the database's writer (see `mai_store::Database`) — or, when the tables are in
//! PostgreSQL, in one transaction on a pooled connection (`pg`); this module owns the database
//! handle, the channels and the clock.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mai_core::clock::{Clock, SystemClock};
use mai_core::host::{
    ChatLine, ChatTarget, Delivery, Host, HostError, Jargon, MemoryQuery, Person, Persona,
    StreamInfo, UserHit, UserQuery,
};
use mai_core::ids::{PersonId, StreamId};
use mai_store::{Backend, Database, SqliteOptions};
use serde::{Deserialize, Serialize};

use crate::channels::{ChannelSender, Channels, no_channel};
use crate::error::{OpenError, corrupt, db, unavailable};
use crate::ingest::{IncomingMessage, IngestedMessage, ingest, insert_message};
use crate::members;
use crate::memory::{MemorySettings, search_memory};
use crate::notes::{self, ContextNote};
use crate::people::{self, NewPerson};
use crate::schema::{HOST, HOST_POSTGRES, from_millis, to_millis};
use crate::sql::{Connection, Query};
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
    /// The file the host's tables live in, often shared with the task store: reads run on its
    /// reader connections; every write is one closure handed to its writer (one transaction,
    /// queued in order with the task store's writes).
    db: Backend,
    config: EmbeddedConfig,
    clock: Arc<dyn Clock>,
    channels: Channels,
}

impl EmbeddedHost {
    /// Opens (creating it and its directory if missing) the database file at `path` — the task
    /// database `<data_dir>/mai-agent.db` or a file of its own — and creates or migrates the
    /// host tables.
    pub async fn open(path: impl AsRef<Path>, config: EmbeddedConfig) -> Result<Self, OpenError> {
        let db = Database::open(path, &SqliteOptions::default())
            .await
            .map_err(OpenError::Open)?;
        Self::with_database(db, config).await
    }

    /// The host in an open database (the one the task store uses, so both write through one
    /// writer): creates or migrates the host tables in it.
    pub async fn with_database(db: Database, config: EmbeddedConfig) -> Result<Self, OpenError> {
        Self::on(Backend::Sqlite(db), config).await
    }

    /// The host in the database the task store uses, SQLite or PostgreSQL: creates or migrates
    /// the host tables in it.
    pub async fn on(db: Backend, config: EmbeddedConfig) -> Result<Self, OpenError> {
        match &db {
            Backend::Sqlite(db) => db.migrate(&HOST).await,
            Backend::Postgres(pool) => mai_store::migrate_postgres(pool, &HOST_POSTGRES).await,
        }
        .map_err(OpenError::Migrate)?;
        tracing::debug!(
            schema_version = HOST.latest_version(),
            "embedded host ready"
        );
        Ok(EmbeddedHost {
            db,
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
        match &self.db {
            Backend::Sqlite(db) => db.schema_version(&HOST).await,
            Backend::Postgres(pool) => {
                mai_store::postgres_schema_version(pool, &HOST_POSTGRES).await
            }
        }
        .map_err(OpenError::Migrate)
    }

    /// Finishes the queued writes and closes the write connection (the pool, on PostgreSQL).
    pub async fn close(&self) {
        match &self.db {
            Backend::Sqlite(db) => db.close().await,
            Backend::Postgres(pool) => pool.close().await,
        }
    }

    /// How many rows each host table holds (`storage migrate` checks a target is empty and a
    /// copy is whole with it).
    pub async fn row_counts(&self) -> Result<Vec<(&'static str, u64)>, HostError> {
        self.read("count the host tables", crate::copy::counts)
            .await
    }

    /// Copies every host row of `self` (read in one transaction) into `target`, which must hold
    /// none, keeping ids; then checks that both sides hold the same counts.
    pub async fn copy_into(
        &self,
        target: &EmbeddedHost,
    ) -> Result<Vec<(&'static str, u64)>, HostError> {
        const ACTION: &str = "copy the host tables";
        if target.row_counts().await?.iter().any(|(_, n)| *n > 0) {
            return Err(HostError::new(
                ACTION,
                "the target already holds chat data: give an empty database",
            ));
        }
        let tables = self.read(ACTION, crate::copy::read_all).await?;
        target
            .write(ACTION, move |conn| crate::copy::write_all(conn, tables))
            .await?;
        let (source, copied) = (self.row_counts().await?, target.row_counts().await?);
        if source != copied {
            return Err(HostError::new(
                ACTION,
                format!("the counts differ after the copy: {source:?} read, {copied:?} written"),
            ));
        }
        Ok(copied)
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
    /// person, then appends the message — one transaction, one hand-off to the writer.
    pub async fn ingest_message(
        &self,
        message: &IncomingMessage,
    ) -> Result<IngestedMessage, HostError> {
        let message = message.clone();
        self.write("ingest a message", move |conn| ingest(conn, &message))
            .await
    }

    /// Creates a person by exact name, or adds aliases, accounts and notes to them.
    pub async fn add_person(&self, person: &NewPerson) -> Result<Person, HostError> {
        let person = person.clone();
        self.write("add a person", move |conn| {
            people::add_person(conn, &person)
        })
        .await
    }

    /// Records `person` as a member of the group `stream` (a channel that knows a group's member
    /// list); people who write in a group are members without it. Refused for an unknown stream,
    /// a private chat or a group on another platform.
    pub async fn add_member(&self, person: &PersonId, stream: &StreamId) -> Result<(), HostError> {
        let (person, stream) = (person.clone(), stream.clone());
        self.write("add a group member", move |conn| {
            members::add_member(conn, &person, &stream)
        })
        .await
    }

    /// Adds `alias` to the person found by `person` (exact name or alias).
    pub async fn add_alias(&self, person: &str, alias: &str) -> Result<(), HostError> {
        let (person, alias) = (person.to_owned(), alias.to_owned());
        self.write("add an alias", move |conn| {
            people::add_alias(conn, &person, &alias)
        })
        .await
    }

    /// Adds or replaces a jargon term of a stream, or of every stream when `stream` is `None`.
    pub async fn add_jargon(
        &self,
        stream: Option<&StreamId>,
        term: &str,
        meaning: &str,
    ) -> Result<(), HostError> {
        let (stream, term, meaning) = (stream.cloned(), term.to_owned(), meaning.to_owned());
        self.write("add a jargon term", move |conn| {
            notes::add_jargon(conn, stream.as_ref(), &term, &meaning)
        })
        .await
    }

    /// Stores a knowledge note (found by `search_memory`); `stream: None` = every stream.
    /// Returns its id.
    pub async fn add_note(&self, stream: Option<&StreamId>, text: &str) -> Result<i64, HostError> {
        let at = to_millis(self.clock.now());
        let (stream, text) = (stream.cloned(), text.to_owned());
        self.write("add a note", move |conn| {
            notes::add_note(conn, stream.as_ref(), &text, at)
        })
        .await
    }

    /// Sets the bot's talk frequency in a stream (a finite number ≥ 0).
    pub async fn set_frequency(&self, stream: &StreamId, value: f64) -> Result<(), HostError> {
        let stream = stream.clone();
        self.write("set the talk frequency", move |conn| {
            notes::set_frequency(conn, &stream, value)
        })
        .await
    }

    /// The latest `limit` invisible context notes of a stream, oldest first.
    pub async fn context_notes(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ContextNote>, HostError> {
        let stream = stream.clone();
        self.read("read context notes", move |conn| {
            notes::context_notes(conn, &stream, limit)
        })
        .await
    }

    /// Deletes the stored chat messages older than `before` (`[storage] keep_messages_days`),
    /// in small writes so live messages queued meanwhile wait little; returns how many.
    pub async fn prune_messages(&self, before: DateTime<Utc>) -> Result<u64, HostError> {
        let before = to_millis(before);
        let mut deleted = 0;
        loop {
            let batch = self
                .write("delete old messages", move |conn| {
                    crate::ingest::prune_messages(conn, before)
                })
                .await?;
            deleted += batch as u64;
            if batch < crate::ingest::PRUNE_BATCH {
                return Ok(deleted);
            }
        }
    }

    /// Runs `job` on a reader connection.
    async fn read<T, F>(&self, action: &'static str, job: F) -> Result<T, HostError>
    where
        F: FnOnce(&Connection) -> Result<T, HostError> + Send + 'static,
        T: Send + 'static,
    {
        match &self.db {
            Backend::Sqlite(db) => db
                .read(move |conn| job(conn))
                .await
                .map_err(unavailable(action))?,
            Backend::Postgres(pool) => crate::pg::run(pool, false, move |conn| job(conn))
                .await
                .map_err(unavailable(action))?,
        }
    }

    /// Runs `job` as one write transaction (undone when it returns an error).
    async fn write<T, F>(&self, action: &'static str, job: F) -> Result<T, HostError>
    where
        F: FnOnce(&Connection) -> Result<T, HostError> + Send + 'static,
        T: Send + 'static,
    {
        match &self.db {
            Backend::Sqlite(db) => db
                .write(move |conn| job(conn))
                .await
                .map_err(unavailable(action))?,
            Backend::Postgres(pool) => crate::pg::run(pool, true, move |conn| job(conn))
                .await
                .map_err(unavailable(action))?,
        }
    }

    /// Finds or creates the stream of `target`, named after the person when they are known.
    /// Opening is not activity: a new stream starts with none, an existing one keeps its own.
    async fn ensure_target(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        let (platform, target) = (platform.to_owned(), target.clone());
        self.write("open a stream", move |conn| {
            open_target(conn, &platform, &target)
        })
        .await
    }
}

/// [`EmbeddedHost::ensure_target`] inside the write transaction.
fn open_target(
    conn: &Connection,
    platform: &str,
    target: &ChatTarget,
) -> Result<StreamId, HostError> {
    const NO_ACTIVITY: i64 = 0;
    let known_name: Option<String> = match target {
        ChatTarget::Private { user_id } => {
            Query::new("SELECT display_name FROM host_accounts WHERE platform = ? AND user_id = ?")
                .bind(platform)
                .bind(user_id)
                .scalar_optional(conn)
                .map_err(db("open a stream"))?
        }
        ChatTarget::Group { .. } => None,
    };
    let names = StreamNames {
        group: None,
        private: known_name.as_deref(),
    };
    ensure_stream(conn, None, platform, target, names, NO_ACTIVITY)
}

/// The bot's delivered message, stored in its stream's history.
fn store_bot_message(
    conn: &Connection,
    stream: &StreamId,
    bot_name: &str,
    text: &str,
    at: i64,
) -> Result<(), HostError> {
    insert_message(conn, stream, BOT_USER_ID, bot_name, text, at, true)?;
    streams::touch(conn, stream, at)
}

impl EmbeddedHost {
    /// Sends through the channel of the stream's platform — mentioning `to` first when it is a
    /// person of that platform in a group stream — and stores what was delivered.
    async fn send_via_channel(
        &self,
        stream: &StreamId,
        to: Option<&PersonId>,
        text: &str,
    ) -> Result<Delivery, HostError> {
        let action = || format!("send to stream {stream}");
        let Some(info) = self.stream_info(stream).await? else {
            return Err(HostError::new(
                action(),
                "no such stream; find it with search_users or open it by group or user id",
            ));
        };
        let Some(channel) = self.channels.get(&info.platform) else {
            return Ok(no_channel(&info.platform));
        };
        let mention = to.filter(|person| {
            matches!(info.target, ChatTarget::Group { .. }) && person.platform == info.platform
        });
        let delivery = match mention {
            Some(person) => {
                channel
                    .send_mentioning(&info, &person.user_id, text)
                    .await?
            }
            None => channel.send(&info, text).await?,
        };
        if delivery == Delivery::Sent {
            // Only what people saw enters the history.
            let at = to_millis(self.clock.now());
            let (stream, text) = (stream.clone(), text.to_owned());
            let bot_name = self.config.persona.bot_name.clone();
            self.write("store the bot's message", move |conn| {
                store_bot_message(conn, &stream, &bot_name, &text, at)
            })
            .await?;
        }
        Ok(delivery)
    }
}

#[async_trait]
impl Host for EmbeddedHost {
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError> {
        self.send_via_channel(stream, None, text).await
    }

    async fn send_part_to(
        &self,
        stream: &StreamId,
        to: &PersonId,
        text: &str,
        _part_id: &str,
    ) -> Result<Delivery, HostError> {
        self.send_via_channel(stream, Some(to), text).await
    }

    async fn append_context(&self, stream: &StreamId, note: &str) -> Result<(), HostError> {
        let at = to_millis(self.clock.now());
        let (stream, note) = (stream.clone(), note.to_owned());
        self.write("append a context note", move |conn| {
            notes::append_context(conn, &stream, &note, at)
        })
        .await
    }

    async fn recent_messages(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ChatLine>, HostError> {
        const ACTION: &str = "read recent messages";
        let stream = stream.clone();
        let rows: Vec<(String, String, i64)> = self
            .read(ACTION, move |conn| {
                Query::new(
                    "SELECT sender_name, text, at FROM ( \
                     SELECT message_id, sender_name, text, at FROM host_messages \
                     WHERE stream_id = ? ORDER BY at DESC, message_id DESC LIMIT ? \
                     ) recent ORDER BY at, message_id",
                )
                .bind(stream.as_str())
                .bind(sql_limit(limit))
                .all(conn)
                .map_err(db(ACTION))
            })
            .await?;
        rows.into_iter()
            .map(|(sender, text, at)| {
                let at = from_millis(at).ok_or_else(|| corrupt(ACTION, format!("time {at}")))?;
                Ok(ChatLine { sender, text, at })
            })
            .collect()
    }

    async fn jargon(&self, stream: &StreamId, text: &str) -> Result<Vec<Jargon>, HostError> {
        let (stream, text) = (stream.clone(), text.to_owned());
        self.read("look up jargon", move |conn| {
            notes::jargon_in(conn, &stream, &text)
        })
        .await
    }

    async fn persona(&self) -> Persona {
        self.config.persona.clone()
    }

    async fn stream_info(&self, stream: &StreamId) -> Result<Option<StreamInfo>, HostError> {
        let stream = stream.clone();
        self.read("read a stream", move |conn| {
            streams::stream_info(conn, &stream)
        })
        .await
    }

    async fn is_member(&self, person: &PersonId, stream: &StreamId) -> Result<bool, HostError> {
        let (person, stream) = (person.clone(), stream.clone());
        self.read("check a membership", move |conn| {
            members::is_member(conn, &person, &stream)
        })
        .await
    }

    async fn display_name(&self, person: &PersonId) -> Result<Option<String>, HostError> {
        let person = person.clone();
        self.read("look up a display name", move |conn| {
            members::display_name(conn, &person)
        })
        .await
    }

    async fn open_stream(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        self.ensure_target(platform, target).await
    }

    async fn list_streams(&self, limit: usize) -> Result<Vec<StreamInfo>, HostError> {
        self.read("list streams", move |conn| {
            streams::list_streams(conn, limit)
        })
        .await
    }

    async fn find_person(&self, name: &str) -> Result<Option<Person>, HostError> {
        let name = name.trim().to_owned();
        self.read("look up a person", move |conn| {
            people::find_person(conn, &name)
        })
        .await
    }

    async fn search_users(&self, query: &UserQuery) -> Result<Vec<UserHit>, HostError> {
        let limit = match query.limit {
            0 => DEFAULT_USER_LIMIT,
            limit => limit.min(MAX_USER_LIMIT),
        };
        let owned = query.clone();
        let found = self
            .read("search users", move |conn| {
                find_targets(conn, &owned, limit)
            })
            .await?;
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
                    self.stream_info(&id).await?.ok_or_else(|| {
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
        let settings = MemorySettings {
            episode_window_minutes: self.config.episode_window_minutes,
        };
        let query = query.clone();
        self.read("search memory", move |conn| {
            search_memory(conn, &query, settings)
        })
        .await
    }

    async fn talk_frequency(&self, stream: &StreamId) -> Result<Option<f64>, HostError> {
        let stream = stream.clone();
        self.read("read the talk frequency", move |conn| {
            notes::frequency(conn, &stream)
        })
        .await
    }
}
