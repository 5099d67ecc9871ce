//! The role × tool matrix of the agent-loop channel: for each tool of a registry, how it is shown
//! (essential or discoverable), the lowest role that may use it, which roles a task is shown it
//! every round, what it does (its first sentence) and what its schema costs — and per role, what
//! the schemas shown every round cost together (cl100k tokens, [`crate::budget`]).
//!
//! The one computation behind both `GET /v1/tools` (the dashboard's "Tools and roles" page) and
//! `mai-agent tools --json`, so the two always agree. Must not: decide what a role may use (the
//! registry's gates do: `ToolRegistry::names` and `ToolRegistry::presented`).

use serde::Serialize;

use mai_core::role::Role;
use mai_core::tool::{ToolDefinition, ToolRegistry};

/// One tool as the matrix shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolRow {
    pub name: String,
    /// `essential` (in every round's list) or `discoverable` (found through the tool search).
    pub visibility: &'static str,
    /// The lowest role that may call it.
    pub min_role: &'static str,
    /// The roles a task is shown it every round (absent in a one-role answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<&'static str>>,
    /// The first sentence of its description.
    pub description: String,
    /// What its schema alone costs in a request, in cl100k tokens.
    pub schema_tokens: usize,
}

/// Every tool of a registry and what each role's schemas cost per round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Matrix {
    pub tools: Vec<ToolRow>,
    /// Per role (`guest`, `user`, `admin`): the schemas it is shown every round, in tokens.
    pub schema_tokens: std::collections::BTreeMap<&'static str, usize>,
}

/// The tools one role is shown every round and what their schemas cost together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoleTools {
    pub role: &'static str,
    pub tools: Vec<ToolRow>,
    pub schema_tokens: usize,
}

/// The first sentence of a description: what a table has room for.
pub fn summary(description: &str) -> &str {
    description
        .split(". ")
        .next()
        .unwrap_or_default()
        .trim_end_matches('.')
}

fn row(tool: &ToolDefinition, roles: Option<Vec<&'static str>>) -> ToolRow {
    ToolRow {
        name: tool.name().to_owned(),
        visibility: tool.visibility().as_str(),
        min_role: tool.min_role().as_str(),
        roles,
        description: summary(tool.description()).to_owned(),
        schema_tokens: crate::budget::schema_tokens(&[tool.spec()]),
    }
}

/// What the schemas a task of `role` is shown every round cost, in cl100k tokens.
pub fn role_schema_tokens(registry: &ToolRegistry, role: Role) -> usize {
    let specs: Vec<_> = registry.presented(role).iter().map(|t| t.spec()).collect();
    crate::budget::schema_tokens(&specs)
}

/// The role × tool matrix of `registry`.
pub fn matrix(registry: &ToolRegistry) -> Matrix {
    let names: Vec<(Role, std::sync::Arc<[String]>)> = Role::ALL
        .iter()
        .map(|role| (*role, registry.names(*role)))
        .collect();
    let tools = registry
        .all()
        .iter()
        .map(|tool| {
            let roles = names
                .iter()
                .filter(|(_, shown)| shown.iter().any(|n| n == tool.name()))
                .map(|(role, _)| role.as_str())
                .collect();
            row(tool.as_ref(), Some(roles))
        })
        .collect();
    let schema_tokens = Role::ALL
        .iter()
        .map(|role| (role.as_str(), role_schema_tokens(registry, *role)))
        .collect();
    Matrix {
        tools,
        schema_tokens,
    }
}

/// The tools a task of `role` is shown every round.
pub fn for_role(registry: &ToolRegistry, role: Role) -> RoleTools {
    RoleTools {
        role: role.as_str(),
        tools: registry
            .presented(role)
            .iter()
            .map(|tool| row(tool.as_ref(), None))
            .collect(),
        schema_tokens: role_schema_tokens(registry, role),
    }
}
