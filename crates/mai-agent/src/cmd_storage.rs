//! `mai-agent storage migrate --to postgres://…`: moving an existing SQLite store (tasks, their
//! status logs and histories, and the embedded host's tables) into an empty PostgreSQL database
//! (docs/scale-out.md). Holds the data directory's lock while it copies, so no engine changes the
//! source meanwhile; checks the counts on both sides; leaves the SQLite file as it was. Must
//! not: write into a PostgreSQL database that already holds tasks or chat data, or print the
//! URL (it may hold a password).

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use mai_core::config::{StorageTarget, storage_target};
use mai_host::{EmbeddedConfig, EmbeddedHost};
use mai_store::{Location, PgOptions, SqliteOptions, Storage, Store};

use crate::instance::InstanceLock;
use crate::settings::Settings;

#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Copy the SQLite store of the data directory into an empty PostgreSQL database.
    Migrate {
        /// The PostgreSQL database to fill (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE).
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

pub async fn run(settings: &Settings, command: &StorageCommand) -> Result<()> {
    let StorageCommand::Migrate { to } = command;
    migrate(settings, to).await
}

async fn migrate(settings: &Settings, to: &str) -> Result<()> {
    if settings.postgres_url().is_some() {
        bail!(
            "[storage] url already names a PostgreSQL database; storage migrate copies a SQLite \
             store: run it with the configuration that names the SQLite file"
        );
    }
    let Ok(StorageTarget::Postgres(url)) = storage_target(Some(to)) else {
        bail!("--to must be a postgres:// or postgresql:// URL");
    };
    let source_path = settings.database_path();
    if !source_path.is_file() {
        bail!(
            "there is no SQLite store at {}: nothing to copy",
            source_path.display()
        );
    }
    let _lock = InstanceLock::acquire(&settings.data_dir, "storage migrate")?;
    let source = Storage::open(&Location::Sqlite {
        path: source_path.clone(),
        options: SqliteOptions::default(),
    })
    .await
    .with_context(|| format!("cannot open the SQLite store {}", source_path.display()))?;
    let target = Storage::open(&Location::Postgres {
        url,
        options: PgOptions::default(),
    })
    .await
    .context("cannot open the PostgreSQL database given with --to")?;
    let (Store::Sqlite(sqlite), Store::Postgres(postgres)) = (&source.store, &target.store) else {
        bail!("storage migrate copies from SQLite to PostgreSQL");
    };
    let source_host = EmbeddedHost::on(source.host.clone(), EmbeddedConfig::default()).await?;
    let target_host = EmbeddedHost::on(target.host.clone(), EmbeddedConfig::default()).await?;
    let held = target_host.row_counts().await?;
    if postgres.task_count().await? > 0 || held.iter().any(|(_, n)| *n > 0) {
        bail!(
            "the PostgreSQL database given with --to is not empty (it holds tasks or chat \
             data): give a new, empty database; nothing was copied"
        );
    }
    let tasks = postgres
        .copy_tasks_from(sqlite.database())
        .await
        .context("copying the tasks failed; drop and recreate the target database, then retry")?;
    let host = source_host.copy_into(&target_host).await.context(
        "copying the chat tables failed; drop and recreate the target database, then retry",
    )?;
    let tables: Vec<String> = host
        .iter()
        .map(|(table, n)| format!("{} {n}", table.trim_start_matches("host_")))
        .collect();
    println!(
        "copied {} task(s) with {} status-log line(s), {} history entries and {} usage \
         record(s), and the chat tables ({}) from {} into the PostgreSQL database; the counts \
         match on both sides",
        tasks.tasks,
        tasks.status_log,
        tasks.history,
        tasks.usage,
        tables.join(", "),
        source_path.display()
    );
    println!(
        "to use it, set [storage] url to that database (or MAI_AGENT__STORAGE__URL) and start \
         serve; the SQLite file is left as it was"
    );
    sqlite.close().await;
    postgres.close().await;
    Ok(())
}
