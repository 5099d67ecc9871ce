//! Turning a model's free-text query into SQL that cannot fail to parse.
//!
//! The query is split into terms on whitespace, control characters (FTS5 reads a NUL as the end
//! of the query) and list separators. A term of 3 or more
//! characters becomes an FTS5 string literal (double quotes doubled), so `NEAR(`, `*`, `-`, `OR`,
//! `"` and `:` are plain text, and terms are OR-ed. The trigram index cannot find a term shorter
//! than 3 characters (`据库`), so those become `LIKE '%term%'` patterns with `%`, `_` and `\`
//! escaped. Everything reaches the database as a bound parameter, never as SQL text.
//!
//! On PostgreSQL the same terms run against the trigram arrays the host stores with each message
//! and note (`grams`, see `grams`): a long term matches a row whose array holds all the term's
//! trigrams (a GIN index lookup) and whose text holds the term; its score counts the terms a row
//! matches, shorter texts first (lower is better, as bm25's).

use crate::grams::trigrams;
use crate::sql::{Dialect, Query};

/// Characters that separate terms besides whitespace.
const SEPARATORS: &[char] = &[',', ';', '|', '，', '、', '；', '。'];
/// At most this many terms are used; more add cost, not recall.
const MAX_TERMS: usize = 16;
/// The trigram tokenizer's shortest searchable term.
const TRIGRAM: usize = 3;

/// A parsed query: FTS literals for long terms, LIKE patterns for short ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TextQuery {
    /// Long terms as one FTS5 expression (`"a" OR "b"`), if any.
    pub fts: Option<String>,
    /// Short terms as escaped `LIKE` patterns.
    pub likes: Vec<String>,
    /// The long terms, lowercased (PostgreSQL's search).
    pub long: Vec<String>,
    pub dialect: Dialect,
}

impl TextQuery {
    /// Parses `query` for a connection speaking `dialect`.
    pub(crate) fn parse_for(query: &str, dialect: Dialect) -> Self {
        TextQuery {
            dialect,
            ..Self::parse(query)
        }
    }

    pub(crate) fn parse(query: &str) -> Self {
        let mut terms: Vec<&str> = Vec::new();
        for term in query
            .split(|c: char| c.is_whitespace() || c.is_control() || SEPARATORS.contains(&c))
            .filter(|term| !term.is_empty())
        {
            if !terms.contains(&term) && terms.len() < MAX_TERMS {
                terms.push(term);
            }
        }
        let (long, short): (Vec<&str>, Vec<&str>) = terms
            .into_iter()
            .partition(|term| term.chars().count() >= TRIGRAM);
        let fts = (!long.is_empty()).then(|| {
            long.iter()
                .map(|term| fts_literal(term))
                .collect::<Vec<_>>()
                .join(" OR ")
        });
        TextQuery {
            fts,
            likes: short.into_iter().map(like_pattern).collect(),
            long: long.iter().map(|term| term.to_lowercase()).collect(),
            dialect: Dialect::Sqlite,
        }
    }

    /// No terms: the query matches everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.fts.is_none() && self.likes.is_empty()
    }

    /// Pushes `(id IN fts-match OR text LIKE … )` for a table and its FTS index; pushes `TRUE` for
    /// an empty query.
    pub(crate) fn push_condition(
        &self,
        qb: &mut Query,
        index: &FtsIndex,
        id_column: &str,
        text_column: &str,
    ) {
        if self.is_empty() {
            qb.push("TRUE");
            return;
        }
        qb.push("(");
        let mut first = true;
        if self.dialect == Dialect::Postgres && !self.long.is_empty() {
            qb.push(format_args!(
                "{id_column} IN (SELECT {id} FROM {table} WHERE ",
                id = index.id_column,
                table = index.table
            ));
            self.push_gram_matches(qb, false);
            qb.push(")");
            first = false;
        } else if let Some(fts) = &self.fts {
            qb.push(format_args!(
                "{id_column} IN (SELECT rowid FROM {fts_table} WHERE {fts_table} MATCH ",
                fts_table = index.fts_table
            ));
            qb.push_bind(fts.clone());
            qb.push(")");
            first = false;
        }
        for pattern in &self.likes {
            if !first {
                qb.push(" OR ");
            }
            qb.push(format_args!("{text_column} {} ", self.like()));
            qb.push_bind(pattern.clone());
            qb.push(" ESCAPE '\\'");
            first = false;
        }
        qb.push(")");
    }

    /// Pushes a subquery of `(id, score)` rows: bm25 for full-text hits (lower is better; the
    /// `rank` column, which is bm25 by default and, unlike a `bm25()` call, survives the
    /// subquery being flattened into the caller's query),
    /// NULL for substring-only hits. An id can appear twice; callers take `MIN(score)`.
    /// Must not be called for an empty query.
    pub(crate) fn push_ranked_hits(&self, qb: &mut Query, index: &FtsIndex) {
        let mut first = true;
        if self.dialect == Dialect::Postgres && !self.long.is_empty() {
            qb.push(format_args!(
                "SELECT {id} AS id, CAST(-(",
                id = index.id_column
            ));
            self.push_gram_matches(qb, true);
            qb.push(format_args!(
                ") AS DOUBLE PRECISION) / ln(2 + length(text)) AS score FROM {table} WHERE ",
                table = index.table
            ));
            self.push_gram_matches(qb, false);
            first = false;
        } else if let Some(fts) = &self.fts {
            qb.push(format_args!(
                "SELECT rowid AS id, rank AS score FROM {fts_table} WHERE {fts_table} MATCH ",
                fts_table = index.fts_table
            ));
            qb.push_bind(fts.clone());
            first = false;
        }
        if !self.likes.is_empty() {
            if !first {
                qb.push(" UNION ALL ");
            }
            qb.push(format_args!(
                "SELECT {id} AS id, CAST(NULL AS DOUBLE PRECISION) AS score FROM {table} WHERE ",
                id = index.id_column,
                table = index.table
            ));
            for (position, pattern) in self.likes.iter().enumerate() {
                if position > 0 {
                    qb.push(" OR ");
                }
                qb.push(format_args!("text {} ", self.like()));
                qb.push_bind(pattern.clone());
                qb.push(" ESCAPE '\\'");
            }
        }
    }
}

impl TextQuery {
    /// LIKE's case-insensitive form (SQLite's `LIKE` already is, for ASCII).
    fn like(&self) -> &'static str {
        match self.dialect {
            Dialect::Sqlite => "LIKE",
            Dialect::Postgres => "ILIKE",
        }
    }

    /// One condition per long term (PostgreSQL): joined by ` OR ` ("any term matches"), or
    /// with `count`, each as 1 or 0 joined by ` + ` (how many terms match).
    fn push_gram_matches(&self, qb: &mut Query, count: bool) {
        let (joiner, open, close) = if count {
            (" + ", "CAST(", " AS INTEGER)")
        } else {
            (" OR ", "", "")
        };
        for (position, term) in self.long.iter().enumerate() {
            if position > 0 {
                qb.push(joiner);
            }
            qb.push(open);
            qb.push("(grams @> ");
            qb.push_bind(trigrams(term));
            qb.push(" AND strpos(lower(text), ");
            qb.push_bind(term.clone());
            qb.push(") > 0)");
            qb.push(close);
        }
    }
}

/// A content table and its FTS5 index (both columns named `text`).
#[derive(Debug)]
pub(crate) struct FtsIndex {
    pub table: &'static str,
    pub fts_table: &'static str,
    pub id_column: &'static str,
}

pub(crate) const MESSAGES: FtsIndex = FtsIndex {
    table: "host_messages",
    fts_table: "host_messages_fts",
    id_column: "message_id",
};

pub(crate) const NOTES: FtsIndex = FtsIndex {
    table: "host_notes",
    fts_table: "host_notes_fts",
    id_column: "note_id",
};

/// An FTS5 string literal: everything inside is text, a `"` is written `""`.
fn fts_literal(term: &str) -> String {
    format!("\"{}\"", term.replace('"', "\"\""))
}

/// `%term%` with LIKE's wildcards and the escape character escaped (`ESCAPE '\'`).
fn like_pattern(term: &str) -> String {
    let mut pattern = String::with_capacity(term.len() + 2);
    pattern.push('%');
    for c in term.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_terms_become_quoted_fts_literals_and_short_ones_like_patterns() {
        let query = TextQuery::parse("数据库迁移 据库 say \"hi\" NEAR( a_b%");
        assert_eq!(
            query.fts.as_deref(),
            Some(r#""数据库迁移" OR "say" OR """hi""" OR "NEAR(" OR "a_b%""#)
        );
        assert_eq!(query.likes, vec!["%据库%".to_owned()]);
        assert_eq!(like_pattern(r"5%_\"), r"%5\%\_\\%");
        assert!(TextQuery::parse("  ，、 ").is_empty());
    }
}
