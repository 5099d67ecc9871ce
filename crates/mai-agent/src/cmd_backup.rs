//! `mai-agent backup FILE`: a consistent copy of the database, made while `serve` runs or not
//! (docs/backup.md). The copy is a SQLite file with the same tables, private (0600); an existing
//! FILE is refused. Must not: take the data directory's lock (a backup runs beside the service)
//! or open the database through the engine (that would migrate it).

use std::path::Path;

use anyhow::{Context, Result};

use crate::settings::Settings;

pub async fn run(settings: &Settings, file: &Path) -> Result<()> {
    if let Some(url) = settings.config.storage.url.as_deref()
        && (url.starts_with("postgres://") || url.starts_with("postgresql://"))
    {
        anyhow::bail!(
            "[storage] url names a PostgreSQL database: back it up with `pg_dump` (see \
             docs/backup.md); `mai-agent backup` copies SQLite files only"
        );
    }
    let source = settings.database_path();
    let (from, to) = (source.clone(), file.to_owned());
    let size = tokio::task::spawn_blocking(move || mai_store::backup(&from, &to))
        .await
        .context("the backup thread failed")??;
    println!(
        "backed up {} to {} ({} KiB); restore: docs/backup.md",
        source.display(),
        file.display(),
        size.div_ceil(1024)
    );
    Ok(())
}
