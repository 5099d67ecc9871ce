//! The reply splitter (docs/design.md, "Replies and delivery"). Asserts its contract, not just
//! "no panic":
//! - `concat(parts) == normalize(text)` (no content lost, added or reordered);
//! - no empty part, empty output exactly for whitespace-only input;
//! - at most `max_messages` parts;
//! - every part that is not the merged tail is at most `max_length` chars, unless it is a single
//!   grapheme cluster longer than that;
//! - deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mai_engine::{normalize, split};
use unicode_segmentation::UnicodeSegmentation;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    // Small limits most of the time (that is where cuts happen), occasionally 0 or large.
    let max_length = match data[0] {
        0 => 0,
        255 => 1000,
        n => usize::from(n % 64) + 1,
    };
    let max_messages = usize::from(data[1] % 12);
    let Ok(text) = std::str::from_utf8(&data[2..]) else {
        return;
    };
    let parts = split(text, max_length, max_messages);
    let normalized = normalize(text);

    assert_eq!(parts.concat(), normalized, "content changed");
    assert_eq!(parts.is_empty(), normalized.is_empty());
    assert!(parts.iter().all(|p| !p.is_empty()), "empty part: {parts:?}");
    let (max_length, max_messages) = (max_length.max(1), max_messages.max(1));
    assert!(parts.len() <= max_messages, "{} parts", parts.len());
    let merged_tail = parts.len() == max_messages;
    for (i, part) in parts.iter().enumerate() {
        if merged_tail && i + 1 == parts.len() {
            continue;
        }
        let chars = part.chars().count();
        assert!(
            chars <= max_length || part.graphemes(true).count() == 1,
            "part {i} has {chars} chars > {max_length}: {part:?}"
        );
    }
    assert_eq!(
        split(text, max_length, max_messages),
        parts,
        "not deterministic"
    );
});
