//! The character trigrams of a text, for the full-text search on PostgreSQL: computed here, not
//! by the database, so they are the same on every cluster whatever its locale (PostgreSQL's own
//! trigram extension extracts nothing from Chinese text under `--locale=C`). A text is
//! lowercased, then every run of 3 characters is a trigram; each appears once, in order. Must
//! not: know any table or query.

use std::collections::BTreeSet;

/// The distinct lowercased character trigrams of `text` (none for fewer than 3 characters).
pub(crate) fn trigrams(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.to_lowercase().chars().collect();
    let grams: BTreeSet<String> = chars
        .windows(3)
        .map(|window| window.iter().collect())
        .collect();
    grams.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_and_latin_texts_give_their_lowercased_trigrams_once_each() {
        assert_eq!(trigrams("数据库迁移"), ["库迁移", "据库迁", "数据库"]);
        assert_eq!(trigrams("AbAbA"), ["aba", "bab"]);
        assert!(trigrams("据库").is_empty());
    }
}
