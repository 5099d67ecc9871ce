//! `GET /v1/events`: the engine's task events (created, status changes, rounds, tool calls and
//! results, questions, answers, messages sent) as a live Server-Sent Events stream, so a
//! program — a dashboard, a host, a test — waits on what happens instead of polling.
//!
//! Each SSE event is named after its kind (`status`, `answer`, …) and carries the event as JSON
//! (the same object, its `event` field included). Events are not stored: a client sees what
//! happens after it connected; one that reads too slowly gets a `lagged` event with the number
//! it missed (read the tasks again to resync). The stream ends when `serve` stops.

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use mai_engine::Caller;
use mai_engine::TaskEvent;

use super::Api;
use super::error::{ApiError, QueryParams};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Only this task's events (an id, a unique id prefix or a unique title).
    task_id: Option<String>,
}

pub(crate) async fn stream(
    State(api): State<Api>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // Subscribed first: whatever happens once this request is answered is in the stream.
    let receiver = api.state.engine.subscribe();
    let only = match query.task_id {
        Some(reference) => {
            let reader = Caller::admin_reader("http-api").map_err(ApiError::internal)?;
            Some(api.state.engine.resolve(&reader, &reference).await?.id)
        }
        None => None,
    };
    let events = futures::stream::unfold(
        (receiver, api.shutdown),
        move |(mut receiver, shutdown)| async move {
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => return None,
                    next = receiver.recv() => next,
                };
                let event = match next {
                    Ok(event) if only.is_none_or(|id| event.task_id() == id) => sse_event(&event),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(missed)) => Event::default()
                        .event("lagged")
                        .data(json!({"event": "lagged", "missed": missed}).to_string()),
                    Err(RecvError::Closed) => return None,
                };
                return Some((Ok(event), (receiver, shutdown)));
            }
        },
    );
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// `event: <kind>` and the event as JSON.
fn sse_event(event: &TaskEvent) -> Event {
    let value = serde_json::to_value(event).unwrap_or_else(
        |error| json!({"event": "error", "detail": format!("cannot encode an event: {error}")}),
    );
    let kind = value["event"].as_str().unwrap_or("event").to_owned();
    Event::default().event(kind).data(value.to_string())
}
