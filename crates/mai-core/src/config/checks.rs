//! Checks on the raw configuration that serde's typing cannot make, each with an error that says
//! what to write instead: the `[storage] url` forms this build can open, numeric ids in
//! `[permission]`, the old spelling `[splitter] enable`, and `MAI_AGENT_…` environment variables
//! that match no setting.
//!
//! Pure: no I/O, the environment is handed in. Errors never echo a storage URL (it may hold a
//! password), only its scheme.

use std::path::PathBuf;

use super::{ConfigError, ENV_PREFIX};

/// `MAI_AGENT_…` variables mai-agent (or its MaiBot plugin) reads that are not config overrides.
pub const OTHER_ENV_VARS: [&str; 5] = [
    "MAI_AGENT_LOG",
    "MAI_AGENT_CONFIG",
    "MAI_AGENT_DATA_DIR",
    "MAI_AGENT_URL",
    "MAI_AGENT_TOKEN",
];

/// What `[storage] url` names, once checked.
#[derive(Clone, PartialEq, Eq)]
pub enum StorageTarget {
    /// Not set: `mai-agent.db` in the data directory.
    Default,
    /// A SQLite file (a bare path or `sqlite://PATH`).
    Sqlite(PathBuf),
    /// A PostgreSQL database: the whole `postgres://` or `postgresql://` URL, which may hold a
    /// password (so `Debug` shows only that it is one).
    Postgres(String),
}

impl std::fmt::Debug for StorageTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageTarget::Default => f.write_str("Default"),
            StorageTarget::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            StorageTarget::Postgres(_) => f.write_str("Postgres(<url>)"),
        }
    }
}

/// Reads `[storage] url`: a bare path or `sqlite://PATH` is a SQLite file; `postgres://` and
/// `postgresql://` are a PostgreSQL database; any other scheme is refused rather than taken as
/// a file name.
pub fn storage_target(url: Option<&str>) -> Result<StorageTarget, ConfigError> {
    let Some(url) = url.map(str::trim) else {
        return Ok(StorageTarget::Default);
    };
    let invalid = |problem: String| ConfigError::Invalid {
        section: "storage",
        key: "url",
        problem,
    };
    if url.is_empty() {
        return Err(invalid(
            "is empty; give a file path or sqlite://PATH, or leave it out for \
             <data-dir>/mai-agent.db"
                .into(),
        ));
    }
    let Some(scheme) = scheme_of(url) else {
        return Ok(StorageTarget::Sqlite(PathBuf::from(url)));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "sqlite" => match url.get(scheme.len()..).and_then(|r| r.strip_prefix("://")) {
            Some(path) if !path.is_empty() => Ok(StorageTarget::Sqlite(PathBuf::from(path))),
            _ => Err(invalid(
                "is a sqlite: URL without a file; write sqlite://PATH (sqlite:///srv/mai.db for \
                 an absolute path) or a bare path"
                    .into(),
            )),
        },
        "postgres" | "postgresql" => Ok(StorageTarget::Postgres(url.to_owned())),
        _ => Err(invalid(format!(
            "has the scheme `{scheme}:`, which mai-agent cannot open; use a file path, \
             sqlite://PATH or postgres://USER@HOST/DATABASE"
        ))),
    }
}

/// The URL scheme of `url` (`sqlite`, `postgres`, `mysql`…), if it starts with one. A single
/// letter before `:` is a Windows drive, not a scheme.
fn scheme_of(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let scheme_chars = chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    (scheme.len() > 1 && starts_with_letter && scheme_chars).then_some(scheme)
}

/// Refuses a number in a `[permission]` list (`users = [10001]`) with the string it most likely
/// means (`"qq:10001"`), instead of serde's bare "expected a string".
pub fn permission_numbers(table: &toml::Table) -> Result<(), ConfigError> {
    let Some(toml::Value::Table(permission)) = table.get("permission") else {
        return Ok(());
    };
    for key in ["admins", "admin_groups", "users", "user_groups"] {
        let Some(toml::Value::Array(entries)) = permission.get(key) else {
            continue;
        };
        for (index, entry) in entries.iter().enumerate() {
            if let toml::Value::Integer(number) = entry {
                return Err(ConfigError::Raw(format!(
                    "config [permission].{key}[{index}] is the number {number}; ids are strings \
                     with their platform: did you mean {}?",
                    suggested_id(key, &number.to_string())
                )));
            }
        }
    }
    Ok(())
}

/// The id a bare number in `[permission] key` most likely means, quoted: `"qq:10001"`, or
/// `"qq:group:10001"` in a group list.
pub fn suggested_id(key: &str, number: &str) -> String {
    if key.ends_with("groups") {
        format!("\"qq:group:{number}\"")
    } else {
        format!("\"qq:{number}\"")
    }
}

/// Renames `[splitter] enable` (the old spelling) to `enabled`; returns the warning to show, or
/// refuses when both are given.
pub fn splitter_enable(table: &mut toml::Table) -> Result<Option<String>, ConfigError> {
    let Some(toml::Value::Table(splitter)) = table.get_mut("splitter") else {
        return Ok(None);
    };
    let Some(old) = splitter.remove("enable") else {
        return Ok(None);
    };
    if splitter.contains_key("enabled") {
        return Err(ConfigError::Raw(
            "config [splitter] sets both `enable` (the old spelling) and `enabled`; keep \
             `enabled` only"
                .into(),
        ));
    }
    splitter.insert("enabled".into(), old);
    Ok(Some(
        "[splitter] enable is the old spelling; write `enabled` (it is read the same for now)"
            .into(),
    ))
}

/// Warnings for `MAI_AGENT_…` variables that match no setting: a single underscore after
/// `MAI_AGENT` (`MAI_AGENT_TASK__MAX_ROUNDS`) is not an override and would be ignored.
pub fn unknown_env_vars<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut warnings = Vec::new();
    for name in names {
        if !name.starts_with("MAI_AGENT_")
            || name.starts_with(ENV_PREFIX)
            || OTHER_ENV_VARS.contains(&name)
        {
            continue;
        }
        let rest = &name["MAI_AGENT_".len()..];
        let hint = if rest.contains("__") {
            format!("; did you mean {ENV_PREFIX}{rest}?")
        } else {
            String::new()
        };
        warnings.push(format!(
            "environment variable {name} matches no setting and is ignored: overrides are \
             spelled {ENV_PREFIX}<SECTION>__<KEY>, with two underscores after MAI_AGENT{hint}"
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_urls_are_a_path_sqlite_or_postgres_and_other_schemes_are_refused_without_the_password()
     {
        assert_eq!(storage_target(None).unwrap(), StorageTarget::Default);
        assert_eq!(
            storage_target(Some("/srv/mai.db")).unwrap(),
            StorageTarget::Sqlite("/srv/mai.db".into())
        );
        assert_eq!(
            storage_target(Some("sqlite:///srv/mai.db")).unwrap(),
            StorageTarget::Sqlite("/srv/mai.db".into())
        );
        assert_eq!(
            storage_target(Some("sqlite://rel.db")).unwrap(),
            StorageTarget::Sqlite("rel.db".into())
        );
        assert_eq!(
            storage_target(Some(r"C:\data\mai.db")).unwrap(),
            StorageTarget::Sqlite(r"C:\data\mai.db".into())
        );
        for url in [
            "postgres://u:s3cret@127.0.0.1:5432/mai",
            "postgresql://u:s3cret@db/mai",
        ] {
            let target = storage_target(Some(url)).unwrap();
            assert_eq!(target, StorageTarget::Postgres(url.to_owned()));
            assert!(!format!("{target:?}").contains("s3cret"), "{target:?}");
        }
        let err = storage_target(Some("mysql://u:s3cret@db/mai"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`mysql:`") && !err.contains("s3cret"), "{err}");
        assert!(storage_target(Some("sqlite://")).is_err());
        assert!(storage_target(Some(" ")).is_err());
    }

    #[test]
    fn a_mai_agent_variable_with_one_underscore_warns_with_the_spelling_meant() {
        let warnings = unknown_env_vars([
            "MAI_AGENT_TASK__MAX_ROUNDS",
            "MAI_AGENT__TASK__MAX_ROUNDS",
            "MAI_AGENT_LOG",
            "MAI_AGENT_TOKEN",
            "PATH",
        ]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("MAI_AGENT_TASK__MAX_ROUNDS")
                && warnings[0].contains("did you mean MAI_AGENT__TASK__MAX_ROUNDS?"),
            "{warnings:?}"
        );
    }
}
