//! Who may use which MCP tool: a server's `[[mcp.servers]] min_role` (admin unless the operator
//! lowers it) and its per-tool overrides `tool_roles`, keyed by the tool's name on the server.
//!
//! Owns the role of each tool and which config changes are role-only (applied without restarting
//! the server). Must not contact servers or touch the registry: the manager asks here before a
//! call, `tools` puts the roles on the registry's definitions.

use std::collections::BTreeMap;

use mai_core::config::McpServerConfig;
use mai_core::role::Role;

/// The roles of one server's tools, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerRoles {
    min_role: Role,
    tool_roles: BTreeMap<String, Role>,
}

impl ServerRoles {
    pub(crate) fn of(config: &McpServerConfig) -> ServerRoles {
        ServerRoles {
            min_role: config.min_role,
            tool_roles: config.tool_roles.clone(),
        }
    }

    /// The lowest role that may use the tool the server calls `raw_name`: its `tool_roles`
    /// entry, else the server's `min_role` (also for a name the server does not offer).
    pub(crate) fn for_tool(&self, raw_name: &str) -> Role {
        self.tool_roles
            .get(raw_name)
            .copied()
            .unwrap_or(self.min_role)
    }

    /// The `tool_roles` keys naming no tool in `offered` (most likely a typo), sorted.
    pub(crate) fn unknown_tools<'a>(
        &self,
        offered: impl IntoIterator<Item = &'a str>,
    ) -> Vec<String> {
        let offered: Vec<&str> = offered.into_iter().collect();
        self.tool_roles
            .keys()
            .filter(|name| !offered.contains(&name.as_str()))
            .cloned()
            .collect()
    }
}

/// Whether two entries start the same server, whatever their roles: a role change alone is
/// applied in place, without restarting (and losing the state of) the server.
pub(crate) fn same_connection(a: &McpServerConfig, b: &McpServerConfig) -> bool {
    let without_roles = |c: &McpServerConfig| McpServerConfig {
        min_role: Role::Admin,
        tool_roles: BTreeMap::new(),
        ..c.clone()
    };
    without_roles(a) == without_roles(b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config(min_role: Role, tool_roles: &[(&str, Role)]) -> McpServerConfig {
        let mut config: McpServerConfig =
            serde_json::from_value(serde_json::json!({"name": "fs", "command": "srv"})).unwrap();
        config.min_role = min_role;
        config.tool_roles = tool_roles
            .iter()
            .map(|(name, role)| (name.to_string(), *role))
            .collect();
        config
    }

    #[test]
    fn a_tool_override_wins_over_the_server_role_and_nothing_else_is_lowered() {
        let roles = ServerRoles::of(&config(Role::Admin, &[("read_text_file", Role::User)]));
        assert_eq!(roles.for_tool("read_text_file"), Role::User);
        assert_eq!(roles.for_tool("write_file"), Role::Admin);
        assert_eq!(
            roles.for_tool("read_text_file "),
            Role::Admin,
            "exact names only"
        );
    }

    #[test]
    fn an_override_naming_no_offered_tool_is_reported() {
        let roles = ServerRoles::of(&config(
            Role::Admin,
            &[("read_file", Role::User), ("raed_file", Role::User)],
        ));
        assert_eq!(
            roles.unknown_tools(["read_file", "write_file"]),
            ["raed_file"]
        );
        assert!(roles.unknown_tools(["raed_file", "read_file"]).is_empty());
    }

    #[test]
    fn only_a_role_change_keeps_the_connection() {
        let base = config(Role::Admin, &[]);
        let lowered = config(Role::User, &[("read_file", Role::Guest)]);
        assert!(same_connection(&base, &lowered));
        let mut moved = base.clone();
        moved.args = vec!["/elsewhere".into()];
        assert!(!same_connection(&base, &moved));
    }
}
