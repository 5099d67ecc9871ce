//! [`Query`]: an SQL text and its bound values, built up piece by piece and run on a
//! connection the caller holds (a reader's, or the writer's inside its transaction). Values
//! are always bound parameters, never SQL text. Must not: know any table.

use std::fmt::Display;

use rusqlite::types::{FromSql, ToSqlOutput, Value};
use rusqlite::{Connection, OptionalExtension, Row, ToSql, params_from_iter};

/// SQL and its parameters, in order.
#[derive(Debug, Default)]
pub(crate) struct Query {
    sql: String,
    values: Vec<Value>,
    /// A value that could not be bound; reported when the query runs.
    unbindable: Option<rusqlite::Error>,
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
    pub(crate) fn push_bind(&mut self, value: impl ToSql) -> &mut Self {
        self.sql.push('?');
        self.add(&value);
        self
    }

    /// Binds the next `?` (or `?N`) already in the text.
    #[must_use]
    pub(crate) fn bind(mut self, value: impl ToSql) -> Self {
        self.add(&value);
        self
    }

    fn add(&mut self, value: &dyn ToSql) {
        let owned = match value.to_sql() {
            Ok(ToSqlOutput::Borrowed(value)) => Value::try_from(value)
                .map_err(|error| rusqlite::Error::ToSqlConversionFailure(Box::new(error))),
            Ok(ToSqlOutput::Owned(value)) => Ok(value),
            Ok(_) => Ok(Value::Null),
            Err(error) => Err(error),
        };
        match owned {
            Ok(value) => self.values.push(value),
            Err(error) => {
                self.values.push(Value::Null);
                self.unbindable.get_or_insert(error);
            }
        }
    }

    fn checked(&self) -> rusqlite::Result<()> {
        match &self.unbindable {
            Some(error) => Err(rusqlite::Error::ToSqlConversionFailure(
                error.to_string().into(),
            )),
            None => Ok(()),
        }
    }

    /// Every row, each as a tuple of column values.
    pub(crate) fn all<T>(&self, conn: &Connection) -> rusqlite::Result<Vec<T>>
    where
        T: for<'r> TryFrom<&'r Row<'r>, Error = rusqlite::Error>,
    {
        self.checked()?;
        let mut statement = conn.prepare_cached(&self.sql)?;
        let rows = statement.query_map(params_from_iter(&self.values), |row| T::try_from(row))?;
        rows.collect()
    }

    /// The first row, if any.
    pub(crate) fn optional<T>(&self, conn: &Connection) -> rusqlite::Result<Option<T>>
    where
        T: for<'r> TryFrom<&'r Row<'r>, Error = rusqlite::Error>,
    {
        self.checked()?;
        let mut statement = conn.prepare_cached(&self.sql)?;
        statement
            .query_row(params_from_iter(&self.values), |row| T::try_from(row))
            .optional()
    }

    /// The one row the query returns.
    pub(crate) fn one<T>(&self, conn: &Connection) -> rusqlite::Result<T>
    where
        T: for<'r> TryFrom<&'r Row<'r>, Error = rusqlite::Error>,
    {
        self.checked()?;
        let mut statement = conn.prepare_cached(&self.sql)?;
        statement.query_row(params_from_iter(&self.values), |row| T::try_from(row))
    }

    /// The first column of the one row the query returns.
    pub(crate) fn scalar<T: FromSql>(&self, conn: &Connection) -> rusqlite::Result<T> {
        self.one::<(T,)>(conn).map(|(value,)| value)
    }

    /// The first column of the first row, if any.
    pub(crate) fn scalar_optional<T: FromSql>(
        &self,
        conn: &Connection,
    ) -> rusqlite::Result<Option<T>> {
        Ok(self.optional::<(T,)>(conn)?.map(|(value,)| value))
    }

    /// The first column of every row.
    pub(crate) fn scalar_all<T: FromSql>(&self, conn: &Connection) -> rusqlite::Result<Vec<T>> {
        Ok(self
            .all::<(T,)>(conn)?
            .into_iter()
            .map(|(value,)| value)
            .collect())
    }

    /// Runs a statement that returns no rows; the number of rows it changed.
    pub(crate) fn execute(&self, conn: &Connection) -> rusqlite::Result<usize> {
        self.checked()?;
        let mut statement = conn.prepare_cached(&self.sql)?;
        statement.execute(params_from_iter(&self.values))
    }
}
