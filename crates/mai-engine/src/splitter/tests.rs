use super::{normalize, split};
use proptest::prelude::*;
use unicode_segmentation::UnicodeSegmentation;

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Byte offsets of the cuts between consecutive parts.
fn cuts(parts: &[String]) -> Vec<usize> {
    let mut offset = 0;
    let mut cuts = Vec::new();
    for part in &parts[..parts.len().saturating_sub(1)] {
        offset += part.len();
        cuts.push(offset);
    }
    cuts
}

/// The invariants every split must satisfy, whatever the input.
fn assert_invariants(input: &str, max_length: usize, max_messages: usize, parts: &[String]) {
    let normalized = normalize(input);
    assert_eq!(parts.concat(), normalized, "content changed");
    assert!(
        parts.len() <= max_messages.max(1),
        "too many parts: {parts:?}"
    );
    assert_eq!(parts.is_empty(), normalized.is_empty());
    for part in parts {
        assert!(!part.is_empty(), "empty part in {parts:?}");
    }
    for part in &parts[..parts.len().saturating_sub(1)] {
        assert!(
            chars(part) <= max_length.max(1) || part.graphemes(true).count() == 1,
            "part over {max_length} chars: {part:?}"
        );
    }
    let boundaries: Vec<usize> = normalized.grapheme_indices(true).map(|(i, _)| i).collect();
    for cut in cuts(parts) {
        assert!(boundaries.contains(&cut), "cut inside a grapheme at {cut}");
    }
}

// ---- normalization and trivial inputs ----

#[test]
fn empty_and_whitespace_only_input_gives_no_parts() {
    assert!(split("", 10, 5).is_empty());
    assert!(split(" \r\n\t\n  ", 10, 5).is_empty());
}

#[test]
fn normalization_unifies_line_ends_and_trims_the_whole_text() {
    assert_eq!(normalize("  a\r\nb\rc \n\n d  \r\n"), "a\nb\nc \n\n d");
    assert_eq!(split("\r\n  hello world \r\n", 100, 5), vec!["hello world"]);
}

#[test]
fn text_within_max_length_is_one_part() {
    let text = "第一句。第二句！Third sentence? 第四句；";
    assert_eq!(split(text, chars(text), 5), vec![text]);
}

#[test]
fn degenerate_limits_are_treated_as_one() {
    assert_eq!(split("ab cd", 0, 5), vec!["a", "b", " ", "c", "d"]);
    assert_eq!(split("ab cd", 2, 0), vec!["ab cd"]);
}

// ---- line-wise packing ----

#[test]
fn lines_are_packed_and_never_split_when_they_fit() {
    let text = "line one is here\nline two\nline three is longer\nfour";
    let parts = split(text, 26, 10);
    assert_eq!(
        parts,
        vec!["line one is here\nline two\n", "line three is longer\nfour"]
    );
}

#[test]
fn a_line_of_exactly_max_length_stays_whole() {
    let text = "0123456789\nabc";
    assert_eq!(split(text, 10, 5), vec!["0123456789", "\nabc"]);
}

#[test]
fn a_line_break_beats_a_later_sentence_end() {
    let text = "标题\n第一句话。第二句话。第三句话很长很长。";
    let parts = split(text, 12, 10);
    assert_eq!(parts[0], "标题\n");
}

#[test]
fn an_overlong_line_is_split_at_sentence_ends_then_packed_with_the_next_lines() {
    let text = "第一句话。第二句话。第三句话。\n短行\n另一行";
    let parts = split(text, 12, 10);
    assert_eq!(
        parts,
        vec!["第一句话。第二句话。", "第三句话。\n短行\n另一行"]
    );
}

#[test]
fn indentation_after_a_line_break_starts_the_next_part() {
    let text = "aaaa\n    bbbb";
    assert_eq!(split(text, 8, 5), vec!["aaaa\n", "    bbbb"]);
}

// ---- sentence ends ----

#[test]
fn chinese_sentences_are_cut_after_their_end_marks() {
    let text = "今天天气很好。我们去公园吧！你觉得怎么样？好的；走吧";
    let parts = split(text, 15, 10);
    assert_eq!(
        parts,
        vec!["今天天气很好。我们去公园吧！", "你觉得怎么样？好的；走吧"]
    );
}

#[test]
fn english_sentences_keep_the_space_with_the_previous_part() {
    let text = "This is one. And here is two! Is this three? Yes.";
    let parts = split(text, 30, 10);
    assert_eq!(
        parts,
        vec!["This is one. And here is two! ", "Is this three? Yes."]
    );
}

#[test]
fn a_sentence_end_wins_over_a_later_comma_or_space() {
    let text = "短句。这是一个比较长的句子，还有逗号和更多内容";
    let parts = split(text, 16, 10);
    assert_eq!(parts[0], "短句。");
}

#[test]
fn commas_are_used_when_there_is_no_sentence_end() {
    let text = "这是一个很长的句子，没有句号但是有逗号，所以在逗号后面切开";
    let parts = split(text, 20, 10);
    assert_eq!(parts[0], "这是一个很长的句子，没有句号但是有逗号，");
}

#[test]
fn repeated_end_marks_and_closing_quotes_stay_together() {
    let text = "真的吗？！“是的。”然后呢……好吧";
    let parts = split(text, 10, 10);
    assert_eq!(parts[0], "真的吗？！“是的。”");
}

// ---- quotes ----

#[test]
fn never_cut_inside_paired_quotes_when_a_cut_outside_fits() {
    let text = "他走了。他说“第一句。第二句。”然后离开了";
    let parts = split(text, 16, 10);
    assert_eq!(parts, vec!["他走了。他说“第一句。第二句。”", "然后离开了"]);
    let text = "前言。他说「甲。乙。丙。」后记";
    assert_eq!(split(text, 12, 10)[0], "前言。");
}

#[test]
fn ascii_quotes_and_parentheses_are_respected() {
    let text = "Intro. He said \"one. two. three.\" and left (see a. b. c.) end";
    let parts = split(text, 40, 10);
    assert_eq!(parts[0], "Intro. He said \"one. two. three.\" ");
    assert!(parts[1].starts_with("and left (see a. b. c.)"), "{parts:?}");
}

#[test]
fn an_apostrophe_or_an_unpaired_bracket_does_not_block_cuts() {
    let text = "It's fine. Don't worry. 1) first point. Next one here.";
    let parts = split(text, 24, 10);
    assert_eq!(parts[0], "It's fine. Don't worry. ");
    assert_eq!(parts[1], "1) first point. ");
}

#[test]
fn a_quote_that_must_be_split_is_cut_at_its_sentence_ends() {
    let text = "他说：“我明天会来的，你别担心。真的，我保证！”然后就走了。";
    let parts = split(text, 20, 10);
    assert_eq!(
        parts,
        vec![
            "他说：“我明天会来的，你别担心。",
            "真的，我保证！”然后就走了。"
        ]
    );
}

#[test]
fn quotes_pair_within_a_line_only() {
    // Unpaired on its line, the first quote must not pair with the one on the next line.
    let text = "He said \"hi\nOne two. Three \"x\" y";
    let layout = super::Layout::new(text);
    let inside = layout.inside_quotes();
    let boundary_at = |byte: usize| layout.offsets.iter().position(|&o| o == byte).unwrap_or(0);
    let one_two = boundary_at(text.find("two").unwrap_or(0));
    let x = boundary_at(text.find('x').unwrap_or(0));
    assert!(!inside[one_two], "line 2 protected by a quote from line 1");
    assert!(inside[x], "the pair on line 2 is not recognized");
}

#[test]
fn an_overlong_quote_is_still_split() {
    let text = "“一二三四五六七八九十一二三四五六七八九十”";
    let parts = split(text, 10, 10);
    assert_invariants(text, 10, 10, &parts);
    assert!(parts.len() >= 3);
}

// ---- colons and dashes ----

#[test]
fn never_cut_right_after_a_colon() {
    let text = "结果如下：第一项很好第二项也好";
    let parts = split(text, 6, 10);
    assert_eq!(parts[0], "结果如下：第");
    assert_invariants(text, 6, 10, &parts);
    let text = "Here are the results:\n- one\n- two";
    assert_eq!(
        split(text, 28, 10),
        vec!["Here are the results:\n- one\n", "- two"]
    );
    // Too short for header and first item: a protected line break still beats a hard cut.
    assert_eq!(
        split(text, 26, 10),
        vec!["Here are the results:\n", "- one\n- two"]
    );
    // A list bullet stays with its item.
    assert_eq!(
        split(
            "intro text
- item one",
            14,
            10
        ),
        vec!["intro text\n", "- item one"]
    );
}

#[test]
fn never_cut_next_to_a_dash() {
    let text = "他来了——然后走了。再见";
    let parts = split(text, 8, 10);
    assert!(
        !parts[0].ends_with('—') && !parts[1].starts_with('—'),
        "{parts:?}"
    );
    let text = "alpha beta -- gamma delta";
    // From 16 chars on, every window holds a cut away from the dash.
    for parts in (16..25).map(|max_length| split(text, max_length, 10)) {
        for cut in cuts(&parts) {
            let (before, after) = text.split_at(cut);
            assert!(
                !before.trim_end().ends_with('-') && !after.trim_start().starts_with('-'),
                "cut next to a dash: {parts:?}"
            );
        }
    }
}

// ---- words, numbers, URLs ----

#[test]
fn never_cut_inside_words_numbers_or_urls() {
    let text =
        "pi is 3.14159 and e is 2.71828 see https://example.com/a.b?c=d;e!f for 1,000,000 more";
    // From the longest token (the URL, 31 chars) on, no token has to be cut.
    for max_length in 31..60 {
        let parts = split(text, max_length, 20);
        assert_invariants(text, max_length, 20, &parts);
        for cut in cuts(&parts) {
            let (before, after) = text.split_at(cut);
            let a = before.chars().last().unwrap_or(' ');
            let b = after.chars().next().unwrap_or(' ');
            assert!(
                a == ' ' || b == ' ',
                "cut inside a token at {cut} with max {max_length}: {parts:?}"
            );
        }
    }
}

#[test]
fn words_with_diacritics_and_www_links_are_kept_whole() {
    let text = "Größenverhältnisse naïve café www.example.org/straße ok";
    // From the longest token (the link, 22 chars) on.
    for max_length in 22..40 {
        let parts = split(text, max_length, 20);
        for part in &parts {
            let first = part.split_whitespace().next().unwrap_or_default();
            assert!(text.split(' ').any(|word| word == first), "{parts:?}");
        }
    }
}

#[test]
fn a_cut_at_sentence_end_skips_decimals() {
    let text = "版本3.14发布了。新功能很多很多";
    assert_eq!(split(text, 10, 5)[0], "版本3.14发布了。");
}

// ---- limits ----

#[test]
fn over_max_messages_the_tail_is_merged_into_the_last_part() {
    let text = "一。二。三。四。五。六。";
    let parts = split(text, 2, 3);
    assert_eq!(parts, vec!["一。", "二。", "三。四。五。六。"]);
}

#[test]
fn unpunctuated_cjk_is_hard_cut_at_max_length() {
    let text = "一二三四五六七八九十一二三四五";
    assert_eq!(
        split(text, 6, 10),
        vec!["一二三四五六", "七八九十一二", "三四五"]
    );
}

#[test]
fn unpunctuated_words_are_hard_cut_at_whitespace() {
    let text = "alpha beta gamma delta epsilon";
    assert_eq!(
        split(text, 12, 10),
        vec!["alpha beta ", "gamma delta ", "epsilon"]
    );
}

#[test]
fn a_word_longer_than_max_length_is_hard_cut() {
    let text = "supercalifragilistic";
    assert_eq!(split(text, 8, 10), vec!["supercal", "ifragili", "stic"]);
}

#[test]
fn emoji_zwj_sequences_flags_and_combining_marks_survive() {
    let family = "👨\u{200d}👩\u{200d}👧\u{200d}👦";
    let text = format!("{family}{family}🇨🇳🇯🇵e\u{301}e\u{301}👍🏽👍🏽");
    for max_length in 1..12 {
        let parts = split(&text, max_length, 50);
        assert_invariants(&text, max_length, 50, &parts);
    }
    // A cluster longer than max_length becomes a part of its own.
    assert_eq!(
        split(&format!("{family}{family}"), 3, 5),
        vec![family, family]
    );
}

#[test]
fn five_thousand_chars_with_default_limits() {
    let sentence = "这是一个测试句子，包含 English words and numbers like 3.14！";
    let text = sentence.repeat(5000 / chars(sentence) + 1);
    let parts = split(&text, 1000, 5);
    assert_invariants(&text, 1000, 5, &parts);
    assert_eq!(parts.len(), 5);
    for part in &parts[..4] {
        assert!(part.ends_with('！'), "not cut at a sentence end: {part:?}");
    }
}

// ---- properties ----

const FRAGMENTS: &[&str] = &[
    "你好",
    "世界",
    "中文测试",
    "。",
    "！",
    "？",
    "；",
    "，",
    "、",
    "：",
    ":",
    "——",
    "—",
    "--",
    " ",
    "  ",
    "\n",
    "\r\n",
    "\n\n",
    "“",
    "”",
    "「",
    "」",
    "『",
    "』",
    "\"",
    "'",
    "（",
    "）",
    "(",
    ")",
    "《",
    "》",
    "!",
    "?",
    ";",
    ".",
    ",",
    "hello",
    "world",
    "3.14",
    "1,000",
    "don't",
    "https://example.com/x?y=1",
    "👍",
    "👨\u{200d}👩\u{200d}👧",
    "🇨🇳",
    "e\u{301}",
    "\t",
];

fn mixed_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..120).prop_map(|f| f.concat())
}

/// Words that must never be cut when they fit, and separators that never join two words.
const WORDS: &[&str] = &[
    "hello",
    "world",
    "3.14",
    "1,000",
    "12:30",
    "don't",
    "e-mail",
    "snake_case",
    "42",
    "https://example.com/a.b?c=d",
    "Größe",
];
const SEPARATORS: &[&str] = &[
    " ", "，", "。", "\n", "！", "、", "你好", "😀", " — ", "：", "“", "”", "; ", ". ",
];

/// A text built from words and separators, with the byte ranges of the words.
fn worded_text() -> impl Strategy<Value = (String, Vec<(usize, usize)>)> {
    (
        prop::sample::select(WORDS),
        prop::collection::vec(
            (
                prop::sample::select(SEPARATORS),
                prop::sample::select(WORDS),
            ),
            0..80,
        ),
    )
        .prop_map(|(first, rest)| {
            let mut text = String::from(first);
            let mut words = vec![(0, first.len())];
            for (separator, word) in rest {
                text.push_str(separator);
                words.push((text.len(), text.len() + word.len()));
                text.push_str(word);
            }
            (text, words)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn split_preserves_content_and_respects_limits(
        text in mixed_text(),
        max_length in 1usize..80,
        max_messages in 1usize..12,
    ) {
        let parts = split(&text, max_length, max_messages);
        assert_invariants(&text, max_length, max_messages, &parts);
        prop_assert_eq!(&parts, &split(&text, max_length, max_messages), "not deterministic");
    }

    #[test]
    fn split_of_arbitrary_unicode_preserves_content(
        text in "\\PC{0,300}",
        max_length in 1usize..50,
        max_messages in 1usize..20,
    ) {
        let parts = split(&text, max_length, max_messages);
        assert_invariants(&text, max_length, max_messages, &parts);
    }

    #[test]
    fn split_never_cuts_inside_a_word_that_fits(
        (text, words) in worded_text(),
        extra in 0usize..40,
        max_messages in 1usize..30,
    ) {
        let longest = WORDS.iter().map(|w| chars(w)).max().unwrap_or(1);
        let max_length = longest + extra;
        let parts = split(&text, max_length, max_messages);
        assert_invariants(&text, max_length, max_messages, &parts);
        for cut in cuts(&parts) {
            for &(start, end) in &words {
                prop_assert!(
                    !(start < cut && cut < end),
                    "cut at {} inside {:?}: {:?}", cut, &text[start..end], parts
                );
            }
        }
    }

    #[test]
    fn split_within_limits_is_a_single_part(text in mixed_text()) {
        let normalized = normalize(&text);
        let parts = split(&text, chars(&normalized).max(1), 3);
        prop_assert_eq!(parts.len(), usize::from(!normalized.is_empty()));
    }
}
