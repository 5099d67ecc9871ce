//! The wake-ups of a shared PostgreSQL database: a connection of its own LISTENs on the task
//! channel, and each notification becomes a [`Notice`]. A lost connection is re-established by
//! sqlx; what was announced meanwhile is lost, so a [`Notice::Resync`] follows (the engine then
//! reads every active task again). Must not: act on a notice (the engine does).

use std::time::Duration;

use futures::StreamExt;
use mai_core::lease::Notice;
use mai_core::store::{Notices, StoreError};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::error::pg;

/// How long to wait before listening again after the database refused the listening
/// connection (it is down, or restarting).
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// Listens on `channel` through a connection of `pool`'s database; the stream ends when the
/// pool is closed.
pub(crate) async fn listen(pool: &PgPool, channel: &'static str) -> Result<Notices, StoreError> {
    const DOING: &str = "listening for other instances' task changes";
    let mut listener = PgListener::connect_with(pool).await.map_err(pg(DOING))?;
    listener.listen(channel).await.map_err(pg(DOING))?;
    let pool = pool.clone();
    let stream = futures::stream::unfold(listener, move |mut listener| {
        let pool = pool.clone();
        async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(notification)) => match Notice::parse(notification.payload()) {
                        Some(notice) => return Some((notice, listener)),
                        None => tracing::warn!(
                            payload = notification.payload(),
                            "ignored a task notice this build does not understand"
                        ),
                    },
                    // The connection was lost; the next call re-establishes it.
                    Ok(None) => return Some((Notice::Resync, listener)),
                    Err(_) if pool.is_closed() => return None,
                    Err(error) => {
                        tracing::warn!(%error, "lost the connection that listens for other instances' task changes; listening again");
                        tokio::time::sleep(RELISTEN_AFTER).await;
                    }
                }
            }
        }
    });
    Ok(stream.boxed())
}
