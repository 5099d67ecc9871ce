//! Shared by the integration tests of several crates (included with `#[path]`): a reader of a
//! Server-Sent Events response (`GET /v1/events`), so a test waits on what the server says
//! happened instead of polling it.
#![allow(dead_code)] // not every test crate uses every helper

use serde_json::Value;

/// Reads Server-Sent Events: `(event name, data as JSON)`, or `None` when the stream ended.
pub struct SseReader {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        SseReader {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    pub async fn next(&mut self) -> Option<(String, Value)> {
        use futures::StreamExt;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut name = None;
                let mut data = None;
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event: ") {
                        name = Some(value.to_owned());
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data = Some(serde_json::from_str(value).unwrap());
                    }
                }
                // A keep-alive comment has neither.
                if let (Some(name), Some(data)) = (name, data) {
                    return Some((name, data));
                }
                continue;
            }
            let chunk = self.body.next().await?.unwrap();
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next event of `task`, skipping others.
    pub async fn next_of(&mut self, task: impl std::fmt::Display) -> (String, Value) {
        loop {
            let (name, data) = self.next().await.expect("the stream ended");
            if data["task_id"] == task.to_string() {
                return (name, data);
            }
        }
    }

    /// Waits (at most 60 s, else panics naming `what`) until `task` reaches `status`.
    pub async fn wait_status(&mut self, task: impl std::fmt::Display, status: &str, what: &str) {
        let task = task.to_string();
        let reached = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            loop {
                let (name, data) = self.next_of(&task).await;
                if name == "status" && data["status"] == status {
                    return;
                }
            }
        })
        .await;
        assert!(reached.is_ok(), "{what}: task {task} never became {status}");
    }
}
