//! The reply splitter (see docs/design.md, "Replies and delivery"): cuts a finished reply into chat-sized messages.
//!
//! Owns the normalization of reply text and the choice of cut points. It must never change
//! content — `split(t, ..).concat() == normalize(t)` holds for every input — and it knows nothing
//! about platforms, polishing or sending: the sender decides what to do with each part.
//!
//! # Units
//!
//! Lengths are counted in **`char`s** (Unicode scalar values, what Python's `len` and most chat
//! platforms count), but cuts only ever fall on **extended grapheme cluster** boundaries, so an
//! emoji ZWJ sequence, a flag or a letter with combining marks is never torn apart.
//!
//! # Normalization ([`normalize`])
//!
//! 1. every `\r\n` and every lone `\r` becomes `\n`;
//! 2. leading and trailing whitespace of the whole text is removed (`str::trim`, i.e. Unicode
//!    `White_Space`).
//!
//! Nothing else changes: inner whitespace, blank lines and indentation are kept.
//!
//! # Cut points
//!
//! Every grapheme boundary gets a rank; a part that is too long is cut at the **best-ranked
//! boundary that keeps it within `max_length`, the latest one among equals** (greedy packing).
//! Boundaries have a class, from best to worst:
//!
//! 1. a line break (any position in a whitespace run containing `\n`, up to just after its last
//!    `\n`), so text with line breaks is packed line-wise and a line is only split when it is
//!    longer than `max_length` (a line ending in a colon is the exception, see *protected*);
//! 2. a sentence end: after a run of `。！？!?；;.…` plus any closing quotes/brackets, or anywhere
//!    in the whitespace that follows;
//! 3. a clause mark: after `，、,` (or in the whitespace that follows);
//! 4. whitespace between words;
//! 5. any other grapheme boundary (between two CJK characters, emoji, …) — the hard cut of an
//!    unpunctuated run, which therefore prefers whitespace.
//!
//! A boundary is *protected* when it lies inside a paired quote or bracket (`“” ‘’ 「」 『』 ""
//! '' （） () 《》 【】 〈〉`, paired within one line), next to a colon (`：:`, on either side,
//! ignoring whitespace) or next to a dash (`— – ―`, `--`, ignoring whitespace). The full order is:
//!
//! 1. unprotected punctuation cuts (line, sentence, clause — in that order);
//! 2. protected punctuation cuts: a quote is only cut when no unprotected punctuation cut fits,
//!    but then at its sentence ends rather than at an arbitrary character;
//! 3. unprotected hard cuts (whitespace, then other boundaries);
//! 4. protected hard cuts;
//! 5. awkward boundaries: ones that would start a part with closing punctuation, end it with an
//!    opening bracket or a list bullet (`- `), or fall between two ASCII symbols (`word|,`);
//! 6. the worst: inside a word or number (letters/digits of alphabetic scripts, joined by single
//!    `. , : / ' ’ - @ +` as in `3.14`, `1,000`, `12:30`, `don't`, `e-mail`) or inside a URL
//!    (`scheme://…`, `www.…`, up to whitespace or a non-ASCII character).
//!
//! So a word, number or URL is split only when it alone is longer than `max_length`.
//!
//! # Limits
//!
//! - `max_messages`: once `max_messages - 1` parts are cut, the whole rest becomes the last part,
//!   which may therefore be longer than `max_length`.
//! - A single grapheme cluster longer than `max_length` chars (e.g. a 7-char family emoji with
//!   `max_length = 3`) becomes a part of its own that exceeds `max_length`.
//! - `max_length` and `max_messages` below 1 are treated as 1.
//! - Whitespace at a cut normally ends the part before it (as far as it fits); indentation after a
//!   line break starts the next part. The sender may trim parts; the splitter never does.

use unicode_segmentation::UnicodeSegmentation;

/// Splits `text` into at most `max_messages` non-empty parts of at most `max_length` chars each
/// (except possibly the last), following the rules in the module documentation.
///
/// Empty or whitespace-only input gives an empty vec. `split(t, ..).concat() == normalize(t)`.
pub fn split(text: &str, max_length: usize, max_messages: usize) -> Vec<String> {
    let text = normalize(text);
    if text.is_empty() {
        return Vec::new();
    }
    let max_length = max_length.max(1);
    let max_messages = max_messages.max(1);
    if max_messages == 1 || text.chars().count() <= max_length {
        return vec![text];
    }
    let layout = Layout::new(&text);
    let ranks = layout.rank_boundaries();
    layout.pack(&ranks, max_length, max_messages)
}

/// The normalization `split` applies first: `\r\n` and lone `\r` become `\n`, then leading and
/// trailing whitespace of the whole text is trimmed. Nothing else changes.
pub fn normalize(text: &str) -> String {
    let trimmed = text.trim();
    if !trimmed.contains('\r') {
        return trimmed.to_owned();
    }
    trimmed.replace("\r\n", "\n").replace('\r', "\n")
}

/// Boundary classes, best last. A boundary's rank combines its class with its protection.
const CLASS_OTHER: u8 = 0;
const CLASS_SPACE: u8 = 1;
const CLASS_CLAUSE: u8 = 2;
const CLASS_SENTENCE: u8 = 3;
const CLASS_LINE: u8 = 4;

/// Inside a word, number or URL.
const RANK_IN_WORD: u8 = 0;
/// Would start a part with closing punctuation, end one with an opener or a bullet, or cut an
/// ASCII symbol run.
const RANK_AWKWARD: u8 = 1;

/// The rank of a boundary that is neither inside a word nor awkward. Punctuation cuts (line,
/// sentence, clause) beat hard cuts (space, other); within each group unprotected beats
/// protected; then the class decides.
fn rank(class: u8, protected: bool) -> u8 {
    let punctuation = class >= CLASS_CLAUSE;
    let (tier, within) = match (punctuation, protected) {
        (false, true) => (0, class),
        (false, false) => (1, class),
        (true, true) => (2, class - CLASS_CLAUSE),
        (true, false) => (3, class - CLASS_CLAUSE),
    };
    RANK_AWKWARD + 1 + tier * 3 + within
}

const TERMINATORS: &[char] = &['。', '！', '？', '!', '?', '；', ';', '.', '…', '．', '｡'];
const CLAUSE_MARKS: &[char] = &['，', '、', ',', '､'];
const COLONS: &[char] = &[':', '：'];
const DASHES: &[char] = &['—', '–', '―', '⸺', '⸻'];
/// Characters that join two word pieces into one word (`3.14`, `don't`, `e-mail`).
const WORD_JOINERS: &[char] = &['.', ',', ':', '/', '\'', '’', '-', '@', '+'];
/// Asymmetric quote and bracket pairs; `"` and `'` are handled apart (same char opens and closes).
const PAIRS: &[(char, char)] = &[
    ('“', '”'),
    ('‘', '’'),
    ('「', '」'),
    ('『', '』'),
    ('（', '）'),
    ('(', ')'),
    ('《', '》'),
    ('【', '】'),
    ('〈', '〉'),
];
/// Open quotes and brackets tracked at once; older ones are forgotten beyond this.
const MAX_QUOTE_DEPTH: usize = 32;
/// Punctuation a part should not start with.
const NO_START: &[char] = &[
    '，', '。', '、', '：', '；', '！', '？', ',', '.', ';', ':', '!', '?', '…', '）', '」', '』',
    '》', '”', '’', ')', '】', '〉', '．', '､', '｡',
];

/// The normalized text cut into grapheme clusters, with byte offsets and char counts.
///
/// Boundary `k` (for `0 < k < len`) is the position between grapheme `k - 1` and grapheme `k`.
struct Layout<'a> {
    text: &'a str,
    graphemes: Vec<&'a str>,
    /// The [`kind`] flags of each grapheme.
    kinds: Vec<u16>,
    /// Byte offset of grapheme `i`; `offsets[len] == text.len()`.
    offsets: Vec<usize>,
    /// Chars before grapheme `i`; `chars_before[len]` is the text's char count.
    chars_before: Vec<usize>,
}

/// What a grapheme is, as bit flags computed once per grapheme (from its first char).
mod kind {
    pub const WHITESPACE: u16 = 1;
    pub const NEWLINE: u16 = 1 << 1;
    pub const WORD: u16 = 1 << 2;
    pub const WORD_JOINER: u16 = 1 << 3;
    pub const TERMINATOR: u16 = 1 << 4;
    pub const CLAUSE: u16 = 1 << 5;
    pub const COLON: u16 = 1 << 6;
    pub const DASH: u16 = 1 << 7;
    pub const HYPHEN: u16 = 1 << 8;
    pub const OPENER: u16 = 1 << 9;
    pub const CLOSER: u16 = 1 << 10;
    pub const NO_START: u16 = 1 << 11;
    pub const ASCII_SYMBOL: u16 = 1 << 12;
    pub const BULLET_MARK: u16 = 1 << 13;
}

fn kind_of(grapheme: &str) -> u16 {
    let Some(c) = grapheme.chars().next() else {
        return 0;
    };
    let flag = |test: bool, flag: u16| if test { flag } else { 0 };
    flag(grapheme.chars().all(char::is_whitespace), kind::WHITESPACE)
        | flag(grapheme.contains('\n'), kind::NEWLINE)
        // Letters and digits of alphabetic scripts (below the CJK blocks), plus `_`: the pieces
        // of words and numbers. CJK, kana and hangul may be cut between characters.
        | flag(
            (c.is_alphanumeric() && u32::from(c) < 0x2E80) || c == '_',
            kind::WORD,
        )
        | flag(WORD_JOINERS.contains(&c), kind::WORD_JOINER)
        | flag(TERMINATORS.contains(&c), kind::TERMINATOR)
        | flag(CLAUSE_MARKS.contains(&c), kind::CLAUSE)
        | flag(COLONS.contains(&c), kind::COLON)
        | flag(DASHES.contains(&c), kind::DASH)
        | flag(grapheme == "-", kind::HYPHEN)
        | flag(PAIRS.iter().any(|&(open, _)| open == c), kind::OPENER)
        | flag(
            c == '"' || c == '\'' || PAIRS.iter().any(|&(_, close)| close == c),
            kind::CLOSER,
        )
        | flag(NO_START.contains(&c), kind::NO_START)
        | flag(
            grapheme.len() == 1 && c.is_ascii_punctuation(),
            kind::ASCII_SYMBOL,
        )
        | flag(['-', '*', '+', '•'].contains(&c), kind::BULLET_MARK)
}

impl<'a> Layout<'a> {
    fn new(text: &'a str) -> Self {
        let mut graphemes = Vec::new();
        let mut kinds = Vec::new();
        let mut offsets = Vec::new();
        let mut chars_before = vec![0];
        for (offset, grapheme) in text.grapheme_indices(true) {
            let before = chars_before.last().copied().unwrap_or(0);
            chars_before.push(before + grapheme.chars().count());
            offsets.push(offset);
            graphemes.push(grapheme);
            kinds.push(kind_of(grapheme));
        }
        offsets.push(text.len());
        Layout {
            text,
            graphemes,
            kinds,
            offsets,
            chars_before,
        }
    }

    fn len(&self) -> usize {
        self.graphemes.len()
    }

    fn first(&self, i: usize) -> Option<char> {
        self.graphemes.get(i).and_then(|g| g.chars().next())
    }

    /// Whether grapheme `i` exists and has any of the `kind` flags.
    fn is(&self, i: usize, kind: u16) -> bool {
        self.kinds.get(i).is_some_and(|k| k & kind != 0)
    }

    fn is_whitespace(&self, i: usize) -> bool {
        self.is(i, kind::WHITESPACE)
    }

    fn is_word(&self, i: usize) -> bool {
        self.is(i, kind::WORD)
    }

    fn is_dash(&self, i: usize) -> bool {
        self.is(i, kind::DASH)
            || (self.is(i, kind::HYPHEN)
                && ((i > 0 && self.is(i - 1, kind::HYPHEN)) || self.is(i + 1, kind::HYPHEN)))
    }

    /// A list bullet (`-`, `*`, `+`, `•`) at the start of a line, followed by whitespace.
    fn is_bullet(&self, i: usize) -> bool {
        if !self.is(i, kind::BULLET_MARK) || !self.is_whitespace(i + 1) {
            return false;
        }
        let mut j = i;
        while j > 0 && self.is_whitespace(j - 1) {
            if self.is(j - 1, kind::NEWLINE) {
                return true;
            }
            j -= 1;
        }
        j == 0
    }

    /// Whether boundary `k` is inside a word or number (see [`WORD_JOINERS`]).
    fn inside_word(&self, k: usize) -> bool {
        let (before, after) = (k - 1, k);
        (self.is_word(before) && self.is_word(after))
            || (self.is_word(before) && self.is(after, kind::WORD_JOINER) && self.is_word(k + 1))
            || (k >= 2
                && self.is_word(before - 1)
                && self.is(before, kind::WORD_JOINER)
                && self.is_word(after))
    }

    /// Ranks every boundary; index `k` of the result is boundary `k` (0 and `len` unused).
    fn rank_boundaries(&self) -> Vec<u8> {
        let n = self.len();
        let classes = self.classes();
        let inside_quotes = self.inside_quotes();
        let inside_urls = self.inside_urls();
        let (prev_solid, next_solid) = self.nearest_non_whitespace();
        let bullets: Vec<bool> = (0..n).map(|i| self.is_bullet(i)).collect();
        let near = |k: usize, test: &dyn Fn(usize) -> bool| {
            prev_solid[k].is_some_and(test) || next_solid[k].is_some_and(test)
        };
        let mut ranks = vec![RANK_IN_WORD; n + 1];
        for k in 1..n {
            ranks[k] = if inside_urls[k] || self.inside_word(k) {
                RANK_IN_WORD
            } else if self.is(k, kind::NO_START)
                || self.is(k - 1, kind::OPENER)
                || prev_solid[k].is_some_and(|i| bullets[i])
                || (self.is(k - 1, kind::ASCII_SYMBOL) && self.is(k, kind::ASCII_SYMBOL))
            {
                RANK_AWKWARD
            } else {
                let protected = inside_quotes[k]
                    || near(k, &|i| self.is(i, kind::COLON))
                    || near(k, &|i| self.is_dash(i));
                rank(classes[k], protected)
            };
        }
        ranks
    }

    /// The class of every boundary: line, sentence, clause, space or other.
    fn classes(&self) -> Vec<u8> {
        let n = self.len();
        let mut classes = vec![CLASS_OTHER; n + 1];
        for (k, class) in classes.iter_mut().enumerate().take(n).skip(1) {
            if self.is_whitespace(k - 1) || self.is_whitespace(k) {
                *class = CLASS_SPACE;
            }
        }
        // Sentence ends and clause marks: after the punctuation run (and closing quotes for
        // sentences), and anywhere in the whitespace right after it.
        for i in 0..n {
            let class = if self.is(i, kind::TERMINATOR) {
                CLASS_SENTENCE
            } else if self.is(i, kind::CLAUSE) {
                CLASS_CLAUSE
            } else {
                continue;
            };
            if self.is(i + 1, kind::TERMINATOR | kind::CLAUSE) {
                continue; // not the end of the run
            }
            let mut k = i + 1;
            if class == CLASS_SENTENCE {
                while k < n && self.is(k, kind::CLOSER) {
                    k += 1;
                }
            }
            while k < n {
                classes[k] = classes[k].max(class);
                if !self.is_whitespace(k) {
                    break;
                }
                k += 1;
            }
        }
        // Line breaks: a whitespace run with a '\n', from its start to just after its last '\n'.
        let mut i = 0;
        while i < n {
            if !self.is_whitespace(i) {
                i += 1;
                continue;
            }
            let run_start = i;
            let mut last_newline = None;
            while i < n && self.is_whitespace(i) {
                if self.is(i, kind::NEWLINE) {
                    last_newline = Some(i);
                }
                i += 1;
            }
            if let Some(last) = last_newline {
                for class in &mut classes[run_start.max(1)..=(last + 1).min(n - 1)] {
                    *class = CLASS_LINE;
                }
            }
        }
        classes
    }

    /// For every boundary, whether it lies inside a paired quote or bracket. Pairs are matched
    /// with a stack within one line; unmatched marks protect nothing, so a stray `(` or an
    /// apostrophe cannot lock up the rest of the text.
    fn inside_quotes(&self) -> Vec<bool> {
        let n = self.len();
        let mut depth_change = vec![0i32; n + 2];
        let mut open: Vec<(char, usize)> = Vec::new();
        for i in 0..n {
            if self.is(i, kind::NEWLINE) {
                open.clear();
                continue;
            }
            let Some(c) = self.first(i) else { continue };
            let apostrophe = self.is_word(i.wrapping_sub(1)) && self.is_word(i + 1);
            let closes = if c == '"' || c == '\'' {
                !(c == '\'' && (apostrophe || self.is_word(i + 1)))
            } else {
                PAIRS.iter().any(|&(_, close)| close == c) && !(c == '’' && apostrophe)
            };
            if closes && let Some(pos) = open.iter().rposition(|&(closer, _)| closer == c) {
                let opened_at = open[pos].1;
                open.truncate(pos);
                depth_change[opened_at + 1] += 1;
                depth_change[i + 1] -= 1;
                continue;
            }
            let closer = if let Some(&(_, close)) = PAIRS.iter().find(|&&(opener, _)| opener == c) {
                close
            } else if (c == '"' || c == '\'')
                && !self.is_word(i.wrapping_sub(1))
                && !self.is_whitespace(i + 1)
                && i + 1 < n
            {
                c
            } else {
                continue;
            };
            // Deeper nesting than this is noise (e.g. ASCII art); bounding it keeps the closer
            // search cheap on adversarial input.
            if open.len() == MAX_QUOTE_DEPTH {
                open.remove(0);
            }
            open.push((closer, i));
        }
        let mut inside = vec![false; n + 1];
        let mut depth = 0;
        for (k, slot) in inside.iter_mut().enumerate() {
            depth += depth_change[k];
            *slot = depth > 0;
        }
        inside
    }

    /// For every boundary, whether it lies strictly inside a URL.
    fn inside_urls(&self) -> Vec<bool> {
        let bytes = self.text.as_bytes();
        let in_url = |b: u8| b.is_ascii_graphic() && !matches!(b, b'"' | b'<' | b'>' | b'`');
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let start = if bytes[i..].starts_with(b"://") {
                let mut s = i;
                while s > 0
                    && (bytes[s - 1].is_ascii_alphanumeric() || b"+-.".contains(&bytes[s - 1]))
                {
                    s -= 1;
                }
                (s < i).then_some(s)
            } else if bytes[i..].starts_with(b"www.") && (i == 0 || !in_url(bytes[i - 1])) {
                Some(i)
            } else {
                None
            };
            let Some(start) = start else {
                i += 1;
                continue;
            };
            let mut end = i;
            while end < bytes.len() && in_url(bytes[end]) {
                end += 1;
            }
            while end > start && b".,;:!?".contains(&bytes[end - 1]) {
                end -= 1;
            }
            ranges.push((start, end));
            i = end.max(i + 1);
        }
        let mut inside = vec![false; self.len() + 1];
        for (start, end) in ranges {
            let first = self.offsets.partition_point(|&offset| offset <= start);
            let last = self.offsets.partition_point(|&offset| offset < end);
            for slot in &mut inside[first..last] {
                *slot = true;
            }
        }
        inside
    }

    /// For every boundary, the nearest grapheme before and after it that is not whitespace.
    #[allow(clippy::type_complexity)]
    fn nearest_non_whitespace(&self) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
        let n = self.len();
        let mut prev = vec![None; n + 1];
        for k in 1..=n {
            prev[k] = if self.is_whitespace(k - 1) {
                prev[k - 1]
            } else {
                Some(k - 1)
            };
        }
        let mut next = vec![None; n + 1];
        for k in (0..n).rev() {
            next[k] = if self.is_whitespace(k) {
                next[k + 1]
            } else {
                Some(k)
            };
        }
        (prev, next)
    }

    /// Greedy packing: from each part's start, cut at the best-ranked boundary within
    /// `max_length` chars (the latest among equals); the rest after `max_messages - 1` cuts is the
    /// last part.
    fn pack(&self, ranks: &[u8], max_length: usize, max_messages: usize) -> Vec<String> {
        let n = self.len();
        let mut parts = Vec::new();
        let mut start = 0;
        while parts.len() + 1 < max_messages {
            if self.chars_before[n] - self.chars_before[start] <= max_length {
                break;
            }
            let limit = self.chars_before[start] + max_length;
            let mut best: Option<(u8, usize)> = None;
            let mut k = start + 1;
            while k < n && self.chars_before[k] <= limit {
                if best.is_none_or(|(rank, _)| ranks[k] >= rank) {
                    best = Some((ranks[k], k));
                }
                k += 1;
            }
            let cut = match best {
                Some((_, k)) => k,
                // The grapheme at `start` alone is longer than max_length: it becomes a part.
                None if start + 1 < n => start + 1,
                None => break,
            };
            parts.push(self.text[self.offsets[start]..self.offsets[cut]].to_owned());
            start = cut;
        }
        parts.push(self.text[self.offsets[start]..].to_owned());
        parts
    }
}

#[cfg(test)]
mod tests;
