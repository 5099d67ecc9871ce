//! People: persons, their aliases, their platform accounts and the notes kept about them.
//!
//! A message from an unknown account creates a person named after the sender's display name;
//! a later, different display name becomes an alias. `add_person` links accounts to a named
//! person; a person left without accounts by that link is merged into it (its name and aliases
//! become aliases, its notes move), so one human does not stay split in two.

use mai_core::host::{HostError, Person};
use mai_core::ids::PersonId;
use serde::{Deserialize, Serialize};
use sqlx::SqliteConnection;

use crate::error::db;

/// What `add_person` records: a person by exact name (created if missing) and what to add to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewPerson {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Accounts to link to this person (moved from whoever had them).
    #[serde(default)]
    pub accounts: Vec<PersonId>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The person with this exact name, else the one with this exact alias (the oldest on ties).
pub(crate) async fn resolve_person(
    conn: &mut SqliteConnection,
    name: &str,
) -> Result<Option<i64>, HostError> {
    sqlx::query_scalar(
        "SELECT person_id FROM ( \
             SELECT person_id, 0 AS priority FROM host_persons WHERE name = ?1 \
             UNION ALL \
             SELECT person_id, 1 AS priority FROM host_person_aliases WHERE alias = ?1 \
         ) ORDER BY priority, person_id LIMIT 1",
    )
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db("look up a person"))
}

pub(crate) async fn load_person(
    conn: &mut SqliteConnection,
    person_id: i64,
) -> Result<Option<Person>, HostError> {
    const ACTION: &str = "read a person";
    let name: Option<String> =
        sqlx::query_scalar("SELECT name FROM host_persons WHERE person_id = ?")
            .bind(person_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db(ACTION))?;
    let Some(name) = name else {
        return Ok(None);
    };
    let aliases: Vec<String> = sqlx::query_scalar(
        "SELECT alias FROM host_person_aliases WHERE person_id = ? AND alias <> ? ORDER BY alias",
    )
    .bind(person_id)
    .bind(&name)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(ACTION))?;
    let accounts: Vec<(String, String)> = sqlx::query_as(
        "SELECT platform, user_id FROM host_accounts WHERE person_id = ? \
         ORDER BY platform, user_id",
    )
    .bind(person_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(ACTION))?;
    let notes: Vec<String> = sqlx::query_scalar(
        "SELECT note FROM host_person_notes WHERE person_id = ? ORDER BY note_id",
    )
    .bind(person_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(ACTION))?;
    Ok(Some(Person {
        name,
        aliases,
        accounts,
        notes,
    }))
}

pub(crate) async fn find_person(
    conn: &mut SqliteConnection,
    name: &str,
) -> Result<Option<Person>, HostError> {
    match resolve_person(conn, name).await? {
        Some(person_id) => load_person(conn, person_id).await,
        None => Ok(None),
    }
}

/// The person behind an account, created from the display name on first sight; records the
/// display name (as an alias when it is not the person's name) and when the account was seen.
pub(crate) async fn note_account(
    conn: &mut SqliteConnection,
    platform: &str,
    user_id: &str,
    display_name: &str,
    at_ms: i64,
) -> Result<i64, HostError> {
    const ACTION: &str = "record a message sender";
    // A known account is found and refreshed in one statement (one round trip).
    let known: Option<(i64, String)> = sqlx::query_as(
        "UPDATE host_accounts SET display_name = ?, last_seen = MAX(last_seen, ?) \
         WHERE platform = ? AND user_id = ? \
         RETURNING person_id, \
         (SELECT p.name FROM host_persons p WHERE p.person_id = host_accounts.person_id)",
    )
    .bind(display_name)
    .bind(at_ms)
    .bind(platform)
    .bind(user_id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db(ACTION))?;
    let Some((person_id, name)) = known else {
        let person_id = insert_person(conn, display_name).await?;
        sqlx::query(
            "INSERT INTO host_accounts (platform, user_id, person_id, display_name, last_seen) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(platform)
        .bind(user_id)
        .bind(person_id)
        .bind(display_name)
        .bind(at_ms)
        .execute(&mut *conn)
        .await
        .map_err(db(ACTION))?;
        return Ok(person_id);
    };
    if display_name != name {
        insert_alias(conn, person_id, display_name).await?;
    }
    Ok(person_id)
}

/// Creates or extends a person (see the module comment) and returns it as stored.
pub(crate) async fn add_person(
    conn: &mut SqliteConnection,
    new: &NewPerson,
) -> Result<Person, HostError> {
    const ACTION: &str = "add a person";
    let name = new.name.trim();
    if name.is_empty() {
        return Err(HostError::new(ACTION, "the person's name is empty"));
    }
    let existing: Option<i64> = sqlx::query_scalar(
        "SELECT person_id FROM host_persons WHERE name = ? ORDER BY person_id LIMIT 1",
    )
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db(ACTION))?;
    let person_id = match existing {
        Some(person_id) => person_id,
        None => insert_person(conn, name).await?,
    };
    for alias in new.aliases.iter().map(|alias| alias.trim()) {
        if !alias.is_empty() && alias != name {
            insert_alias(conn, person_id, alias).await?;
        }
    }
    for account in &new.accounts {
        link_account(conn, person_id, account, name).await?;
    }
    for note in new.notes.iter().map(|note| note.trim()) {
        if !note.is_empty() {
            sqlx::query("INSERT OR IGNORE INTO host_person_notes (person_id, note) VALUES (?, ?)")
                .bind(person_id)
                .bind(note)
                .execute(&mut *conn)
                .await
                .map_err(db(ACTION))?;
        }
    }
    load_person(conn, person_id)
        .await?
        .ok_or_else(|| HostError::new(ACTION, "the person vanished while being written"))
}

/// Adds an alias to the person found by `person` (exact name or alias).
pub(crate) async fn add_alias(
    conn: &mut SqliteConnection,
    person: &str,
    alias: &str,
) -> Result<(), HostError> {
    let alias = alias.trim();
    if alias.is_empty() {
        return Err(HostError::new("add an alias", "the alias is empty"));
    }
    let Some(person_id) = resolve_person(conn, person).await? else {
        return Err(HostError::new(
            "add an alias",
            format!("no person is named `{person}`; add the person first"),
        ));
    };
    insert_alias(conn, person_id, alias).await
}

async fn insert_person(conn: &mut SqliteConnection, name: &str) -> Result<i64, HostError> {
    sqlx::query_scalar("INSERT INTO host_persons (name) VALUES (?) RETURNING person_id")
        .bind(name)
        .fetch_one(&mut *conn)
        .await
        .map_err(db("create a person"))
}

async fn insert_alias(
    conn: &mut SqliteConnection,
    person_id: i64,
    alias: &str,
) -> Result<(), HostError> {
    sqlx::query("INSERT OR IGNORE INTO host_person_aliases (person_id, alias) VALUES (?, ?)")
        .bind(person_id)
        .bind(alias)
        .execute(&mut *conn)
        .await
        .map_err(db("add an alias"))?;
    Ok(())
}

/// Links an account to `person_id`; the previous owner, if left without accounts, is merged in.
async fn link_account(
    conn: &mut SqliteConnection,
    person_id: i64,
    account: &PersonId,
    display_name: &str,
) -> Result<(), HostError> {
    const ACTION: &str = "link an account to a person";
    let previous: Option<i64> = sqlx::query_scalar(
        "SELECT person_id FROM host_accounts WHERE platform = ? AND user_id = ?",
    )
    .bind(&account.platform)
    .bind(&account.user_id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db(ACTION))?;
    match previous {
        Some(previous) if previous == person_id => Ok(()),
        Some(previous) => {
            sqlx::query(
                "UPDATE host_accounts SET person_id = ? WHERE platform = ? AND user_id = ?",
            )
            .bind(person_id)
            .bind(&account.platform)
            .bind(&account.user_id)
            .execute(&mut *conn)
            .await
            .map_err(db(ACTION))?;
            merge_if_orphaned(conn, previous, person_id).await
        }
        None => {
            sqlx::query(
                "INSERT INTO host_accounts (platform, user_id, person_id, display_name, last_seen) \
                 VALUES (?, ?, ?, ?, 0)",
            )
            .bind(&account.platform)
            .bind(&account.user_id)
            .bind(person_id)
            .bind(display_name)
            .execute(&mut *conn)
            .await
            .map_err(db(ACTION))?;
            Ok(())
        }
    }
}

/// Folds `from` into `into` when `from` has no account left.
async fn merge_if_orphaned(
    conn: &mut SqliteConnection,
    from: i64,
    into: i64,
) -> Result<(), HostError> {
    const ACTION: &str = "merge a person into another";
    let has_accounts: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM host_accounts WHERE person_id = ?)")
            .bind(from)
            .fetch_one(&mut *conn)
            .await
            .map_err(db(ACTION))?;
    if has_accounts {
        return Ok(());
    }
    for statement in [
        "INSERT OR IGNORE INTO host_person_aliases (person_id, alias) \
         SELECT ?2, name FROM host_persons WHERE person_id = ?1",
        "INSERT OR IGNORE INTO host_person_aliases (person_id, alias) \
         SELECT ?2, alias FROM host_person_aliases WHERE person_id = ?1",
        "INSERT OR IGNORE INTO host_person_notes (person_id, note) \
         SELECT ?2, note FROM host_person_notes WHERE person_id = ?1 ORDER BY note_id",
    ] {
        sqlx::query(statement)
            .bind(from)
            .bind(into)
            .execute(&mut *conn)
            .await
            .map_err(db(ACTION))?;
    }
    sqlx::query("DELETE FROM host_persons WHERE person_id = ?")
        .bind(from)
        .execute(&mut *conn)
        .await
        .map_err(db(ACTION))?;
    Ok(())
}
