//! Token economy: the tool schemas a role is sent every round stay within their budgets
//! (admin ≤ 2,000 cl100k tokens with every default tool on, guest ≤ 700).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use mai_core::model::ChatResponse;
use mai_core::role::Role;
use mai_core::tool::ToolRegistry;

const ADMIN_BUDGET: usize = 2_000;
const GUEST_BUDGET: usize = 700;

#[tokio::test]
async fn every_roles_schemas_fit_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config();
    config.shell.enabled = true;
    let engine = mai_engine::Engine::new(mai_engine::EngineDeps {
        store: Arc::new(
            mai_store::SqliteStore::open(&dir.path().join("t.db"))
                .await
                .unwrap(),
        ),
        model: RuleModel::new(|_| Ok(ChatResponse::text("x"))),
        host: Arc::new(RecordingHost::default()),
        registry: Arc::new(ToolRegistry::new()),
        config: Arc::new(mai_core::config::LiveConfig::new(config).unwrap()),
        prompts: Arc::new(mai_engine::Prompts::embedded()),
        clock: Arc::new(mai_core::clock::SystemClock),
        files_root: Some(dir.path().join("files")),
    })
    .await
    .unwrap();
    let tokens = |role: Role| {
        let specs: Vec<_> = engine
            .registry()
            .presented(role)
            .iter()
            .map(|t| t.spec())
            .collect();
        (specs.len(), mai_tools::budget::schema_tokens(&specs))
    };
    let (guest_tools, guest) = tokens(Role::Guest);
    let (user_tools, user) = tokens(Role::User);
    let (admin_tools, admin) = tokens(Role::Admin);
    println!(
        "schema tokens per round: guest {guest} ({guest_tools} tools), user {user} ({user_tools}), admin {admin} ({admin_tools})"
    );
    assert_eq!(guest_tools, 5, "guests see the five information tools");
    assert!(admin_tools > user_tools && user_tools > guest_tools);
    assert!(
        guest <= GUEST_BUDGET,
        "guest schemas cost {guest} tokens, budget {GUEST_BUDGET}"
    );
    assert!(
        admin <= ADMIN_BUDGET,
        "admin schemas cost {admin} tokens, budget {ADMIN_BUDGET}"
    );
}
