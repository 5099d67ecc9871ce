//! The terminal as a chat channel of the embedded host, for `mai-agent run`: what the bot sends
//! to the `console` platform is printed to stdout; what the person types is ingested as their
//! message.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use mai_core::host::{Delivery, HostError, StreamInfo};
use mai_host::{ChannelSender, EmbeddedHost, IncomingMessage};

/// The platform name of the terminal.
pub const CONSOLE_PLATFORM: &str = "console";
/// The person at the terminal.
pub const CONSOLE_USER: &str = "local";

/// Prints the bot's messages as `mai> …`: on stdout, or on stderr where stdout carries a protocol
/// (`mai-agent mcp`).
#[derive(Debug, Default)]
pub struct ConsoleChannel {
    on_stderr: bool,
}

#[async_trait]
impl ChannelSender for ConsoleChannel {
    async fn send(&self, _stream: &StreamInfo, text: &str) -> Result<Delivery, HostError> {
        if self.on_stderr {
            eprintln!("mai> {text}");
        } else {
            println!("mai> {text}");
        }
        Ok(Delivery::Sent)
    }
}

/// What the console chat of `serve` answers to a plain line: nothing there reads chat the way a
/// chat bot does (that is MaiBot's or the planner's job), so the person learns what does work.
pub const PLAIN_LINE_HINT: &str = "this console takes task commands, not chat: \
`/mt create <what to do>` starts a background task, `/mt list` shows yours, `/mt help` lists \
the rest (a line also answers a task that asked you something)";

/// Prints [`PLAIN_LINE_HINT`] as the bot's line.
pub fn print_plain_line_hint() {
    println!("mai> {PLAIN_LINE_HINT}");
}

/// Connects the terminal to `host`.
pub fn connect(host: &EmbeddedHost) {
    host.register_channel(CONSOLE_PLATFORM, Arc::new(ConsoleChannel::default()));
}

/// Connects the terminal to `host` with the bot's messages on stderr.
pub fn connect_on_stderr(host: &EmbeddedHost) {
    host.register_channel(
        CONSOLE_PLATFORM,
        Arc::new(ConsoleChannel { on_stderr: true }),
    );
}

/// Stores a line the person typed as their message in the console chat `chat`.
pub async fn ingest_line(host: &EmbeddedHost, chat: &str, text: &str) -> Result<(), HostError> {
    host.ingest_message(&IncomingMessage {
        platform: CONSOLE_PLATFORM.into(),
        stream_id: None,
        group_id: None,
        group_name: None,
        user_id: chat.into(),
        sender_name: "you".into(),
        text: text.into(),
        at: Utc::now(),
        anonymous: false,
        platform_message_id: None,
    })
    .await
    .map(drop)
}

/// For `serve` with `[channels.console] enabled`: each line typed at the terminal becomes a
/// message of `user_id` in their console chat, handed to the inbound pipeline. Ends at EOF.
pub fn spawn_reader(
    user_id: String,
    inbound: tokio::sync::mpsc::Sender<IncomingMessage>,
) -> tokio::task::JoinHandle<()> {
    use tokio::io::AsyncBufReadExt;
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let message = IncomingMessage {
                platform: CONSOLE_PLATFORM.into(),
                stream_id: None,
                group_id: None,
                group_name: None,
                user_id: user_id.clone(),
                sender_name: "you".into(),
                text: text.into(),
                at: Utc::now(),
                anonymous: false,
                platform_message_id: None,
            };
            if inbound.send(message).await.is_err() {
                break;
            }
        }
    })
}
