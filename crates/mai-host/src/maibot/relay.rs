//! The relay: MaiBot bridge requests routed between `serve` instances that share one PostgreSQL
//! database, the database being the rendezvous (docs/scale-out.md, "Replies through the MaiBot
//! bridge").
//!
//! An instance holding a bridge says so in `host_bridge_holders` (a lease renewed every
//! heartbeat while its bridge is connected, the row removed when it goes) and takes the requests
//! other instances queue in `host_bridge_calls` (`FOR UPDATE SKIP LOCKED`: each is taken once),
//! runs each on its own bridge and writes the answer. An instance without a bridge queues its
//! request only while a live holder exists, and waits for the answer's notice within the
//! request timeout; it then reads the answer and deletes the call. Wake-ups go by NOTIFY on the
//! channel `mai_bridge`: `call` (a request was queued), `holder` (a bridge came or went),
//! `answer:<id>`; a listening connection that was lost and comes back reads what it may have
//! missed. Must not: decide what a failed or unanswered request means for a send (the MaiBot
//! host holds and resends parts), or speak to a socket (requests go through the [`Slot`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mai_store::sqlx::postgres::PgListener;
use mai_store::sqlx::{self, PgPool};
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::link::{BridgeError, Slot, answer_of};

/// The NOTIFY channel of the relay.
const CHANNEL: &str = "mai_bridge";

/// How long to wait before listening again after the database refused the listening connection.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// Calls whose caller stopped waiting this long ago (it died before deleting them) are deleted
/// when a bridge attaches.
const STALE_AFTER_SECS: f64 = 60.0;

/// Who this instance is to the others, and the terms of its holder lease: `[server]
/// instance_id` and `[storage] lease_secs` / `heartbeat_secs`, as for the tasks' leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    pub instance: String,
    /// A holder that has not renewed its row for this long no longer counts (it died).
    pub lease: Duration,
    /// How often a holder renews its row.
    pub heartbeat: Duration,
}

pub(super) struct Relay {
    pool: PgPool,
    config: RelayConfig,
    /// This instance's forwarded calls waiting for their answer's notice, by call id.
    waiters: Mutex<HashMap<String, oneshot::Sender<()>>>,
    /// Bumped on every `holder` notice (and after a lost listening connection).
    holders: watch::Sender<u64>,
    /// When this instance last knew of a bridge elsewhere: a part held here waits for one until
    /// this plus the offline timeout (what "the bridge has been away" means in a cluster).
    seen_holder: Mutex<Option<Instant>>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain inserts and removals, never held across an await: a poisoned lock is consistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Relay {
    /// Listens on the relay's channel and starts following `slot`'s bridge: while one is
    /// connected this instance is a holder and answers the others' calls. The tasks it starts
    /// end when `pool` is closed.
    pub(super) async fn start(
        pool: PgPool,
        config: RelayConfig,
        slot: Arc<Slot>,
    ) -> Result<Arc<Relay>, sqlx::Error> {
        // A row of this instance's previous life (it was killed holding a bridge) is not true now.
        sqlx::query("DELETE FROM host_bridge_holders WHERE instance = $1")
            .bind(&config.instance)
            .execute(&pool)
            .await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(CHANNEL).await?;
        let relay = Arc::new(Relay {
            pool,
            config,
            waiters: Mutex::default(),
            holders: watch::Sender::new(0),
            seen_holder: Mutex::default(),
        });
        tokio::spawn(listen(relay.clone(), slot.clone(), listener));
        tokio::spawn(hold(relay.clone(), slot));
        Ok(relay)
    }

    /// Changes whenever a bridge came or went on another instance.
    pub(super) fn holders(&self) -> watch::Receiver<u64> {
        self.holders.subscribe()
    }

    /// Whether the database pool was closed (the instance is stopping).
    pub(super) fn closed(&self) -> bool {
        self.pool.is_closed()
    }

    /// When this instance last knew of a bridge held elsewhere.
    pub(super) fn seen_holder(&self) -> Option<Instant> {
        *locked(&self.seen_holder)
    }

    fn saw_holder(&self) {
        *locked(&self.seen_holder) = Some(Instant::now());
    }

    /// Whether another instance holds a bridge now (its lease is live). A database that cannot
    /// say is taken as "no" (logged): the caller holds its part until a notice or its deadline.
    pub(super) async fn holder_elsewhere(&self) -> bool {
        self.holder().await.is_some()
    }

    /// The other instance holding a bridge now (the one renewed last), if any; `None` too when
    /// the database cannot say (logged).
    pub(super) async fn holder(&self) -> Option<String> {
        let holder: Result<Option<String>, _> = sqlx::query_scalar(
            "SELECT instance FROM host_bridge_holders \
             WHERE instance <> $1 AND lease_until > now() ORDER BY lease_until DESC LIMIT 1",
        )
        .bind(&self.config.instance)
        .fetch_optional(&self.pool)
        .await;
        match holder {
            Ok(holder) => {
                if holder.is_some() {
                    self.saw_holder();
                }
                holder
            }
            Err(error) => {
                tracing::warn!(%error, "could not read which instance holds the MaiBot bridge");
                None
            }
        }
    }

    /// Asks the instance holding a bridge to make request `method` and waits up to `timeout`
    /// for its answer. `Offline` when no instance holds one; `Disconnected` when the call was
    /// not answered and nobody alive is working on it (never taken, or its taker died), so it
    /// may be asked again; `Timeout` when a live holder took it and did not answer in time.
    pub(super) async fn forward(
        &self,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Value, BridgeError> {
        let id = format!("{:032x}", rand::random::<u128>());
        let (wake, woken) = oneshot::channel();
        locked(&self.waiters).insert(id.clone(), wake);
        let outcome = self.forward_as(&id, method, params, timeout, woken).await;
        locked(&self.waiters).remove(&id);
        outcome
    }

    async fn forward_as(
        &self,
        id: &str,
        method: &str,
        params: &Value,
        timeout: Duration,
        woken: oneshot::Receiver<()>,
    ) -> Result<Value, BridgeError> {
        if !self.queue(id, method, params, timeout).await.map_err(db)? {
            return Err(BridgeError::Offline);
        }
        self.saw_holder();
        // Woken by the answer's notice, or not: the row says what happened either way.
        let _ = tokio::time::timeout(timeout, woken).await;
        let row: Option<(Option<String>, Option<String>, bool)> = sqlx::query_as(
            "DELETE FROM host_bridge_calls c WHERE id = $1 RETURNING answer, taken_by, \
             EXISTS (SELECT 1 FROM host_bridge_holders h \
                     WHERE h.instance = c.taken_by AND h.lease_until > now())",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        match row {
            Some((Some(answer), _, _)) => decode(&answer, timeout),
            Some((None, Some(holder), true)) => {
                tracing::debug!(method, %holder, "the instance holding the MaiBot bridge did not answer in time");
                Err(BridgeError::Timeout(timeout))
            }
            _ => Err(BridgeError::Disconnected),
        }
    }

    /// Queues call `id` if a live holder exists (and wakes the holders); whether it did.
    async fn queue(
        &self,
        id: &str,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<bool, sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        let queued = sqlx::query(
            "INSERT INTO host_bridge_calls (id, caller, method, params, deadline) \
             SELECT $1, $2, $3, $4, now() + make_interval(secs => $5) \
             WHERE EXISTS (SELECT 1 FROM host_bridge_holders \
                           WHERE instance <> $2 AND lease_until > now())",
        )
        .bind(id)
        .bind(&self.config.instance)
        .bind(method)
        .bind(params.to_string())
        .bind(timeout.as_secs_f64())
        .execute(&mut *transaction)
        .await?
        .rows_affected()
            == 1;
        if queued {
            notify(&mut transaction, "call").await?;
        }
        transaction.commit().await?;
        Ok(queued)
    }

    /// Takes the queued calls one by one while this instance's bridge is connected, each run
    /// on it in a task of its own.
    async fn take_calls(self: Arc<Self>, slot: Arc<Slot>) {
        while slot.connected() {
            let taken: Result<Option<(String, String, String)>, _> = sqlx::query_as(
                "UPDATE host_bridge_calls SET taken_by = $1 WHERE id = \
                 (SELECT id FROM host_bridge_calls WHERE taken_by IS NULL AND deadline > now() \
                  ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) \
                 RETURNING id, method, params",
            )
            .bind(&self.config.instance)
            .fetch_optional(&self.pool)
            .await;
            match taken {
                Ok(Some((id, method, params))) => {
                    let (relay, slot) = (self.clone(), slot.clone());
                    tokio::spawn(async move { relay.answer(slot, id, method, params).await });
                }
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, "could not take the MaiBot requests other instances queued; taken at the next notice");
                    return;
                }
            }
        }
    }

    /// Runs call `id` on this instance's bridge and writes its answer for the caller.
    async fn answer(&self, slot: Arc<Slot>, id: String, method: String, params: String) {
        let params = serde_json::from_str(&params).unwrap_or(Value::Null);
        let answer = encode(slot.request(&method, params).await).to_string();
        let written = async {
            let mut transaction = self.pool.begin().await?;
            sqlx::query("UPDATE host_bridge_calls SET answer = $2 WHERE id = $1")
                .bind(&id)
                .bind(&answer)
                .execute(&mut *transaction)
                .await?;
            notify(&mut transaction, &format!("answer:{id}")).await?;
            transaction.commit().await
        };
        if let Err(error) = written.await {
            tracing::warn!(%error, method, "could not write the answer to another instance's MaiBot request; it times out there");
        }
    }

    /// Records (or renews) this instance as a holder; on becoming one, tells the others.
    async fn renew(&self, becoming: bool) -> Result<(), sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO host_bridge_holders (instance, lease_until) \
             VALUES ($1, now() + make_interval(secs => $2)) \
             ON CONFLICT (instance) DO UPDATE SET lease_until = EXCLUDED.lease_until",
        )
        .bind(&self.config.instance)
        .bind(self.config.lease.as_secs_f64())
        .execute(&mut *transaction)
        .await?;
        if becoming {
            sqlx::query(
                "DELETE FROM host_bridge_calls \
                 WHERE deadline < now() - make_interval(secs => $1)",
            )
            .bind(STALE_AFTER_SECS)
            .execute(&mut *transaction)
            .await?;
            notify(&mut transaction, "holder").await?;
        }
        transaction.commit().await
    }

    /// This instance's bridge went away: it holds none any more.
    async fn release(&self) -> Result<(), sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query("DELETE FROM host_bridge_holders WHERE instance = $1")
            .bind(&self.config.instance)
            .execute(&mut *transaction)
            .await?;
        notify(&mut transaction, "holder").await?;
        transaction.commit().await
    }

    fn on_notice(self: &Arc<Self>, payload: &str, slot: &Arc<Slot>) {
        if payload == "call" {
            if slot.connected() {
                tokio::spawn(self.clone().take_calls(slot.clone()));
            }
        } else if payload == "holder" {
            self.saw_holder();
            self.holders.send_modify(|n| *n += 1);
        } else if let Some(id) = payload.strip_prefix("answer:") {
            if let Some(wake) = locked(&self.waiters).remove(id) {
                let _ = wake.send(());
            }
        } else {
            tracing::warn!(
                payload,
                "ignored a MaiBot relay notice this build does not understand"
            );
        }
    }

    /// The listening connection was lost and is back: what was announced meanwhile is read
    /// from the tables (calls queued, answers written, holders changed).
    async fn resync(self: &Arc<Self>, slot: &Arc<Slot>) {
        self.holders.send_modify(|n| *n += 1);
        if slot.connected() {
            tokio::spawn(self.clone().take_calls(slot.clone()));
        }
        let waiting: Vec<String> = locked(&self.waiters).keys().cloned().collect();
        if waiting.is_empty() {
            return;
        }
        let answered: Result<Vec<String>, _> = sqlx::query_scalar(
            "SELECT id FROM host_bridge_calls WHERE id = ANY($1) AND answer IS NOT NULL",
        )
        .bind(waiting)
        .fetch_all(&self.pool)
        .await;
        for id in answered.unwrap_or_default() {
            if let Some(wake) = locked(&self.waiters).remove(&id) {
                let _ = wake.send(());
            }
        }
    }
}

async fn notify(
    transaction: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    payload: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload)
        .execute(&mut **transaction)
        .await
        .map(drop)
}

/// Follows the relay's notices until the pool is closed.
async fn listen(relay: Arc<Relay>, slot: Arc<Slot>, mut listener: PgListener) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => relay.on_notice(notification.payload(), &slot),
            // The connection was lost; the next call re-establishes it.
            Ok(None) => relay.resync(&slot).await,
            Err(_) if relay.pool.is_closed() => return,
            Err(error) => {
                tracing::warn!(%error, "lost the connection that listens for MaiBot requests of other instances; listening again");
                tokio::time::sleep(RELISTEN_AFTER).await;
            }
        }
    }
}

/// Keeps this instance's holder row true to its bridge: written when one attaches (then the
/// calls queued meanwhile are taken), renewed every heartbeat, removed when it goes.
async fn hold(relay: Arc<Relay>, slot: Arc<Slot>) {
    let mut status = slot.status();
    let mut heartbeat = tokio::time::interval(relay.config.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut holding = false;
    while !relay.pool.is_closed() {
        let connected = status.borrow_and_update().connected.is_some();
        let written = match (connected, holding) {
            (true, _) => relay.renew(!holding).await,
            (false, true) => relay.release().await,
            (false, false) => Ok(()),
        };
        match written {
            Ok(()) => {
                if connected && !holding {
                    tokio::spawn(relay.clone().take_calls(slot.clone()));
                }
                holding = connected;
            }
            Err(_) if relay.pool.is_closed() => return,
            Err(error) => {
                tracing::warn!(%error, "could not record in the database whether this instance holds the MaiBot bridge; trying again at the next heartbeat");
            }
        }
        tokio::select! {
            changed = status.changed() => if changed.is_err() { return },
            _ = heartbeat.tick(), if connected || holding => {}
        }
    }
}

/// A bridge answer as the relay stores it: the protocol's shapes, plus the codes `timeout` and
/// `disconnected` for what the holder's own bridge did.
fn encode(answer: Result<Value, BridgeError>) -> Value {
    let (code, message) = match answer {
        Ok(result) => return json!({"result": result}),
        Err(BridgeError::Unsupported(message)) => ("unsupported", message),
        Err(BridgeError::Invalid(message)) => ("invalid", message),
        Err(BridgeError::Failed(message)) => ("failed", message),
        Err(error @ BridgeError::Timeout(_)) => ("timeout", error.to_string()),
        Err(
            error @ (BridgeError::Offline
            | BridgeError::Disconnected
            | BridgeError::StillOffline { .. }),
        ) => ("disconnected", error.to_string()),
    };
    json!({"error": {"code": code, "message": message}})
}

fn decode(answer: &str, timeout: Duration) -> Result<Value, BridgeError> {
    let value: Value = serde_json::from_str(answer).map_err(|error| {
        BridgeError::Failed(format!(
            "the instance holding the bridge wrote an answer that is not JSON ({error})"
        ))
    })?;
    match value.pointer("/error/code").and_then(Value::as_str) {
        Some("timeout") => Err(BridgeError::Timeout(timeout)),
        Some("disconnected") => Err(BridgeError::Disconnected),
        _ => answer_of(&value),
    }
}

fn db(error: sqlx::Error) -> BridgeError {
    BridgeError::Failed(format!(
        "could not pass the request through the database to the instance holding MaiBot's \
         bridge ({error}); check that PostgreSQL ([storage] url) is reachable"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_answer_keeps_its_meaning_through_the_database() {
        let timeout = Duration::from_secs(3);
        let round = |answer| decode(&encode(answer).to_string(), timeout);
        assert_eq!(round(Ok(json!({"sent": true}))), Ok(json!({"sent": true})));
        for error in [
            BridgeError::Unsupported("no".into()),
            BridgeError::Invalid("bad".into()),
            BridgeError::Failed("down".into()),
            BridgeError::Timeout(timeout),
            BridgeError::Disconnected,
        ] {
            assert_eq!(round(Err(error.clone())), Err(error));
        }
        // The holder's bridge went away before the request: asked again, as a closed bridge.
        assert_eq!(
            round(Err(BridgeError::Offline)),
            Err(BridgeError::Disconnected)
        );
    }
}
