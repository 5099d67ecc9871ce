//! The terminal as a chat host, for `mai-agent run` and `mai-agent task`: messages the bot sends
//! are printed to stdout; context notes and the message log stay in memory.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::Utc;
use mai_core::host::{ChatLine, Delivery, Host, HostError, Jargon, Persona};
use mai_core::ids::StreamId;

/// Prints what the bot says; remembers the conversation for polish context.
#[derive(Debug, Default)]
pub struct ConsoleHost {
    log: Mutex<Vec<ChatLine>>,
}

impl ConsoleHost {
    /// Records a line the person typed, so polish sees the conversation.
    pub fn record_user_line(&self, text: &str) {
        self.push("you", text);
    }

    fn push(&self, sender: &str, text: &str) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.push(ChatLine {
            sender: sender.to_owned(),
            text: text.to_owned(),
            at: Utc::now(),
        });
    }
}

#[async_trait]
impl Host for ConsoleHost {
    async fn send_text(&self, _stream: &StreamId, text: &str) -> Result<Delivery, HostError> {
        println!("mai> {text}");
        self.push("mai", text);
        Ok(Delivery::Sent)
    }

    async fn append_context(&self, _stream: &StreamId, _note: &str) -> Result<(), HostError> {
        Ok(())
    }

    async fn recent_messages(
        &self,
        _stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ChatLine>, HostError> {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        Ok(log[log.len().saturating_sub(limit)..].to_vec())
    }

    async fn jargon(&self, _stream: &StreamId, _text: &str) -> Result<Vec<Jargon>, HostError> {
        Ok(Vec::new())
    }

    async fn persona(&self) -> Persona {
        Persona::default()
    }
}
