//! Roles and the one comparison every permission check goes through.
//!
//! `Role` is ordered `guest < user < admin`. Nothing else in the code base compares roles: every
//! gate (tool presentation, tool execution, file policy, task ownership) calls [`require`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Who a person is for mai-agent in one stream. Ordered: `Guest < User < Admin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Guest,
    User,
    Admin,
}

impl Role {
    /// All roles, lowest first.
    pub const ALL: [Role; 3] = [Role::Guest, Role::User, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Guest => "guest",
            Role::User => "user",
            Role::Admin => "admin",
        }
    }

    /// Position in [`Role::ALL`]; used to index per-role tables.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role name that is not one of `guest`, `user`, `admin`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role `{0}`: expected one of guest, user, admin")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;

    /// Exact, lowercase names only: an unknown or misspelled role never passes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "guest" => Ok(Role::Guest),
            "user" => Ok(Role::User),
            "admin" => Ok(Role::Admin),
            other => Err(UnknownRole(other.to_owned())),
        }
    }
}

/// A refused permission check: what was needed and what the caller had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("permission denied: requires role {required}, caller has role {actual}")]
pub struct PermissionDenied {
    pub required: Role,
    pub actual: Role,
}

/// The single role comparison of the code base: `Ok` iff `role >= minimum`.
pub fn require(role: Role, minimum: Role) -> Result<(), PermissionDenied> {
    if role >= minimum {
        Ok(())
    } else {
        Err(PermissionDenied {
            required: minimum,
            actual: role,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_require_follows_the_order() {
        assert!(Role::Guest < Role::User && Role::User < Role::Admin);
        for role in Role::ALL {
            for minimum in Role::ALL {
                assert_eq!(
                    require(role, minimum).is_ok(),
                    role.index() >= minimum.index()
                );
            }
        }
        let err = require(Role::User, Role::Admin).unwrap_err();
        assert_eq!(
            err.to_string(),
            "permission denied: requires role admin, caller has role user"
        );
    }

    #[test]
    fn parsing_rejects_unknown_and_misspelled_roles() {
        assert_eq!("admin".parse::<Role>(), Ok(Role::Admin));
        for bad in ["Admin", "root", "", " user", "superuser"] {
            let err = bad.parse::<Role>().unwrap_err();
            assert!(err.to_string().contains("unknown role"), "{bad}: {err}");
        }
        assert!(serde_json::from_str::<Role>("\"owner\"").is_err());
        assert_eq!(serde_json::to_string(&Role::Guest).unwrap(), "\"guest\"");
    }
}
