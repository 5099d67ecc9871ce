#![allow(clippy::expect_used)]
//! Presentation and the execution gate with 200 registered tools.
//!
//! `cargo bench -p mai-core --bench registry`

use std::hint::black_box;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use mai_core::config::Config;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{
    FixedRole, ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Noop;

#[async_trait]
impl ToolHandler for Noop {
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        Ok(Value::Null)
    }
}

fn registry_with(n: usize) -> ToolRegistry {
    let registry = ToolRegistry::new();
    let roles = [Role::Guest, Role::User, Role::Admin];
    registry.edit(|edit| {
        for i in 0..n {
            let visibility = if i == 0 {
                Visibility::Essential
            } else {
                Visibility::Discoverable
            };
            edit.register(
                ToolDefinition::new(
                    format!("tool_{i}"),
                    "A benchmark tool that does nothing at all.",
                    json!({
                        "type": "object",
                        "properties": {
                            "query": {"type": "string", "description": "what to look for"},
                            "limit": {"type": "integer", "minimum": 1, "maximum": 50}
                        },
                        "required": ["query"]
                    }),
                    visibility,
                    roles[i % 3],
                    Arc::new(Noop),
                )
                .expect("valid tool"),
            );
        }
    });
    registry
}

fn bench(c: &mut Criterion) {
    let registry = registry_with(200);
    c.bench_function("present_one_role_200_tools", |b| {
        b.iter(|| {
            let essential = registry.list_essential(black_box(Role::User));
            let discoverable = registry.list_discoverable(black_box(Role::User));
            black_box((essential.len(), discoverable.len()))
        })
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let ctx = ToolContext::new(
        TaskId::new(),
        "qq:1".parse().expect("owner"),
        mai_core::ids::StreamId::new("s").expect("stream"),
        "qq",
        Arc::new(FixedRole(Role::Admin)),
        CancellationToken::new(),
        Arc::new(Config::default()),
    );
    let args = json!({"query": "disk usage", "limit": 5});
    c.bench_function("execute_gate_and_validation_noop_handler", |b| {
        b.iter(|| {
            let outcome = runtime.block_on(registry.execute(
                black_box("tool_150"),
                Role::Admin,
                args.clone(),
                &ctx,
            ));
            black_box(outcome.kind)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
