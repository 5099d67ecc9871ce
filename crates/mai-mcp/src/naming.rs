//! Model-facing names of MCP tools: `mcp_{server}_{tool}`, sanitized to `[a-zA-Z0-9_-]`, at most
//! 64 characters, unique across every connected server.
//!
//! Owns the forward mapping (server, raw tool) → name and the exact reverse map. It must never
//! resolve a name by prefix: `mcp_a_b_c` could be server `a` tool `b_c` or server `a_b` tool `c`,
//! so the reverse map is the only way back to the raw name.

use std::collections::{BTreeMap, HashMap};

/// Longest tool name the registry (and model APIs) accept.
pub const MAX_NAME_LEN: usize = 64;
/// `_` plus 8 hex digits of hash.
const SUFFIX_LEN: usize = 9;

/// Which server and which raw tool name a model-facing name stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolKey {
    pub server: String,
    pub tool: String,
}

/// The names given to one set of (server, tool) pairs, both ways.
#[derive(Debug, Clone, Default)]
pub struct NameMap {
    forward: HashMap<ToolKey, String>,
    reverse: BTreeMap<String, ToolKey>,
}

impl NameMap {
    /// Names every key. The result depends only on the set of keys, not their order, so the
    /// same tools keep the same names across reloads.
    pub fn build(keys: impl IntoIterator<Item = ToolKey>) -> NameMap {
        let mut keys: Vec<ToolKey> = keys.into_iter().collect();
        keys.sort();
        keys.dedup();
        let bases: Vec<String> = keys
            .iter()
            .map(|k| sanitize(&format!("mcp_{}_{}", k.server, k.tool)))
            .collect();
        let mut claims: HashMap<&str, usize> = HashMap::new();
        for base in &bases {
            *claims.entry(base.as_str()).or_default() += 1;
        }
        // A base shared by two tools is hashed for *all* of them: otherwise which one kept the
        // plain name would depend on which other tools exist, and a name could silently start
        // pointing at a different tool after a reload.
        let mut map = NameMap::default();
        let mut hashed = Vec::new();
        for (key, base) in keys.iter().zip(&bases) {
            if base.len() <= MAX_NAME_LEN && claims.get(base.as_str()) == Some(&1) {
                map.insert(key.clone(), base.clone());
            } else {
                hashed.push((key, base));
            }
        }
        for (key, base) in hashed {
            let stem: String = base.chars().take(MAX_NAME_LEN - SUFFIX_LEN).collect();
            let mut salt = 0u32;
            let name = loop {
                let candidate = format!("{stem}_{:08x}", short_hash(key, salt));
                if !map.reverse.contains_key(&candidate) {
                    break candidate;
                }
                salt += 1;
            };
            map.insert(key.clone(), name);
        }
        map
    }

    fn insert(&mut self, key: ToolKey, name: String) {
        self.reverse.insert(name.clone(), key.clone());
        self.forward.insert(key, name);
    }

    /// The model-facing name of `server`'s tool `tool`.
    pub fn name_of(&self, server: &str, tool: &str) -> Option<&str> {
        self.forward
            .get(&ToolKey {
                server: server.to_owned(),
                tool: tool.to_owned(),
            })
            .map(String::as_str)
    }

    /// Exactly which (server, raw tool) `name` stands for; `None` for any other string.
    pub fn resolve(&self, name: &str) -> Option<&ToolKey> {
        self.reverse.get(name)
    }

    /// Every (name, key) pair, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ToolKey)> {
        self.reverse.iter().map(|(n, k)| (n.as_str(), k))
    }

    pub fn len(&self) -> usize {
        self.reverse.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reverse.is_empty()
    }
}

/// Every character outside `[a-zA-Z0-9_-]` becomes `_` (one per character, so lengths stay
/// predictable for non-ASCII names).
pub fn sanitize(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// FNV-1a over the raw (unsanitized) server and tool names: stable across builds and runs,
/// unlike `std`'s randomly seeded hasher.
fn short_hash(key: &ToolKey, salt: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = key
        .server
        .bytes()
        .chain([0])
        .chain(key.tool.bytes())
        .chain(salt.to_le_bytes());
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash ^ (hash >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use mai_core::tool::validate_tool_name;

    fn key(server: &str, tool: &str) -> ToolKey {
        ToolKey {
            server: server.into(),
            tool: tool.into(),
        }
    }

    #[test]
    fn plain_names_are_prefixed_and_sanitized() {
        let map = NameMap::build([key("fs", "read_file"), key("my.server", "do it/now")]);
        assert_eq!(map.name_of("fs", "read_file"), Some("mcp_fs_read_file"));
        assert_eq!(
            map.name_of("my.server", "do it/now"),
            Some("mcp_my_server_do_it_now")
        );
        assert_eq!(
            map.resolve("mcp_my_server_do_it_now"),
            Some(&key("my.server", "do it/now"))
        );
    }

    #[test]
    fn sanitizing_collisions_get_distinct_hashed_names_for_both() {
        let map = NameMap::build([key("a", "x.y"), key("a", "x y"), key("a", "x_z")]);
        let first = map.name_of("a", "x.y").unwrap_or_default().to_owned();
        let second = map.name_of("a", "x y").unwrap_or_default().to_owned();
        assert_ne!(first, second);
        assert!(first.starts_with("mcp_a_x_y_") && second.starts_with("mcp_a_x_y_"));
        assert!(
            map.resolve("mcp_a_x_y").is_none(),
            "no tool keeps the ambiguous plain name"
        );
        assert_eq!(map.name_of("a", "x_z"), Some("mcp_a_x_z"));
        assert_eq!(map.resolve(&first), Some(&key("a", "x.y")));
        assert_eq!(map.resolve(&second), Some(&key("a", "x y")));
    }

    #[test]
    fn server_tool_split_ambiguity_is_resolved_exactly() {
        // `mcp_a_b_c` could be (a, b_c) or (a_b, c): both are hashed and each maps back exactly.
        let map = NameMap::build([key("a", "b_c"), key("a_b", "c")]);
        let one = map.name_of("a", "b_c").unwrap_or_default();
        let two = map.name_of("a_b", "c").unwrap_or_default();
        assert_ne!(one, two);
        assert_eq!(map.resolve(one), Some(&key("a", "b_c")));
        assert_eq!(map.resolve(two), Some(&key("a_b", "c")));
        assert!(map.resolve("mcp_a_b").is_none(), "no prefix matching");
    }

    #[test]
    fn long_names_fit_and_stay_unique() {
        let long_a = format!("{}a", "t".repeat(80));
        let long_b = format!("{}b", "t".repeat(80));
        let map = NameMap::build([key("srv", &long_a), key("srv", &long_b)]);
        let a = map.name_of("srv", &long_a).unwrap_or_default();
        let b = map.name_of("srv", &long_b).unwrap_or_default();
        assert_ne!(a, b);
        for name in [a, b] {
            assert!(name.len() <= MAX_NAME_LEN, "{name}");
            assert!(validate_tool_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn names_do_not_depend_on_input_order() {
        let keys = [key("a", "x.y"), key("a", "x y"), key("b", "q")];
        let forward = NameMap::build(keys.clone());
        let backward = NameMap::build(keys.iter().rev().cloned());
        for k in &keys {
            assert_eq!(
                forward.name_of(&k.server, &k.tool),
                backward.name_of(&k.server, &k.tool)
            );
        }
    }

    #[test]
    fn every_name_is_valid_for_the_registry() {
        let map = NameMap::build([key("ünï", "çødé"), key("s", ""), key("", "t")]);
        assert_eq!(map.len(), 3);
        for (name, _) in map.iter() {
            assert!(validate_tool_name(name).is_ok(), "{name}");
        }
    }
}
