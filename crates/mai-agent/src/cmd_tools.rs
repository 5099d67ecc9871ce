//! `mai-agent tools`: what each role may call — exactly the tool list an agent task of that role
//! gets every round, built the way the service builds it. The matrix (and its `--json`) is
//! [`mai_tools::matrix`], the same function `GET /v1/tools` answers with. Must not: work out
//! which role sees which tool itself.

use std::sync::Arc;

use anyhow::Result;
use mai_core::role::Role;
use mai_core::tool::ToolRegistry;
use mai_core::tool::discovery::SYNTHETIC_NAMES;
use mai_engine::Engine;
use mai_tools::matrix;

/// Prints the tools of `role` (or the role × tool matrix when `role` is `None`).
pub fn print(engine: &Arc<Engine>, role: Option<Role>, as_json: bool) -> Result<()> {
    let registry = engine.registry();
    match role {
        Some(role) => print_role(registry, role, as_json),
        None => print_matrix(registry, as_json),
    }
}

/// The tools a task of `role` is shown every round, with what their schemas cost.
fn print_role(registry: &ToolRegistry, role: Role, as_json: bool) -> Result<()> {
    let shown = matrix::for_role(registry, role);
    if as_json {
        println!("{}", serde_json::to_string(&shown)?);
        return Ok(());
    }
    println!(
        "Tools a task with role {role} sees every round ({}):",
        shown.tools.len()
    );
    let width = name_width(shown.tools.iter().map(|t| t.name.as_str()));
    println!(
        "  {:width$}  {:12}  {:8}  DESCRIPTION",
        "NAME", "VISIBILITY", "MIN ROLE"
    );
    for tool in &shown.tools {
        println!(
            "  {:width$}  {:12}  {:8}  {}",
            tool.name, tool.visibility, tool.min_role, tool.description
        );
    }
    println!(
        "Schemas as sent each round: {} cl100k tokens.",
        shown.schema_tokens
    );
    println!(
        "Answered at dispatch, never presented: {} (fallback for models that still call them).",
        SYNTHETIC_NAMES.join(", ")
    );
    Ok(())
}

/// The width of a column of tool names (at least its heading's).
fn name_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(str::len).max().unwrap_or(4).max(4)
}

/// Every tool, and which roles may call it.
fn print_matrix(registry: &ToolRegistry, as_json: bool) -> Result<()> {
    let all = matrix::matrix(registry);
    if as_json {
        println!("{}", serde_json::to_string(&all)?);
        return Ok(());
    }
    let width = name_width(all.tools.iter().map(|t| t.name.as_str()));
    println!("  {:width$}  guest  user  admin", "TOOL");
    for tool in &all.tools {
        let roles = tool.roles.as_deref().unwrap_or_default();
        let mark = |role: Role| {
            if roles.contains(&role.as_str()) {
                "✓"
            } else {
                "·"
            }
        };
        println!(
            "  {:width$}  {:^5}  {:^4}  {:^5}",
            tool.name,
            mark(Role::Guest),
            mark(Role::User),
            mark(Role::Admin)
        );
    }
    Ok(())
}
