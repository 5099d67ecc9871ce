//! The host's schema (`migrations/`, embedded at build time) and how values are stored.
//!
//! Migrations are recorded in `_mai_host_migrations`, apart from the task store's
//! `_sqlx_migrations`, so both can live in one database file without either seeing the other's
//! versions as unknown. Times are stored as INTEGER milliseconds since the epoch (UTC).

use chrono::{DateTime, Utc};
use mai_store::{Migration, Migrations};

/// The host tables' scripts.
pub(crate) static HOST: Migrations = Migrations {
    table: "_mai_host_migrations",
    scripts: &[
        Migration {
            version: 1,
            description: "host",
            sql: include_str!("../migrations/0001_host.sql"),
        },
        Migration {
            version: 2,
            description: "members",
            sql: include_str!("../migrations/0002_members.sql"),
        },
    ],
};

/// The host tables' PostgreSQL scripts (their own version line: version 1 has the tables of
/// the SQLite schema's version 2, with trigram arrays for the full-text search; version 2 adds
/// the platform message ids taken in, shared by instances; version 3 the MaiBot bridge requests
/// routed between instances and who holds a bridge).
pub(crate) static HOST_POSTGRES: Migrations = Migrations {
    table: "_mai_host_migrations",
    scripts: &[
        Migration {
            version: 1,
            description: "host",
            sql: include_str!("../migrations/postgres/0001_host.sql"),
        },
        Migration {
            version: 2,
            description: "inbound seen",
            sql: include_str!("../migrations/postgres/0002_inbound.sql"),
        },
        Migration {
            version: 3,
            description: "bridge relay",
            sql: include_str!("../migrations/postgres/0003_bridge_relay.sql"),
        },
    ],
};

/// A time as stored.
pub(crate) fn to_millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

/// A stored time; `None` for a value no `DateTime` can hold (a corrupt row).
pub(crate) fn from_millis(millis: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(millis)
}
