//! Shared fixtures for the mai-core integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use mai_core::config::Config;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{FixedRole, ToolContext, ToolDefinition, ToolError, ToolHandler, Visibility};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A handler that counts its calls and echoes its arguments.
#[derive(Default)]
pub struct Counting(pub AtomicUsize);

#[async_trait]
impl ToolHandler for Counting {
    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"success": true, "echo": args}))
    }
}

pub fn tool(
    name: &str,
    visibility: Visibility,
    min_role: Role,
    handler: Arc<Counting>,
) -> ToolDefinition {
    ToolDefinition::new(
        name,
        format!("test tool {name}"),
        json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        visibility,
        min_role,
        handler,
    )
    .unwrap()
}

pub fn ctx(role: Role) -> ToolContext {
    ToolContext::new(
        TaskId::new(),
        "qq:1".parse().unwrap(),
        mai_core::ids::StreamId::new("s1").unwrap(),
        "qq",
        Arc::new(FixedRole(role)),
        CancellationToken::new(),
        Arc::new(Config::default()),
    )
}
