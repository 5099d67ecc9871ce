//! People: persons, their aliases, their platform accounts and the notes kept about them.
//!
//! A message from an unknown account creates a person named after the sender's display name;
//! a later, different display name becomes an alias. `add_person` links accounts to a named
//! person; a person left without accounts by that link is merged into it (its name and aliases
//! become aliases, its notes move), so one human does not stay split in two.

use crate::sql::Connection;
use mai_core::host::{HostError, Person};
use mai_core::ids::PersonId;
use serde::{Deserialize, Serialize};

use crate::sql::Query;

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
pub(crate) fn resolve_person(conn: &Connection, name: &str) -> Result<Option<i64>, HostError> {
    Query::new(
        "SELECT person_id FROM ( \
             SELECT person_id, 0 AS priority FROM host_persons WHERE name = ?1 \
             UNION ALL \
             SELECT person_id, 1 AS priority FROM host_person_aliases WHERE alias = ?1 \
         ) named ORDER BY priority, person_id LIMIT 1",
    )
    .bind(name)
    .scalar_optional(conn)
    .map_err(db("look up a person"))
}

pub(crate) fn load_person(conn: &Connection, person_id: i64) -> Result<Option<Person>, HostError> {
    const ACTION: &str = "read a person";
    let name: Option<String> = Query::new("SELECT name FROM host_persons WHERE person_id = ?")
        .bind(person_id)
        .scalar_optional(conn)
        .map_err(db(ACTION))?;
    let Some(name) = name else {
        return Ok(None);
    };
    let aliases: Vec<String> = Query::new(
        "SELECT alias FROM host_person_aliases WHERE person_id = ? AND alias <> ? ORDER BY alias",
    )
    .bind(person_id)
    .bind(&name)
    .scalar_all(conn)
    .map_err(db(ACTION))?;
    let accounts: Vec<(String, String)> = Query::new(
        "SELECT platform, user_id FROM host_accounts WHERE person_id = ? \
         ORDER BY platform, user_id",
    )
    .bind(person_id)
    .all(conn)
    .map_err(db(ACTION))?;
    let notes: Vec<String> =
        Query::new("SELECT note FROM host_person_notes WHERE person_id = ? ORDER BY note_id")
            .bind(person_id)
            .scalar_all(conn)
            .map_err(db(ACTION))?;
    Ok(Some(Person {
        name,
        aliases,
        accounts,
        notes,
    }))
}

pub(crate) fn find_person(conn: &Connection, name: &str) -> Result<Option<Person>, HostError> {
    match resolve_person(conn, name)? {
        Some(person_id) => load_person(conn, person_id),
        None => Ok(None),
    }
}

/// The person behind an account, created from the display name on first sight; records the
/// display name (as an alias when it is not the person's name) and when the account was seen.
pub(crate) fn note_account(
    conn: &Connection,
    platform: &str,
    user_id: &str,
    display_name: &str,
    at_ms: i64,
) -> Result<i64, HostError> {
    const ACTION: &str = "record a message sender";
    let (person_id, name) = match refresh_account(conn, platform, user_id, display_name, at_ms)? {
        Some(known) => known,
        None => {
            let person_id = insert_person(conn, display_name)?;
            let inserted = Query::new(
                "INSERT INTO host_accounts (platform, user_id, person_id, display_name, \
                 last_seen) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(platform)
            .bind(user_id)
            .bind(person_id)
            .bind(display_name)
            .bind(at_ms)
            .execute(conn)
            .map_err(db(ACTION))?;
            if inserted == 1 {
                return Ok(person_id);
            }
            // Another instance on the same database recorded the account first: theirs
            // stands, and the person made for it here goes.
            Query::new("DELETE FROM host_persons WHERE person_id = ?")
                .bind(person_id)
                .execute(conn)
                .map_err(db(ACTION))?;
            refresh_account(conn, platform, user_id, display_name, at_ms)?.ok_or_else(|| {
                HostError::new(ACTION, format!("account {platform}:{user_id} vanished"))
            })?
        }
    };
    if display_name != name {
        insert_alias(conn, person_id, display_name)?;
    }
    Ok(person_id)
}

/// A known account found and refreshed in one statement (one round trip): its person and the
/// person's name; `None` for an account never seen.
fn refresh_account(
    conn: &Connection,
    platform: &str,
    user_id: &str,
    display_name: &str,
    at_ms: i64,
) -> Result<Option<(i64, String)>, HostError> {
    Query::new(format_args!(
        "UPDATE host_accounts SET display_name = ?, last_seen = {greatest}(last_seen, ?) \
         WHERE platform = ? AND user_id = ? \
         RETURNING person_id, \
         (SELECT p.name FROM host_persons p WHERE p.person_id = host_accounts.person_id)",
        greatest = conn.dialect().greatest()
    ))
    .bind(display_name)
    .bind(at_ms)
    .bind(platform)
    .bind(user_id)
    .optional(conn)
    .map_err(db("record a message sender"))
}

/// Creates or extends a person (see the module comment) and returns it as stored.
pub(crate) fn add_person(conn: &Connection, new: &NewPerson) -> Result<Person, HostError> {
    const ACTION: &str = "add a person";
    let name = new.name.trim();
    if name.is_empty() {
        return Err(HostError::new(ACTION, "the person's name is empty"));
    }
    let existing: Option<i64> =
        Query::new("SELECT person_id FROM host_persons WHERE name = ? ORDER BY person_id LIMIT 1")
            .bind(name)
            .scalar_optional(conn)
            .map_err(db(ACTION))?;
    let person_id = match existing {
        Some(person_id) => person_id,
        None => insert_person(conn, name)?,
    };
    for alias in new.aliases.iter().map(|alias| alias.trim()) {
        if !alias.is_empty() && alias != name {
            insert_alias(conn, person_id, alias)?;
        }
    }
    for account in &new.accounts {
        link_account(conn, person_id, account, name)?;
    }
    for note in new.notes.iter().map(|note| note.trim()) {
        if !note.is_empty() {
            Query::new(
                "INSERT INTO host_person_notes (person_id, note) VALUES (?, ?) ON CONFLICT DO NOTHING",
            )
                .bind(person_id)
                .bind(note)
                .execute(conn)
                .map_err(db(ACTION))?;
        }
    }
    load_person(conn, person_id)?
        .ok_or_else(|| HostError::new(ACTION, "the person vanished while being written"))
}

/// Adds an alias to the person found by `person` (exact name or alias).
pub(crate) fn add_alias(conn: &Connection, person: &str, alias: &str) -> Result<(), HostError> {
    let alias = alias.trim();
    if alias.is_empty() {
        return Err(HostError::new("add an alias", "the alias is empty"));
    }
    let Some(person_id) = resolve_person(conn, person)? else {
        return Err(HostError::new(
            "add an alias",
            format!("no person is named `{person}`; add the person first"),
        ));
    };
    insert_alias(conn, person_id, alias)
}

fn insert_person(conn: &Connection, name: &str) -> Result<i64, HostError> {
    Query::new("INSERT INTO host_persons (name) VALUES (?) RETURNING person_id")
        .bind(name)
        .scalar(conn)
        .map_err(db("create a person"))
}

fn insert_alias(conn: &Connection, person_id: i64, alias: &str) -> Result<(), HostError> {
    Query::new(
        "INSERT INTO host_person_aliases (person_id, alias) VALUES (?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(person_id)
    .bind(alias)
    .execute(conn)
    .map_err(db("add an alias"))?;
    Ok(())
}

/// Links an account to `person_id`; the previous owner, if left without accounts, is merged in.
fn link_account(
    conn: &Connection,
    person_id: i64,
    account: &PersonId,
    display_name: &str,
) -> Result<(), HostError> {
    const ACTION: &str = "link an account to a person";
    let previous: Option<i64> =
        Query::new("SELECT person_id FROM host_accounts WHERE platform = ? AND user_id = ?")
            .bind(&account.platform)
            .bind(&account.user_id)
            .scalar_optional(conn)
            .map_err(db(ACTION))?;
    match previous {
        Some(previous) if previous == person_id => Ok(()),
        Some(previous) => {
            Query::new("UPDATE host_accounts SET person_id = ? WHERE platform = ? AND user_id = ?")
                .bind(person_id)
                .bind(&account.platform)
                .bind(&account.user_id)
                .execute(conn)
                .map_err(db(ACTION))?;
            merge_if_orphaned(conn, previous, person_id)
        }
        None => {
            Query::new(
                "INSERT INTO host_accounts (platform, user_id, person_id, display_name, last_seen) \
                 VALUES (?, ?, ?, ?, 0)",
            )
            .bind(&account.platform)
            .bind(&account.user_id)
            .bind(person_id)
            .bind(display_name)
            .execute(conn)
            .map_err(db(ACTION))?;
            Ok(())
        }
    }
}

/// Folds `from` into `into` when `from` has no account left.
fn merge_if_orphaned(conn: &Connection, from: i64, into: i64) -> Result<(), HostError> {
    const ACTION: &str = "merge a person into another";
    let has_accounts: bool =
        Query::new("SELECT EXISTS (SELECT 1 FROM host_accounts WHERE person_id = ?)")
            .bind(from)
            .scalar(conn)
            .map_err(db(ACTION))?;
    if has_accounts {
        return Ok(());
    }
    for statement in [
        "INSERT INTO host_person_aliases (person_id, alias) \
         SELECT ?2, name FROM host_persons WHERE person_id = ?1 ON CONFLICT DO NOTHING",
        "INSERT INTO host_person_aliases (person_id, alias) \
         SELECT ?2, alias FROM host_person_aliases WHERE person_id = ?1 ON CONFLICT DO NOTHING",
        "INSERT INTO host_person_notes (person_id, note) \
         SELECT ?2, note FROM host_person_notes WHERE person_id = ?1 ORDER BY note_id \
         ON CONFLICT DO NOTHING",
    ] {
        Query::new(statement)
            .bind(from)
            .bind(into)
            .execute(conn)
            .map_err(db(ACTION))?;
    }
    Query::new("DELETE FROM host_persons WHERE person_id = ?")
        .bind(from)
        .execute(conn)
        .map_err(db(ACTION))?;
    Ok(())
}
