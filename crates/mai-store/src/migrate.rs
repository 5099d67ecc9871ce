//! Migrations: a component's SQL scripts (embedded at build time) and the table that records
//! which of them ran, so several components keep tables in one file, each with its own
//! version.
//!
//! The record table has the layout sqlx's migrator uses (version, description, installed_on,
//! success, SHA-384 checksum, execution_time), so files migrated by earlier builds open as they
//! are. A file whose version is newer than this build knows is refused before anything touches
//! it: an older binary must not write a schema it does not understand. A script whose checksum
//! differs from the one recorded is refused too (the file was made by another build's script).

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha384};

use crate::writer::WriteError;

/// One script.
#[derive(Debug)]
pub struct Migration {
    pub version: i64,
    pub description: &'static str,
    pub sql: &'static str,
}

/// A component's scripts, in version order, and the table recording them.
#[derive(Debug)]
pub struct Migrations {
    /// The record table (a plain identifier).
    pub table: &'static str,
    pub scripts: &'static [Migration],
}

/// Migrating failed; nothing of the failed script is kept.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "the database has schema version {found}, newer than the newest this build of mai-agent \
         knows ({known}): it was written by a newer mai-agent; upgrade mai-agent or use another \
         database file"
    )]
    TooNew { found: i64, known: i64 },
    #[error(
        "migration {version} recorded in the database differs from this build's script (another \
         build made the file, or the script was edited after it ran): use the build that made \
         the file"
    )]
    Changed { version: i64 },
    #[error("migration {version} did not finish in an earlier run: restore the file from a backup")]
    Dirty { version: i64 },
    #[error("{doing}: {source}")]
    Database {
        doing: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{doing}: {source}")]
    Postgres {
        doing: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("migrating the database: {0}")]
    Write(#[source] WriteError),
    #[error("the database is closed; reopen it")]
    Closed,
}

fn db(doing: &'static str) -> impl FnOnce(rusqlite::Error) -> MigrateError {
    move |source| MigrateError::Database { doing, source }
}

impl Migrations {
    /// The newest version this build has.
    pub fn latest_version(&self) -> i64 {
        self.scripts
            .iter()
            .map(|script| script.version)
            .max()
            .unwrap_or(0)
    }

    /// The highest version recorded as applied; 0 when the table does not exist.
    pub fn recorded_version(&self, connection: &Connection) -> Result<i64, MigrateError> {
        const DOING: &str = "reading the schema version";
        if !self.has_table(connection).map_err(db(DOING))? {
            return Ok(0);
        }
        let sql = format!(
            "SELECT COALESCE(MAX(version), 0) FROM {} WHERE success = 1",
            self.table
        );
        connection
            .query_row(&sql, [], |row| row.get(0))
            .map_err(db(DOING))
    }

    fn has_table(&self, connection: &Connection) -> Result<bool, rusqlite::Error> {
        connection.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)",
            [self.table],
            |row| row.get(0),
        )
    }

    /// Refuses a newer, changed or dirty schema, then runs the scripts not yet recorded (the
    /// caller holds the write transaction: all of them or none).
    pub(crate) fn apply(&self, connection: &Connection) -> Result<(), MigrateError> {
        const DOING: &str = "checking the schema version";
        let table = self.table;
        if self.has_table(connection).map_err(db(DOING))? {
            let found: i64 = connection
                .query_row(
                    &format!("SELECT COALESCE(MAX(version), 0) FROM {table}"),
                    [],
                    |row| row.get(0),
                )
                .map_err(db(DOING))?;
            let known = self.latest_version();
            if found > known {
                return Err(MigrateError::TooNew { found, known });
            }
        }
        connection
            .execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (version BIGINT PRIMARY KEY, \
                 description TEXT NOT NULL, installed_on TIMESTAMP NOT NULL DEFAULT \
                 CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, checksum BLOB NOT NULL, \
                 execution_time BIGINT NOT NULL)"
            ))
            .map_err(db("creating the migrations table"))?;
        for script in self.scripts {
            self.apply_one(connection, script)?;
        }
        Ok(())
    }

    fn apply_one(&self, connection: &Connection, script: &Migration) -> Result<(), MigrateError> {
        let table = self.table;
        let checksum = Sha384::digest(script.sql.as_bytes()).to_vec();
        let recorded: Option<(bool, Vec<u8>)> = connection
            .query_row(
                &format!("SELECT success, checksum FROM {table} WHERE version = ?"),
                [script.version],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(db("reading the applied migrations"))?;
        match recorded {
            Some((false, _)) => Err(MigrateError::Dirty {
                version: script.version,
            }),
            Some((true, stored)) if stored != checksum => Err(MigrateError::Changed {
                version: script.version,
            }),
            Some(_) => Ok(()),
            None => {
                let started = std::time::Instant::now();
                connection
                    .execute_batch(script.sql)
                    .map_err(db("applying a schema migration"))?;
                let nanos = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
                connection
                    .execute(
                        &format!(
                            "INSERT INTO {table} (version, description, success, checksum, \
                             execution_time) VALUES (?, ?, TRUE, ?, ?)"
                        ),
                        params![script.version, script.description, checksum, nanos],
                    )
                    .map_err(db("recording a schema migration"))?;
                Ok(())
            }
        }
    }
}
