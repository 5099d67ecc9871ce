//! Bounded capture of one output pipe: the first and the last bytes of a stream of any length,
//! turned into at most `max_chars` characters of lossy UTF-8 with a note of what was cut.
//!
//! Memory stays at about `4 × max_chars` bytes per stream whatever the command prints: the head
//! stops growing once full and the tail is a rolling window. This module never blocks on a pipe
//! for longer than the pipe takes to close; the caller bounds that with its drain timeout.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The head and a rolling tail of one stream.
#[derive(Debug)]
pub(super) struct Capture {
    /// Bytes kept at each end: 4 bytes per character (the widest UTF-8 sequence) for half the
    /// character budget, so the kept bytes always hold enough whole characters.
    keep: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

/// The text a capture turns into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Captured {
    pub text: String,
    pub truncated: bool,
}

impl Capture {
    pub fn new(max_chars: usize) -> Self {
        let keep = max_chars.saturating_mul(2).max(16);
        Capture {
            keep,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Reads `pipe` to its end (or to its first error: a broken pipe is just the end of output).
    pub async fn read_from(&mut self, mut pipe: impl AsyncRead + Unpin) {
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = pipe.read(&mut buf).await {
            self.push(&buf[..n]);
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len() as u64);
        let room = self.keep.saturating_sub(self.head.len());
        if room > 0 {
            let taken = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
        }
        // Only the last `keep` bytes of what overflows the head can ever be shown.
        if bytes.len() >= self.keep {
            self.tail.clear();
            bytes = &bytes[bytes.len() - self.keep..];
        }
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(self.keep);
        self.tail.drain(..excess);
    }

    #[cfg(test)]
    fn buffered(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// The output as at most `max_chars` characters (note included): all of it if it fits,
    /// otherwise its head and tail around a note giving the original size.
    pub fn finish(self, max_chars: usize) -> Captured {
        let tail: Vec<u8> = self.tail.into();
        let dropped = self.total > (self.head.len() + tail.len()) as u64;
        let (head_text, tail_text) = if dropped {
            (
                String::from_utf8_lossy(&self.head).into_owned(),
                String::from_utf8_lossy(skip_partial_char(&tail)).into_owned(),
            )
        } else {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            let text = String::from_utf8_lossy(&all).into_owned();
            if text.chars().count() <= max_chars {
                return Captured {
                    text,
                    truncated: false,
                };
            }
            (text.clone(), text)
        };
        let note = format!("\n[… truncated: {} bytes in total …]\n", self.total);
        let budget = max_chars.saturating_sub(note.chars().count());
        let head_chars = budget / 2;
        let tail_chars = budget - head_chars;
        let mut text: String = head_text.chars().take(head_chars).collect();
        text.push_str(&note);
        let skip = tail_text.chars().count().saturating_sub(tail_chars);
        text.extend(tail_text.chars().skip(skip));
        Captured {
            text,
            truncated: true,
        }
    }
}

/// The rolling tail may start inside a multi-byte character; drop those continuation bytes
/// rather than show a replacement character the command never printed.
fn skip_partial_char(bytes: &[u8]) -> &[u8] {
    let partial = bytes
        .iter()
        .take(3)
        .take_while(|&&b| b & 0xC0 == 0x80)
        .count();
    &bytes[partial..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut capture = Capture::new(100);
        capture.push(b"hello ");
        capture.push(b"world");
        assert_eq!(
            capture.finish(100),
            Captured {
                text: "hello world".into(),
                truncated: false
            }
        );
    }

    #[test]
    fn long_output_keeps_head_and_tail_within_the_budget() {
        let mut capture = Capture::new(200);
        capture.push(b"START");
        for _ in 0..10_000 {
            capture.push(&[b'x'; 1000]);
            assert!(capture.buffered() <= 2 * 400, "memory must stay bounded");
        }
        capture.push(b"END");
        let captured = capture.finish(200);
        assert!(captured.truncated);
        assert!(captured.text.starts_with("START"));
        assert!(captured.text.ends_with("END"));
        assert!(captured.text.contains("10000008 bytes in total"));
        assert!(captured.text.chars().count() <= 200);
    }

    #[test]
    fn kept_but_too_many_chars_is_cut_too() {
        // 150 two-byte characters fit in the byte buffers but not in 100 characters.
        let mut capture = Capture::new(100);
        capture.push("é".repeat(150).as_bytes());
        let captured = capture.finish(100);
        assert!(captured.truncated);
        assert!(captured.text.chars().count() <= 100);
        assert!(captured.text.contains("300 bytes in total"));
    }

    #[test]
    fn a_tail_starting_mid_character_loses_only_that_character() {
        let mut capture = Capture::new(100);
        capture.push(&[b'a'; 1000]);
        // Odd-length prefix so the rolling tail starts inside a two-byte character.
        capture.push(b"a");
        capture.push("é".repeat(500).as_bytes());
        let captured = capture.finish(100);
        assert!(!captured.text.contains('\u{FFFD}'));
        assert!(captured.text.ends_with("éééé"));
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut capture = Capture::new(100);
        capture.push(b"ok \xff\xfe end");
        assert_eq!(capture.finish(100).text, "ok \u{FFFD}\u{FFFD} end");
    }
}
