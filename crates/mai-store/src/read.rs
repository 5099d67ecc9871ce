//! The read queries: one task, a person's reference to a task, filtered lists, history.
//!
//! Every task read uses the same projection: the row plus its status log aggregated into one
//! JSON column, so a list of N tasks is one statement, not N+1.

use mai_core::store::{CountQuery, HistoryEntry, Resolved, StoreError, TaskCounts, TaskFilter};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use sqlx::{QueryBuilder, Sqlite};
use uuid::Uuid;

use crate::codec::{decode_history, decode_task, id_key, level_text, parse_id_key};
use crate::error::{corrupt, db};
use crate::sqlite::SqliteStore;

/// At most this many ids come back in [`Resolved::Ambiguous`]: enough for "which one?".
pub const AMBIGUOUS_LIMIT: usize = 20;

/// The shortest id prefix taken as an id rather than as a title.
const MIN_PREFIX_LEN: usize = 4;

macro_rules! select_tasks {
    ($($rest:literal),*) => {
        concat!(
            "SELECT t.id, t.status, t.record, \
             (SELECT json_group_array(json_array(l.at, l.status, l.actor, l.reason) \
              ORDER BY l.seq) FROM task_status_log l WHERE l.task_id = t.id) \
             FROM tasks t",
            $($rest),*
        )
    };
}

type TaskColumns = (String, String, String, String);

fn decode_all(rows: Vec<TaskColumns>) -> Result<Vec<TaskRecord>, StoreError> {
    rows.iter()
        .map(|(key, status, record, log)| decode_task(key, status, record, log))
        .collect()
}

/// The id keys starting with `hex` (lowercase hex digits): the half-open key range
/// [`hex`, `hex` + "g"), since every key character is below `g`.
fn prefix_range(hex: &str) -> (String, String) {
    (hex.to_owned(), format!("{hex}g"))
}

/// `reference` as an id prefix: hex digits with optional dashes, at least
/// [`MIN_PREFIX_LEN`] digits, at most a whole id.
fn as_id_prefix(reference: &str) -> Option<String> {
    let hex: String = reference
        .chars()
        .filter(|c| *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let plausible =
        (MIN_PREFIX_LEN..=32).contains(&hex.len()) && hex.chars().all(|c| c.is_ascii_hexdigit());
    plausible.then_some(hex)
}

impl SqliteStore {
    pub(crate) async fn get_task(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        const DOING: &str = "reading a task";
        let row: Option<TaskColumns> = sqlx::query_as(select_tasks!(" WHERE t.id = ?"))
            .bind(id_key(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(db(DOING))?;
        row.map(|(key, status, record, log)| decode_task(&key, &status, &record, &log))
            .transpose()
    }

    /// A full id, then a unique id prefix, then a unique exact title. An id prefix that
    /// matches nothing is tried as a title (titles can look like hex).
    pub(crate) async fn resolve_reference(&self, reference: &str) -> Result<Resolved, StoreError> {
        const DOING: &str = "resolving a task reference";
        let reference = reference.trim();
        if let Ok(uuid) = Uuid::try_parse(reference)
            && let Some(task) = self.get_task(TaskId(uuid)).await?
        {
            return Ok(Resolved::Found(Box::new(task)));
        }
        if let Some(hex) = as_id_prefix(reference) {
            let (from, to) = prefix_range(&hex);
            let keys: Vec<String> = sqlx::query_scalar(
                "SELECT id FROM tasks WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            )
            .bind(from)
            .bind(to)
            .bind(ambiguity_probe())
            .fetch_all(&self.pool)
            .await
            .map_err(db(DOING))?;
            if !keys.is_empty() {
                return self.one_or_ambiguous(keys).await;
            }
        }
        if reference.is_empty() {
            return Ok(Resolved::NotFound);
        }
        let keys: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM tasks WHERE title = ? ORDER BY created_at, id LIMIT ?",
        )
        .bind(reference)
        .bind(ambiguity_probe())
        .fetch_all(&self.pool)
        .await
        .map_err(db(DOING))?;
        self.one_or_ambiguous(keys).await
    }

    async fn one_or_ambiguous(&self, keys: Vec<String>) -> Result<Resolved, StoreError> {
        let ids = keys
            .iter()
            .map(|key| parse_id_key(key).ok_or_else(|| corrupt(key, "the id is not a uuid")))
            .collect::<Result<Vec<_>, _>>()?;
        match ids.as_slice() {
            [] => Ok(Resolved::NotFound),
            [id] => Ok(match self.get_task(*id).await? {
                Some(task) => Resolved::Found(Box::new(task)),
                None => Resolved::NotFound,
            }),
            _ => Ok(Resolved::Ambiguous(
                ids.into_iter().take(AMBIGUOUS_LIMIT).collect(),
            )),
        }
    }

    pub(crate) async fn list_tasks(
        &self,
        filter: &TaskFilter,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let mut query = QueryBuilder::<Sqlite>::new(select_tasks!(" WHERE 1 = 1"));
        if let Some(owner) = &filter.owner {
            query.push(" AND t.owner = ").push_bind(owner.to_string());
        }
        if let Some(requester) = &filter.requester {
            query
                .push(" AND t.requester = ")
                .push_bind(requester.to_string());
        }
        if let Some(stream) = &filter.stream_id {
            query
                .push(" AND t.stream_id = ")
                .push_bind(stream.as_str().to_owned());
        }
        if let Some(level) = filter.level {
            query.push(" AND t.level = ").push_bind(level_text(level));
        }
        push_status_filter(&mut query, &filter.statuses);
        query.push(" ORDER BY t.created_at DESC, t.id DESC");
        if let Some(limit) = filter.limit {
            query.push(" LIMIT ").push_bind(i64::from(limit));
        }
        let rows: Vec<TaskColumns> = query
            .build_query_as()
            .fetch_all(&self.pool)
            .await
            .map_err(db("listing tasks"))?;
        decode_all(rows)
    }

    /// The figures of the caps on task creation, in one statement (each figure an index
    /// lookup: the partial indexes of unfinished tasks per requester and per stream, and the
    /// index of sub-tasks by the task that made them).
    pub(crate) async fn count_tasks(
        &self,
        query: &CountQuery<'_>,
    ) -> Result<TaskCounts, StoreError> {
        macro_rules! unfinished {
            () => {
                "status IN ('scheduled', 'pending', 'running', 'waiting_input', 'paused')"
            };
        }
        macro_rules! cron {
            () => {
                "json_extract(record, '$.trigger.kind') = 'cron'"
            };
        }
        const SQL: &str = concat!(
            "SELECT (SELECT count(*) FROM tasks WHERE requester = ? AND ",
            unfinished!(),
            "), (SELECT count(*) FROM tasks WHERE stream_id = ? AND ",
            unfinished!(),
            "), (SELECT count(*) FROM tasks WHERE requester = ? AND ",
            unfinished!(),
            " AND ",
            cron!(),
            "), (SELECT count(*) FROM tasks WHERE stream_id = ? AND ",
            unfinished!(),
            " AND ",
            cron!(),
            "), (SELECT count(*) FROM tasks WHERE created_by = ?)"
        );
        let requester = query.requester.map(ToString::to_string);
        let stream = query.stream.as_str();
        let created_by = query.created_by.map(id_key);
        let (a, b, c, d, e): (i64, i64, i64, i64, i64) = sqlx::query_as(SQL)
            .bind(&requester)
            .bind(stream)
            .bind(&requester)
            .bind(stream)
            .bind(&created_by)
            .fetch_one(&self.pool)
            .await
            .map_err(db("counting tasks"))?;
        let figure = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(TaskCounts {
            unfinished_by_requester: figure(a),
            unfinished_in_stream: figure(b),
            recurring_by_requester: figure(c),
            recurring_in_stream: figure(d),
            children: figure(e),
        })
    }

    pub(crate) async fn list_active_tasks(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let active: Vec<TaskStatus> = TaskStatus::ALL
            .into_iter()
            .filter(|status| !status.is_terminal())
            .collect();
        let mut query = QueryBuilder::<Sqlite>::new(select_tasks!(" WHERE 1 = 1"));
        push_status_filter(&mut query, &active);
        query.push(" ORDER BY t.created_at, t.id");
        let rows: Vec<TaskColumns> = query
            .build_query_as()
            .fetch_all(&self.pool)
            .await
            .map_err(db("listing active tasks"))?;
        decode_all(rows)
    }

    /// The history of `id` from `from_seq` on; empty for a task that does not exist.
    pub(crate) async fn read_history(
        &self,
        id: TaskId,
        from_seq: u64,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let Ok(from_seq) = i64::try_from(from_seq) else {
            return Ok(Vec::new());
        };
        let rows: Vec<(i64, i64, String, String, String)> = sqlx::query_as(
            "SELECT seq, round, kind, payload, at FROM task_history \
             WHERE task_id = ? AND seq >= ? ORDER BY seq",
        )
        .bind(id_key(id))
        .bind(from_seq)
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading task history"))?;
        rows.iter()
            .map(|(seq, round, kind, payload, at)| {
                decode_history(id, *seq, *round, kind, payload, at)
            })
            .collect()
    }
}

/// One more than [`AMBIGUOUS_LIMIT`] is enough to know a reference is ambiguous.
fn ambiguity_probe() -> i64 {
    i64::try_from(AMBIGUOUS_LIMIT + 1).unwrap_or(i64::MAX)
}

fn push_status_filter(query: &mut QueryBuilder<Sqlite>, statuses: &[TaskStatus]) {
    if statuses.is_empty() {
        return;
    }
    query.push(" AND t.status IN (");
    let mut list = query.separated(", ");
    for status in statuses {
        list.push_bind(status.as_str());
    }
    list.push_unseparated(")");
}
