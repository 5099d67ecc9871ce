//! [`Query`]: an SQL text and its bound values, built up piece by piece and run on a
//! [`Connection`] the caller holds (a reader's, or the writer's inside its transaction), and the
//! [`Sql`] seam that lets the same queries run on SQLite or PostgreSQL. Values are always bound
//! parameters, never SQL text; rows come back as plain [`Value`]s and are decoded into tuples.
//!
//! Queries are written with `?` (or `?N`) placeholders and in the SQL both databases accept;
//! where they differ, [`Dialect`] gives the piece for the connection at hand. Must not: know
//! any table.

use std::fmt::Display;

/// A bound value, or a column value read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Bool(bool),
    /// A text array (PostgreSQL only: the n-grams of the full-text search).
    TextArray(Vec<String>),
}

/// Which SQL a connection speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Dialect {
    #[default]
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The larger of two values (`MAX(a, b)` on SQLite, `GREATEST(a, b)` on PostgreSQL).
    pub(crate) fn greatest(self) -> &'static str {
        match self {
            Dialect::Sqlite => "MAX",
            Dialect::Postgres => "GREATEST",
        }
    }

    /// Where a text starts in another (1-based, 0 when absent): `(haystack, needle)`.
    pub(crate) fn position(self) -> &'static str {
        match self {
            Dialect::Sqlite => "instr",
            Dialect::Postgres => "strpos",
        }
    }

    /// The UTC day (`YYYY-MM-DD`) of a time in milliseconds since the epoch.
    pub(crate) fn day_of_millis(self, column: &str) -> String {
        match self {
            Dialect::Sqlite => format!("date({column} / 1000, 'unixepoch')"),
            Dialect::Postgres => {
                format!("to_char(to_timestamp({column} / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')")
            }
        }
    }
}

/// A query failed: the database's own error, or a value that did not decode.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SqlError(Box<dyn std::error::Error + Send + Sync>);

impl SqlError {
    pub(crate) fn new(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        SqlError(source.into())
    }
}

/// A connection the host's queries run on (inside whatever transaction its owner opened).
pub(crate) trait Sql {
    fn dialect(&self) -> Dialect;
    /// Every row of `sql` (`?`/`?N` placeholders) with `values` bound.
    fn rows(&self, sql: &str, values: &[Value]) -> Result<Vec<Vec<Value>>, SqlError>;
    /// Runs a statement that returns no rows; how many rows it changed.
    fn execute(&self, sql: &str, values: &[Value]) -> Result<usize, SqlError>;
}

/// What the host's modules hold while they run: a connection of either database.
pub(crate) type Connection = dyn Sql;

impl Sql for rusqlite::Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn rows(&self, sql: &str, values: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
        let mut statement = self.prepare_cached(sql).map_err(SqlError::new)?;
        let columns = statement.column_count();
        let bound = values.iter().map(to_sqlite);
        let mut rows = statement
            .query(rusqlite::params_from_iter(bound))
            .map_err(SqlError::new)?;
        let mut all = Vec::new();
        while let Some(row) = rows.next().map_err(SqlError::new)? {
            let mut values = Vec::with_capacity(columns);
            for column in 0..columns {
                let value: rusqlite::types::Value = row.get(column).map_err(SqlError::new)?;
                values.push(from_sqlite(value));
            }
            all.push(values);
        }
        Ok(all)
    }

    fn execute(&self, sql: &str, values: &[Value]) -> Result<usize, SqlError> {
        let mut statement = self.prepare_cached(sql).map_err(SqlError::new)?;
        statement
            .execute(rusqlite::params_from_iter(values.iter().map(to_sqlite)))
            .map_err(SqlError::new)
    }
}

fn to_sqlite(value: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as V;
    match value {
        Value::Null | Value::TextArray(_) => V::Null,
        Value::Integer(n) => V::Integer(*n),
        Value::Real(x) => V::Real(*x),
        Value::Text(text) => V::Text(text.clone()),
        Value::Bool(b) => V::Integer(i64::from(*b)),
    }
}

fn from_sqlite(value: rusqlite::types::Value) -> Value {
    use rusqlite::types::Value as V;
    match value {
        V::Null => Value::Null,
        V::Integer(n) => Value::Integer(n),
        V::Real(x) => Value::Real(x),
        V::Text(text) => Value::Text(text),
        V::Blob(bytes) => Value::Text(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

/// A Rust value that binds as a [`Value`].
pub(crate) trait ToValue {
    fn to_value(&self) -> Value;
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl ToValue for i64 {
    fn to_value(&self) -> Value {
        Value::Integer(*self)
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
}

impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

impl ToValue for Vec<String> {
    fn to_value(&self) -> Value {
        Value::TextArray(self.clone())
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

/// A Rust value a column decodes into.
pub(crate) trait FromValue: Sized {
    fn from_value(value: Value) -> Result<Self, SqlError>;
}

fn mismatch(wanted: &str, value: &Value) -> SqlError {
    SqlError::new(format!(
        "a column holds {value:?} where {wanted} was expected"
    ))
}

impl FromValue for i64 {
    fn from_value(value: Value) -> Result<Self, SqlError> {
        match value {
            Value::Integer(n) => Ok(n),
            Value::Bool(b) => Ok(i64::from(b)),
            other => Err(mismatch("an integer", &other)),
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: Value) -> Result<Self, SqlError> {
        match value {
            Value::Real(x) => Ok(x),
            #[allow(clippy::cast_precision_loss)] // stored figures are far below 2^52
            Value::Integer(n) => Ok(n as f64),
            other => Err(mismatch("a number", &other)),
        }
    }
}

impl FromValue for bool {
    fn from_value(value: Value) -> Result<Self, SqlError> {
        match value {
            Value::Bool(b) => Ok(b),
            Value::Integer(n) => Ok(n != 0),
            other => Err(mismatch("a boolean", &other)),
        }
    }
}

impl FromValue for String {
    fn from_value(value: Value) -> Result<Self, SqlError> {
        match value {
            Value::Text(text) => Ok(text),
            other => Err(mismatch("a text", &other)),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: Value) -> Result<Self, SqlError> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// A row decoded into a tuple of [`FromValue`]s.
pub(crate) trait FromRow: Sized {
    fn from_row(row: Vec<Value>) -> Result<Self, SqlError>;
}

macro_rules! tuple_from_row {
    ($($name:ident),+) => {
        impl<$($name: FromValue),+> FromRow for ($($name,)+) {
            fn from_row(row: Vec<Value>) -> Result<Self, SqlError> {
                let mut columns = row.into_iter();
                Ok(($(
                    $name::from_value(columns.next().ok_or_else(|| {
                        SqlError::new("a row has fewer columns than the query reads")
                    })?)?,
                )+))
            }
        }
    };
}

tuple_from_row!(A);
tuple_from_row!(A, B);
tuple_from_row!(A, B, C);
tuple_from_row!(A, B, C, D);
tuple_from_row!(A, B, C, D, E);
tuple_from_row!(A, B, C, D, E, F);
tuple_from_row!(A, B, C, D, E, F, G);
tuple_from_row!(A, B, C, D, E, F, G, H);

/// SQL and its parameters, in order.
#[derive(Debug, Default)]
pub(crate) struct Query {
    sql: String,
    values: Vec<Value>,
}

impl Query {
    pub(crate) fn new(sql: impl Display) -> Self {
        Query {
            sql: sql.to_string(),
            ..Query::default()
        }
    }

    /// Appends SQL text.
    pub(crate) fn push(&mut self, sql: impl Display) -> &mut Self {
        use std::fmt::Write as _;
        let _ = write!(self.sql, "{sql}");
        self
    }

    /// Appends a `?` bound to `value`.
    pub(crate) fn push_bind(&mut self, value: impl ToValue) -> &mut Self {
        self.sql.push('?');
        self.values.push(value.to_value());
        self
    }

    /// Binds the next `?` (or `?N`) already in the text.
    #[must_use]
    pub(crate) fn bind(mut self, value: impl ToValue) -> Self {
        self.values.push(value.to_value());
        self
    }

    /// Every row, each as a tuple of column values.
    pub(crate) fn all<T: FromRow>(&self, conn: &Connection) -> Result<Vec<T>, SqlError> {
        conn.rows(&self.sql, &self.values)?
            .into_iter()
            .map(T::from_row)
            .collect()
    }

    /// The first row, if any.
    pub(crate) fn optional<T: FromRow>(&self, conn: &Connection) -> Result<Option<T>, SqlError> {
        conn.rows(&self.sql, &self.values)?
            .into_iter()
            .next()
            .map(T::from_row)
            .transpose()
    }

    /// The one row the query returns.
    pub(crate) fn one<T: FromRow>(&self, conn: &Connection) -> Result<T, SqlError> {
        self.optional(conn)?
            .ok_or_else(|| SqlError::new("the query returned no row"))
    }

    /// The first column of the one row the query returns.
    pub(crate) fn scalar<T: FromValue>(&self, conn: &Connection) -> Result<T, SqlError> {
        self.one::<(T,)>(conn).map(|(value,)| value)
    }

    /// The first column of the first row, if any.
    pub(crate) fn scalar_optional<T: FromValue>(
        &self,
        conn: &Connection,
    ) -> Result<Option<T>, SqlError> {
        Ok(self.optional::<(T,)>(conn)?.map(|(value,)| value))
    }

    /// The first column of every row.
    pub(crate) fn scalar_all<T: FromValue>(&self, conn: &Connection) -> Result<Vec<T>, SqlError> {
        Ok(self
            .all::<(T,)>(conn)?
            .into_iter()
            .map(|(value,)| value)
            .collect())
    }

    /// Runs a query for its effect, ignoring the rows it returns.
    pub(crate) fn rows_only(&self, conn: &Connection) -> Result<(), SqlError> {
        conn.rows(&self.sql, &self.values).map(drop)
    }

    /// Runs a statement that returns no rows; the number of rows it changed.
    pub(crate) fn execute(&self, conn: &Connection) -> Result<usize, SqlError> {
        conn.execute(&self.sql, &self.values)
    }
}
