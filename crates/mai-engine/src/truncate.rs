//! Cutting over-long text for the model: keep the head and the tail, say how much was dropped.
//!
//! Tool outputs and sub-agent answers go back into the conversation; an unbounded one would eat
//! the context window. The middle is usually the least informative part of a log or a page.

/// `text` if it has at most `max_chars` characters, else its head and tail with a note of the
/// original size in between. The result has at most `max_chars` characters plus the note.
pub fn head_tail(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    let head_len = max_chars * 2 / 3;
    let tail_len = max_chars - head_len;
    let head: String = text.chars().take(head_len).collect();
    let tail: String = text.chars().skip(total - tail_len).collect();
    format!(
        "{head}\n[… {} of {total} characters cut; the first {head_len} and last {tail_len} are \
         kept …]\n{tail}",
        total - head_len - tail_len
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched_and_long_text_keeps_both_ends() {
        assert_eq!(head_tail("abc", 3), "abc");
        let text: String = ('a'..='z').cycle().take(1000).collect();
        let cut = head_tail(&text, 90);
        assert!(cut.starts_with(&text[..60]));
        assert!(cut.ends_with(&text[970..]));
        assert!(cut.contains("910 of 1000 characters cut"), "{cut}");
        let cjk = "数据".repeat(100);
        let cut = head_tail(&cjk, 10);
        assert!(cut.starts_with("数据数据数据"), "char-safe: {cut}");
    }
}
