//! The task store's schema: its migrations (`migrations/`, embedded at build time), recorded
//! in `_sqlx_migrations` (the name earlier builds used, so their files open as they are).

use crate::migrate::{Migration, Migrations};

/// The task tables' scripts.
pub(crate) static TASKS: Migrations = Migrations {
    table: "_sqlx_migrations",
    scripts: &[
        Migration {
            version: 1,
            description: "tasks",
            sql: include_str!("../migrations/0001_tasks.sql"),
        },
        Migration {
            version: 2,
            description: "write id",
            sql: include_str!("../migrations/0002_write_id.sql"),
        },
        Migration {
            version: 3,
            description: "requester",
            sql: include_str!("../migrations/0003_requester.sql"),
        },
        Migration {
            version: 4,
            description: "usage",
            sql: include_str!("../migrations/0004_usage.sql"),
        },
        Migration {
            version: 5,
            description: "parent",
            sql: include_str!("../migrations/0005_parent.sql"),
        },
        Migration {
            version: 6,
            description: "usage record id",
            sql: include_str!("../migrations/0006_usage_record_id.sql"),
        },
        Migration {
            version: 7,
            description: "history key",
            sql: include_str!("../migrations/0007_history_key.sql"),
        },
        Migration {
            version: 8,
            description: "status log key",
            sql: include_str!("../migrations/0008_status_log_key.sql"),
        },
    ],
};
