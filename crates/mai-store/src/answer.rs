//! Awaiting the answer of a database thread (the writer, a reader) that was idle when the job
//! was handed to it: such a job is done within tens of microseconds, and on a virtual machine
//! waking a parked runtime thread costs about as much again. So the caller polls for the
//! answer for up to [`POLL`], yielding to its runtime between polls (other tasks on its thread
//! still run, and nothing blocks), before it sleeps on it like any other. A job handed to a
//! busy thread sleeps at once: polling would only burn the time the busy thread needs.
//!
//! This module must not know what the job is.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How long a caller polls: about twice what a lone checkpoint takes on a 2-core VM.
pub(crate) const POLL: Duration = Duration::from_micros(150);

/// Polls `answer` until it arrives or [`POLL`] has passed: `Some(Some(value))`, `Some(None)`
/// when the sender is gone, `None` when nothing came in time (then await `answer`).
pub(crate) async fn poll_briefly<T>(answer: &mut oneshot::Receiver<T>) -> Option<Option<T>> {
    let start = Instant::now();
    loop {
        match answer.try_recv() {
            Ok(value) => return Some(Some(value)),
            Err(oneshot::error::TryRecvError::Closed) => return Some(None),
            Err(oneshot::error::TryRecvError::Empty) if start.elapsed() < POLL => {
                tokio::task::yield_now().await;
            }
            Err(oneshot::error::TryRecvError::Empty) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_already_there_is_taken_at_once() {
        let (sender, mut answer) = oneshot::channel();
        sender.send(7).unwrap();
        assert_eq!(poll_briefly(&mut answer).await, Some(Some(7)));
    }

    #[tokio::test]
    async fn a_sender_that_went_away_ends_the_polling_with_nothing() {
        let (sender, mut answer) = oneshot::channel::<u8>();
        drop(sender);
        assert_eq!(poll_briefly(&mut answer).await, Some(None));
    }

    #[tokio::test]
    async fn no_answer_in_time_leaves_the_receiver_to_be_awaited() {
        let (sender, mut answer) = oneshot::channel();
        let started = Instant::now();
        assert_eq!(poll_briefly(&mut answer).await, None);
        assert!(started.elapsed() >= POLL);
        sender.send("late").unwrap();
        assert_eq!(answer.await, Ok("late"));
    }
}
