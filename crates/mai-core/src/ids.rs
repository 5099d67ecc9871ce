//! Identifier strings: who a task belongs to and which chat it lives in.
//!
//! This is the only module that builds or parses `platform:user_id`, `platform:group:group_id`
//! and `planner:{stream_id}`. Everything else holds the typed values.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const GROUP_MARK: &str = "group";

/// The one `user_id` OneBot (QQ) gives every anonymous group member: it names no one, so no
/// permission list matches it, it is never a requester and never answers a question.
pub const ANONYMOUS_USER_ID: &str = "80000000";
const PLANNER: &str = "planner";

/// A malformed identifier, with the text that was given and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {kind} `{input}`: {reason}")]
pub struct IdError {
    pub kind: &'static str,
    pub input: String,
    pub reason: &'static str,
}

fn id_error(kind: &'static str, input: &str, reason: &'static str) -> IdError {
    IdError {
        kind,
        input: input.to_owned(),
        reason,
    }
}

/// A platform name (`qq`, `telegram`, `console`): non-empty, no `:`, and not `planner`.
fn check_platform(kind: &'static str, input: &str, platform: &str) -> Result<(), IdError> {
    if platform.is_empty() {
        return Err(id_error(kind, input, "the platform part is empty"));
    }
    if platform == PLANNER {
        return Err(id_error(kind, input, "`planner` is not a chat platform"));
    }
    Ok(())
}

fn check_local(kind: &'static str, input: &str, local: &str) -> Result<(), IdError> {
    if local.is_empty() {
        return Err(id_error(kind, input, "the id after the platform is empty"));
    }
    if local.contains(':') {
        return Err(id_error(
            kind,
            input,
            "the id after the platform contains `:`",
        ));
    }
    if local.chars().any(char::is_whitespace) {
        return Err(id_error(kind, input, "ids contain no whitespace"));
    }
    Ok(())
}

/// One person on one platform: `platform:user_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PersonId {
    pub platform: String,
    pub user_id: String,
}

impl PersonId {
    pub fn new(platform: &str, user_id: &str) -> Result<Self, IdError> {
        format!("{platform}:{user_id}").parse()
    }
}

impl fmt::Display for PersonId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.platform, self.user_id)
    }
}

impl FromStr for PersonId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KIND: &str = "person id (expected `platform:user_id`)";
        let (platform, user_id) = s
            .split_once(':')
            .ok_or_else(|| id_error(KIND, s, "there is no `:`"))?;
        check_platform(KIND, s, platform)?;
        if user_id.starts_with("group:") {
            return Err(id_error(KIND, s, "this is a group id, not a person"));
        }
        check_local(KIND, s, user_id)?;
        Ok(PersonId {
            platform: platform.to_owned(),
            user_id: user_id.to_owned(),
        })
    }
}

/// One group chat on one platform: `platform:group:group_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId {
    pub platform: String,
    pub group_id: String,
}

impl GroupId {
    pub fn new(platform: &str, group_id: &str) -> Result<Self, IdError> {
        format!("{platform}:{GROUP_MARK}:{group_id}").parse()
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{GROUP_MARK}:{}", self.platform, self.group_id)
    }
}

impl FromStr for GroupId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KIND: &str = "group id (expected `platform:group:group_id`)";
        let mut parts = s.splitn(3, ':');
        let (Some(platform), Some(mark), Some(group_id)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(id_error(KIND, s, "expected three `:`-separated parts"));
        };
        check_platform(KIND, s, platform)?;
        if mark != GROUP_MARK {
            return Err(id_error(KIND, s, "the middle part must be `group`"));
        }
        check_local(KIND, s, group_id)?;
        Ok(GroupId {
            platform: platform.to_owned(),
            group_id: group_id.to_owned(),
        })
    }
}

/// An opaque chat identifier. Hosts choose its format; mai-agent only compares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StreamId(String);

impl StreamId {
    pub fn new(id: impl Into<String>) -> Result<Self, IdError> {
        let id = id.into();
        if id.trim().is_empty() {
            return Err(id_error("stream id", &id, "it is empty"));
        }
        Ok(StreamId(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for StreamId {
    type Error = IdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        StreamId::new(value)
    }
}

impl From<StreamId> for String {
    fn from(value: StreamId) -> Self {
        value.0
    }
}

/// Who a task belongs to: a person, or the planner of one stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    Person(PersonId),
    Planner(StreamId),
}

impl Owner {
    pub fn person(platform: &str, user_id: &str) -> Result<Self, IdError> {
        PersonId::new(platform, user_id).map(Owner::Person)
    }

    pub fn planner(stream: StreamId) -> Self {
        Owner::Planner(stream)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Person(person) => person.fmt(f),
            Owner::Planner(stream) => write!(f, "{PLANNER}:{stream}"),
        }
    }
}

impl FromStr for Owner {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("planner:") {
            Some(stream) => StreamId::new(stream)
                .map(Owner::Planner)
                .map_err(|_| id_error("owner", s, "`planner:` needs a stream id after it")),
            None => s.parse().map(Owner::Person),
        }
    }
}

macro_rules! serde_via_string {
    ($($ty:ty),*) => {$(
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}
serde_via_string!(PersonId, GroupId, Owner);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_round_trip_through_their_strings() {
        for text in [
            "qq:12345",
            "telegram:alice",
            "planner:qq:group:42",
            "planner:s-1",
        ] {
            let owner: Owner = text.parse().unwrap();
            assert_eq!(owner.to_string(), text);
            let json = serde_json::to_string(&owner).unwrap();
            assert_eq!(serde_json::from_str::<Owner>(&json).unwrap(), owner);
        }
        assert_eq!(
            "planner:abc".parse::<Owner>().unwrap(),
            Owner::Planner(StreamId::new("abc").unwrap())
        );
        assert_eq!(Owner::person("qq", "1").unwrap().to_string(), "qq:1");
        assert_eq!(GroupId::new("qq", "42").unwrap().to_string(), "qq:group:42");
    }

    #[test]
    fn malformed_ids_are_refused_with_a_reason() {
        for (bad, why) in [
            ("qq", "no `:`"),
            (":123", "platform part is empty"),
            ("qq:", "empty"),
            ("qq:group:42", "group id"),
            ("planner:", "needs a stream id"),
            ("qq:a:b", "contains `:`"),
            ("qq:a b", "whitespace"),
        ] {
            let err = bad.parse::<Owner>().unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains(bad), "error names the input: {err}");
        }
        for bad in [
            "qq:42",
            "qq:grp:42",
            "qq:group:",
            "planner:group:1",
            "qq:group:4:2",
        ] {
            assert!(bad.parse::<GroupId>().is_err(), "{bad}");
        }
        assert!(StreamId::new("  ").is_err());
        assert!(serde_json::from_str::<Owner>("\"nocolon\"").is_err());
    }
}
