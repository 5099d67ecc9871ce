//! `mai-agent tools`: what each role may call — exactly the tool list an agent task of that role
//! gets every round, built the way the service builds it.

use std::sync::Arc;

use anyhow::Result;
use mai_core::role::Role;
use mai_core::tool::ToolRegistry;
use mai_core::tool::discovery::SYNTHETIC_NAMES;
use mai_engine::Engine;
use serde_json::json;

/// Prints the tools of `role` (or the role × tool matrix when `role` is `None`).
pub fn print(engine: &Arc<Engine>, role: Option<Role>, as_json: bool) -> Result<()> {
    let registry = engine.registry();
    match role {
        Some(role) => print_role(registry, role, as_json),
        None => print_matrix(registry, as_json),
    }
    Ok(())
}

/// The tools a task of `role` is shown every round, with what their schemas cost.
fn print_role(registry: &ToolRegistry, role: Role, as_json: bool) {
    let tools = registry.presented(role);
    let specs: Vec<_> = tools.iter().map(|t| t.spec()).collect();
    let tokens = mai_tools::budget::schema_tokens(&specs);
    if as_json {
        let list: Vec<_> = tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name(),
                    "visibility": t.visibility().as_str(),
                    "min_role": t.min_role().as_str(),
                })
            })
            .collect();
        println!(
            "{}",
            json!({"role": role.as_str(), "tools": list, "schema_tokens": tokens})
        );
        return;
    }
    println!(
        "Tools a task with role {role} sees every round ({}):",
        tools.len()
    );
    let width = tools
        .iter()
        .map(|t| t.name().len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "  {:width$}  {:12}  {:8}  DESCRIPTION",
        "NAME", "VISIBILITY", "MIN ROLE"
    );
    for tool in tools.iter() {
        let description = tool.description().split(". ").next().unwrap_or_default();
        println!(
            "  {:width$}  {:12}  {:8}  {}",
            tool.name(),
            tool.visibility().as_str(),
            tool.min_role().as_str(),
            description.trim_end_matches('.')
        );
    }
    println!("Schemas as sent each round: {tokens} cl100k tokens.");
    println!(
        "Answered at dispatch, never presented: {} (fallback for models that still call them).",
        SYNTHETIC_NAMES.join(", ")
    );
}

/// Every tool, and which roles may call it.
fn print_matrix(registry: &ToolRegistry, as_json: bool) {
    let all = registry.all();
    if as_json {
        let matrix: Vec<_> = all
            .iter()
            .map(|t| {
                let roles: Vec<&str> = Role::ALL
                    .iter()
                    .filter(|r| registry.names(**r).iter().any(|n| n == t.name()))
                    .map(|r| r.as_str())
                    .collect();
                json!({"name": t.name(), "visibility": t.visibility().as_str(),
                       "min_role": t.min_role().as_str(), "roles": roles})
            })
            .collect();
        println!("{}", json!({"tools": matrix}));
        return;
    }
    let width = all.iter().map(|t| t.name().len()).max().unwrap_or(4).max(4);
    println!("  {:width$}  guest  user  admin", "TOOL");
    for tool in &all {
        let mark = |role: Role| {
            if registry.names(role).iter().any(|n| n == tool.name()) {
                "✓"
            } else {
                "·"
            }
        };
        println!(
            "  {:width$}  {:^5}  {:^4}  {:^5}",
            tool.name(),
            mark(Role::Guest),
            mark(Role::User),
            mark(Role::Admin)
        );
    }
}
