//! Hot reload (see docs/design.md, "Limits"): a valid config is swapped in and the tools behind switches follow;
//! an invalid one changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Harness, RuleModel, test_config};
use mai_core::model::ChatResponse;
use mai_core::role::Role;

fn admin_tools(h: &Harness) -> Vec<String> {
    h.engine.registry().names(Role::Admin).to_vec()
}

#[tokio::test]
async fn switches_follow_a_reload_and_keep_the_spec_order() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("ok")));
    let mut config = test_config();
    config.shell.enabled = false;
    config.subagent.enabled = true;
    let h = Harness::start(config.clone(), Arc::new(model)).await;
    let before = admin_tools(&h);
    assert!(!before.iter().any(|t| t == "run_command"));
    assert!(before.iter().any(|t| t == "ask_subagent"));

    config.shell.enabled = true;
    config.subagent.enabled = false;
    config.task.max_rounds = 7;
    h.engine.reload_config(config.clone()).await.unwrap();
    let after = admin_tools(&h);
    assert!(after.iter().any(|t| t == "run_command"));
    assert!(!after.iter().any(|t| t.starts_with("ask_subagent")));
    assert_eq!(h.engine.config().config().task.max_rounds, 7);
    // The order of docs/design.md, "Tools": command execution comes right after send_message (no plugin APIs, no
    // sub-agents here), whatever was registered later.
    let send = after.iter().position(|t| t == "send_message").unwrap();
    assert_eq!(after[send + 1], "run_command");

    // Back again: the same list as at the start.
    config.shell.enabled = false;
    config.subagent.enabled = true;
    h.engine.reload_config(config).await.unwrap();
    assert_eq!(admin_tools(&h), before);
}

#[tokio::test]
async fn an_invalid_reload_keeps_the_last_good_config_and_says_why() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("ok")));
    let mut config = test_config();
    config.task.max_rounds = 9;
    let h = Harness::start(config.clone(), Arc::new(model)).await;
    let mut bad = config.clone();
    bad.task.max_rounds = 0;
    bad.shell.enabled = true;
    let error = h.engine.reload_config(bad).await.unwrap_err().to_string();
    assert!(error.contains("max_rounds"), "{error}");
    assert_eq!(h.engine.config().config().task.max_rounds, 9);
    assert!(!admin_tools(&h).iter().any(|t| t == "run_command"));
}
