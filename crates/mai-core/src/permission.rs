//! Role resolution per stream (docs/design.md, "Roles and the permission model").
//!
//! A person's role depends on where they speak: the same admin is a plain user in a group chat
//! unless `admin_in_group_chats` is on. The rules are applied in design.md's order and the first
//! match wins; nobody matched is a guest (fail-closed).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::ids::{GroupId, PersonId};
use crate::role::Role;

/// The `[permission]` config section, as written by the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionConfig {
    /// People (`platform:user_id`) who are admin in private chats.
    pub admins: Vec<String>,
    /// Groups (`platform:group:group_id`) whose every member is admin.
    pub admin_groups: Vec<String>,
    /// People who are user.
    pub users: Vec<String>,
    /// Groups whose every member is user.
    pub user_groups: Vec<String>,
    /// Whether people in `admins` keep admin in group chats (else they are user there).
    pub admin_in_group_chats: bool,
}

/// A config entry that is not a valid id; names the key and the index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config [permission].{key}[{index}]: {source}{hint}")]
pub struct PermissionConfigError {
    pub key: &'static str,
    pub index: usize,
    #[source]
    pub source: crate::ids::IdError,
    /// What the operator most likely meant (`; did you mean "qq:10001"?`), or empty.
    pub hint: String,
}

/// Where a person is speaking: the platform, the person, and the group if it is a group chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Speaker<'a> {
    pub platform: &'a str,
    pub user_id: &'a str,
    /// `Some` in a group chat, `None` in a private chat.
    pub group_id: Option<&'a str>,
}

/// The parsed `[permission]` section; cheap to query.
#[derive(Debug, Clone, Default)]
pub struct PermissionResolver {
    admins: HashSet<PersonId>,
    admin_groups: HashSet<GroupId>,
    users: HashSet<PersonId>,
    user_groups: HashSet<GroupId>,
    admin_in_group_chats: bool,
}

fn parse_all<T: std::str::FromStr<Err = crate::ids::IdError> + std::hash::Hash + Eq>(
    key: &'static str,
    entries: &[String],
) -> Result<HashSet<T>, PermissionConfigError> {
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            entry.parse().map_err(|source| PermissionConfigError {
                key,
                index,
                source,
                hint: hint_for(key, entry),
            })
        })
        .collect()
}

/// For an entry that is only digits (a QQ number without its platform), the id it most
/// likely means.
fn hint_for(key: &str, entry: &str) -> String {
    let entry = entry.trim();
    if !entry.is_empty() && entry.chars().all(|c| c.is_ascii_digit()) {
        format!(
            "; did you mean {}?",
            crate::config::checks_suggested_id(key, entry)
        )
    } else {
        String::new()
    }
}

impl PermissionResolver {
    pub fn new(config: &PermissionConfig) -> Result<Self, PermissionConfigError> {
        Ok(PermissionResolver {
            admins: parse_all("admins", &config.admins)?,
            admin_groups: parse_all("admin_groups", &config.admin_groups)?,
            users: parse_all("users", &config.users)?,
            user_groups: parse_all("user_groups", &config.user_groups)?,
            admin_in_group_chats: config.admin_in_group_chats,
        })
    }

    /// The role of `speaker`, by the rules of docs/design.md ("Roles and the permission model")
    /// in order; first match wins.
    pub fn resolve(&self, speaker: &Speaker<'_>) -> Role {
        let person = PersonId {
            platform: speaker.platform.to_owned(),
            user_id: speaker.user_id.to_owned(),
        };
        let group = speaker.group_id.map(|group_id| GroupId {
            platform: speaker.platform.to_owned(),
            group_id: group_id.to_owned(),
        });
        // Rule 1: listed admins. In a group chat they are admin only when allowed, else user.
        if self.admins.contains(&person) {
            return if group.is_none() || self.admin_in_group_chats {
                Role::Admin
            } else {
                Role::User
            };
        }
        // Rule 2: everyone in an admin group.
        if group
            .as_ref()
            .is_some_and(|g| self.admin_groups.contains(g))
        {
            return Role::Admin;
        }
        // Rule 3: listed users, then user groups.
        if self.users.contains(&person)
            || group.as_ref().is_some_and(|g| self.user_groups.contains(g))
        {
            return Role::User;
        }
        // Rule 4: fail closed.
        Role::Guest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(admin_in_group_chats: bool) -> PermissionResolver {
        PermissionResolver::new(&PermissionConfig {
            admins: vec!["qq:1".into()],
            admin_groups: vec!["qq:group:900".into()],
            users: vec!["qq:2".into(), "tg:1".into()],
            user_groups: vec!["qq:group:800".into()],
            admin_in_group_chats,
        })
        .unwrap()
    }

    fn role(r: &PermissionResolver, platform: &str, user: &str, group: Option<&str>) -> Role {
        r.resolve(&Speaker {
            platform,
            user_id: user,
            group_id: group,
        })
    }

    #[test]
    fn rule_table() {
        use Role::*;
        // (admin_in_group_chats, platform, user, group, expected)
        let table: &[(bool, &str, &str, Option<&str>, Role)] = &[
            // rule 1: admin person
            (false, "qq", "1", None, Admin),
            (false, "qq", "1", Some("5"), User),
            (true, "qq", "1", Some("5"), Admin),
            // rule 1 wins over rule 2: first match, as the spec orders them
            (false, "qq", "1", Some("900"), User),
            // rule 2: admin group makes everyone admin, only in that group
            (false, "qq", "7", Some("900"), Admin),
            (false, "qq", "7", None, Guest),
            // rule 3: users and user groups
            (false, "qq", "2", None, User),
            (false, "qq", "2", Some("5"), User),
            (false, "qq", "2", Some("900"), Admin),
            (false, "qq", "7", Some("800"), User),
            // platforms are part of the identity
            (false, "tg", "2", None, Guest),
            (false, "tg", "1", None, User),
            (false, "tg", "7", Some("900"), Guest),
            // rule 4: nobody else
            (false, "qq", "7", None, Guest),
            (true, "qq", "7", Some("5"), Guest),
        ];
        for &(aigc, platform, user, group, expected) in table {
            let got = role(&resolver(aigc), platform, user, group);
            assert_eq!(got, expected, "{aigc} {platform}:{user} in {group:?}");
        }
        assert_eq!(role(&PermissionResolver::default(), "qq", "1", None), Guest);
    }

    #[test]
    fn bad_entries_are_reported_with_their_key_and_index() {
        let err = PermissionResolver::new(&PermissionConfig {
            admins: vec!["qq:1".into()],
            admin_groups: vec!["qq:group:1".into(), "qq:900".into()],
            ..Default::default()
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("config [permission].admin_groups[1]:"),
            "{text}"
        );
        assert!(text.contains("qq:900"), "{text}");

        let err = PermissionResolver::new(&PermissionConfig {
            users: vec!["alice".into()],
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.key, "users");
    }
}
