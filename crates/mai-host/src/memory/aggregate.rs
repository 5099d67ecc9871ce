//! The `aggregate` mode: counts of the matches per person and per day, not the messages.

use crate::sql::Connection;
use mai_core::host::{HostError, MemoryQuery};
use serde_json::{Value, json};

use crate::sql::Query;

use super::matches::push_filtered_messages;
use super::{ACTION, Scope, time_text};
use crate::error::db;
use crate::streams::sql_limit;
use crate::text_query::TextQuery;

/// Joins that name each message's person (the bot's messages have none).
const PERSON_JOINS: &str = " LEFT JOIN host_accounts a ON NOT m.is_bot \
     AND a.platform = s.platform AND a.user_id = m.user_id \
     LEFT JOIN host_persons p ON p.person_id = a.person_id";

pub(crate) fn aggregate(
    conn: &Connection,
    query: &MemoryQuery,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
) -> Result<Value, HostError> {
    let mut qb = Query::new("SELECT COUNT(*), MIN(m.at), MAX(m.at)");
    push_filtered_messages(&mut qb, text, scope, "");
    let (total, first, last): (i64, Option<i64>, Option<i64>) = qb.one(conn).map_err(db(ACTION))?;

    let mut qb = Query::new(
        "SELECT MIN(CASE WHEN m.is_bot THEN m.sender_name \
         ELSE COALESCE(p.name, m.sender_name) END) AS who, m.is_bot, COUNT(*) AS n",
    );
    push_filtered_messages(&mut qb, text, scope, PERSON_JOINS);
    qb.push(
        " GROUP BY m.is_bot, p.person_id, \
         CASE WHEN p.person_id IS NULL AND NOT m.is_bot THEN s.platform || ':' || m.user_id END \
         ORDER BY n DESC, who LIMIT ",
    );
    qb.push_bind(sql_limit(limit));
    let people: Vec<(String, bool, i64)> = qb.all(conn).map_err(db(ACTION))?;

    let mut qb = Query::new(format_args!(
        "SELECT {} AS day, COUNT(*) AS n",
        conn.dialect().day_of_millis("m.at")
    ));
    push_filtered_messages(&mut qb, text, scope, "");
    qb.push(" GROUP BY day ORDER BY day DESC LIMIT ");
    qb.push_bind(sql_limit(limit));
    let mut days: Vec<(String, i64)> = qb.all(conn).map_err(db(ACTION))?;
    days.reverse();

    Ok(json!({
        "mode": "aggregate",
        "query": query.query,
        "total": total,
        "first_at": first.map(time_text).transpose()?,
        "last_at": last.map(time_text).transpose()?,
        "by_person": people
            .into_iter()
            .map(|(name, is_bot, count)| json!({"name": name, "count": count, "is_bot": is_bot}))
            .collect::<Vec<_>>(),
        "by_day": days
            .into_iter()
            .map(|(day, count)| json!({"day": day, "count": count}))
            .collect::<Vec<_>>(),
    }))
}
