//! Cross-plugin API tools (docs/tools.md): one `call_{api}` tool per host plugin API that
//! `[plugin_api] allowlist` names — discoverable, min_role admin, one free-form `args` object.
//!
//! Owns which APIs become tools and the name mapping (`weather.today` → `call_weather_today`:
//! every character outside `a-zA-Z0-9_-` becomes `_`; names the registry would refuse, and names
//! that collide after mapping, are skipped with a warning). mai-agent's own endpoints are never
//! exposed, even when allowlisted: they would run as admin and bypass task ownership. An API is
//! mai-agent's own when (case-insensitive) its plugin is `mai-agent`/`mai_agent`, its name starts
//! with `mai_agent.`/`mai-agent.`, or its last dotted segment starts with `subagent_` (the
//! planner's task tools, however a bridge re-exports them).
//!
//! Each call re-checks the role and the allowlist of the call's config snapshot, so removing an
//! API from the allowlist stops it even before the tools are rebuilt.

use std::collections::HashSet;
use std::sync::Arc;

use mai_core::host::{Host, HostError, PluginApi};
use mai_core::role::{Role, require};
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
    validate_tool_name,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The name prefix of every cross-plugin API tool (`call_{api}`).
pub const PREFIX: &str = "call_";

/// The longest host description kept in a tool's description (tokens on every request).
const MAX_DESCRIPTION_CHARS: usize = 300;

/// Why the plugin API tools could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PluginApiError {
    #[error("could not list the host's plugin APIs: {0}")]
    List(#[from] HostError),
    #[error(transparent)]
    Definition(#[from] ToolDefinitionError),
}

/// `call_*` tools for the allowlisted host APIs. An empty allowlist gives none without asking
/// the host.
pub async fn plugin_api_tools(
    host: Arc<dyn Host>,
    allowlist: &[String],
) -> Result<Vec<ToolDefinition>, PluginApiError> {
    if allowlist.is_empty() {
        return Ok(Vec::new());
    }
    let mut tools = Vec::new();
    let mut names = HashSet::new();
    for api in host.list_apis().await? {
        if !allowlist.contains(&api.name) {
            continue;
        }
        if is_own_endpoint(&api) {
            tracing::warn!(api = %api.name, "allowlisted API is mai-agent's own endpoint; not exposed");
            continue;
        }
        let name = tool_name(&api.name);
        if let Err(error) = validate_tool_name(&name) {
            tracing::warn!(api = %api.name, %error, "plugin API skipped");
            continue;
        }
        if !names.insert(name.clone()) {
            tracing::warn!(api = %api.name, tool = %name, "plugin API skipped: tool name taken");
            continue;
        }
        tools.push(
            ToolDefinition::typed(
                name,
                description(&api),
                Visibility::Discoverable,
                Role::Admin,
                CallApi {
                    host: Arc::clone(&host),
                    api: api.name,
                },
            )?
            .with_effects(Effect::CallsPluginApis),
        );
    }
    Ok(tools)
}

/// Whether an API belongs to mai-agent itself (see the module comment).
pub fn is_own_endpoint(api: &PluginApi) -> bool {
    let plugin = api.plugin.trim().to_ascii_lowercase().replace('-', "_");
    let name = api.name.trim().to_ascii_lowercase();
    let last_segment = name.rsplit('.').next().unwrap_or(&name);
    plugin == "mai_agent"
        || name.starts_with("mai_agent.")
        || name.starts_with("mai-agent.")
        || last_segment.starts_with("subagent_")
}

/// `call_` + the API name with every character a tool name cannot hold replaced by `_`.
pub fn tool_name(api: &str) -> String {
    let mapped: String = api
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{PREFIX}{mapped}")
}

fn description(api: &PluginApi) -> String {
    let text = api.description.trim();
    let mut short: String = text.chars().take(MAX_DESCRIPTION_CHARS).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    if short.is_empty() {
        format!("Call the host plugin API `{}`.", api.name)
    } else {
        format!(
            "{short} (host plugin API `{}`; arguments go in args)",
            api.name
        )
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CallApiArgs {
    /// The API's arguments.
    #[serde(default)]
    args: Map<String, Value>,
}

struct CallApi {
    host: Arc<dyn Host>,
    api: String,
}

impl TypedTool for CallApi {
    type Args = CallApiArgs;

    async fn call(&self, ctx: &ToolContext, args: CallApiArgs) -> Result<Value, ToolError> {
        require(ctx.role(), Role::Admin).map_err(ToolError::new)?;
        if !ctx.config().plugin_api.allowlist.contains(&self.api) {
            return Err(ToolError::new(format!(
                "plugin API `{}` is no longer in [plugin_api] allowlist",
                self.api
            )));
        }
        let result = self
            .host
            .call_api(&self.api, Value::Object(args.args))
            .await
            .map_err(|e| ToolError::new(format!("{e}; check args or retry later")))?;
        Ok(json!({"success": true, "result": result}))
    }
}
