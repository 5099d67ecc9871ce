//! The host's queries on PostgreSQL: [`PgSql`], the [`Sql`] connection the host's modules run on
//! when the tables are in PostgreSQL, and [`run`], which runs one host operation in one
//! transaction on a pooled connection.
//!
//! The host's modules are synchronous (on SQLite they run on the database's own threads), so on
//! PostgreSQL an operation runs on the blocking pool, each statement awaited there with the
//! runtime's handle. `?` and `?N` placeholders become `$N`. Must not: know any table.

use std::sync::Mutex;

use mai_store::sqlx::postgres::{PgArguments, PgRow};
use mai_store::sqlx::{self, Column, PgConnection, PgPool, Postgres, Row, Transaction, TypeInfo};
use tokio::runtime::Handle;

use crate::sql::{Dialect, Sql, SqlError, Value};

/// One pooled connection inside an open transaction, for the host's synchronous modules.
pub(crate) struct PgSql {
    handle: Handle,
    transaction: Mutex<Transaction<'static, Postgres>>,
}

/// Runs `job` in one transaction (committed when it returns `Ok` and `commit` is set, else
/// rolled back); `Err` when the database could not run it at all.
pub(crate) async fn run<T, E, F>(
    pool: &PgPool,
    commit: bool,
    job: F,
) -> Result<Result<T, E>, SqlError>
where
    F: FnOnce(&PgSql) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let (pool, handle) = (pool.clone(), Handle::current());
    tokio::task::spawn_blocking(move || {
        let transaction = handle.block_on(pool.begin()).map_err(SqlError::new)?;
        let sql = PgSql {
            handle: handle.clone(),
            transaction: Mutex::new(transaction),
        };
        let outcome = job(&sql);
        let transaction = sql
            .transaction
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ended = if commit && outcome.is_ok() {
            handle.block_on(transaction.commit())
        } else {
            handle.block_on(transaction.rollback())
        };
        ended.map_err(SqlError::new)?;
        Ok(outcome)
    })
    .await
    .map_err(SqlError::new)?
}

/// `sql` with `?` / `?N` placeholders numbered `$N` as SQLite numbers them (a bare `?` takes
/// the number after the largest so far); quoted text is left alone.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let (mut largest, mut quoted) = (0_usize, false);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c != '?' || quoted {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let number = digits.parse().unwrap_or(largest + 1);
        largest = largest.max(number);
        out.push('$');
        out.push_str(&number.to_string());
    }
    out
}

fn bound<'q>(sql: &'q str, values: &[Value]) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for value in values {
        query = match value {
            Value::Null => query.bind(None::<String>),
            Value::Integer(n) => query.bind(*n),
            Value::Real(x) => query.bind(*x),
            Value::Text(text) => query.bind(text.clone()),
            Value::Bool(b) => query.bind(*b),
            Value::TextArray(texts) => query.bind(texts.clone()),
        };
    }
    query
}

/// A column of a row as a [`Value`], by its PostgreSQL type.
fn column_value(row: &PgRow, index: usize) -> Result<Value, SqlError> {
    let kind = row.column(index).type_info().name().to_owned();
    let value = match kind.as_str() {
        "INT8" => row
            .try_get::<Option<i64>, _>(index)
            .map(|v| v.map(Value::Integer)),
        "INT4" => row
            .try_get::<Option<i32>, _>(index)
            .map(|v| v.map(|n| Value::Integer(n.into()))),
        "INT2" => row
            .try_get::<Option<i16>, _>(index)
            .map(|v| v.map(|n| Value::Integer(n.into()))),
        "FLOAT8" => row
            .try_get::<Option<f64>, _>(index)
            .map(|v| v.map(Value::Real)),
        "FLOAT4" => row
            .try_get::<Option<f32>, _>(index)
            .map(|v| v.map(|x| Value::Real(x.into()))),
        "BOOL" => row
            .try_get::<Option<bool>, _>(index)
            .map(|v| v.map(Value::Bool)),
        "TEXT[]" => row
            .try_get::<Option<Vec<String>>, _>(index)
            .map(|v| v.map(Value::TextArray)),
        _ => row
            .try_get::<Option<String>, _>(index)
            .map(|v| v.map(Value::Text)),
    };
    value
        .map(|value| value.unwrap_or(Value::Null))
        .map_err(|error| SqlError::new(format!("column {index} ({kind}): {error}")))
}

impl Sql for PgSql {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn rows(&self, sql: &str, values: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
        let sql = numbered(sql);
        let mut transaction = self
            .transaction
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let connection: &mut PgConnection = &mut transaction;
        let rows = self
            .handle
            .block_on(bound(&sql, values).fetch_all(connection))
            .map_err(SqlError::new)?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|index| column_value(row, index))
                    .collect()
            })
            .collect()
    }

    fn execute(&self, sql: &str, values: &[Value]) -> Result<usize, SqlError> {
        let sql = numbered(sql);
        let mut transaction = self
            .transaction
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let connection: &mut PgConnection = &mut transaction;
        let done = self
            .handle
            .block_on(bound(&sql, values).execute(connection))
            .map_err(SqlError::new)?;
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn placeholders_are_numbered_as_sqlite_numbers_them_and_quotes_are_left_alone() {
        assert_eq!(
            numbered("a = ? AND b = ?2 AND c = ? AND d LIKE '?' AND e = ?1"),
            "a = $1 AND b = $2 AND c = $3 AND d LIKE '?' AND e = $1"
        );
    }
}
