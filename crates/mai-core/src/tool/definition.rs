//! A tool's definition: its name, what the model reads about it, its argument schema, who may
//! call it, what it does (its effects), and the handler that runs it.
//!
//! The schema is compiled once, here, so validation on every call costs no parsing. Typed tools
//! ([`TypedTool`]) derive their schema from the argument struct, so schema and parsing cannot
//! drift apart.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::ToolContext;
use super::effect::Effects;
use crate::role::Role;

/// Whether a tool is always in the model's tool list or one of the role-filtered extras.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Always presented (only `ask_user` today).
    Essential,
    /// Presented to every role that may use it; also listed by `list_tools`.
    Discoverable,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Essential => "essential",
            Visibility::Discoverable => "discoverable",
        }
    }
}

/// A handler failure, told to the model as `{"success": false, "error": …}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(message: impl fmt::Display) -> Self {
        ToolError(message.to_string())
    }
}

/// Runs one tool call. Arguments were validated against the tool's schema before this is called.
#[async_trait]
pub trait ToolHandler: Send + Sync + 'static {
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError>;
}

/// A tool whose arguments are a Rust type: the schema is derived from `Args`, and the handler
/// receives `Args`, never raw JSON.
pub trait TypedTool: Send + Sync + 'static {
    type Args: DeserializeOwned + JsonSchema + Send;

    fn call(
        &self,
        ctx: &ToolContext,
        args: Self::Args,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send;
}

struct TypedHandler<T>(T);

#[async_trait]
impl<T: TypedTool> ToolHandler for TypedHandler<T> {
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        // The schema gate already ran; a failure here means the schema and the type disagree,
        // which `schema_for` makes impossible short of a custom Deserialize impl.
        let args: T::Args = serde_json::from_value(args)
            .map_err(|e| ToolError::new(format!("invalid arguments: {e}")))?;
        self.0.call(ctx, args).await
    }
}

/// Why a definition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolDefinitionError {
    #[error("invalid tool name `{0}`: names are 1-64 characters of a-z, A-Z, 0-9, `_` or `-`")]
    InvalidName(String),
    #[error("tool name `{0}` is reserved for the synthetic discovery tools")]
    ReservedName(String),
    #[error("tool `{name}`: parameters must be a JSON Schema object with \"type\": \"object\"")]
    ParametersNotObject { name: String },
    #[error("tool `{name}`: parameters are not a valid JSON Schema: {detail}")]
    InvalidSchema { name: String, detail: String },
}

/// Checks `^[a-zA-Z0-9_-]{1,64}$`.
pub fn validate_tool_name(name: &str) -> Result<(), ToolDefinitionError> {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(ToolDefinitionError::InvalidName(name.to_owned()))
    }
}

/// One tool.
pub struct ToolDefinition {
    name: String,
    description: String,
    /// Shared with every request that presents the tool (a schema is kilobytes).
    parameters: crate::model::ToolSchema,
    visibility: Visibility,
    min_role: Role,
    effects: Effects,
    handler: Arc<dyn ToolHandler>,
    validator: jsonschema::Validator,
}

impl ToolDefinition {
    /// A tool with a hand-written schema. The name and schema are checked here.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        visibility: Visibility,
        min_role: Role,
        handler: Arc<dyn ToolHandler>,
    ) -> Result<Self, ToolDefinitionError> {
        let name = name.into();
        validate_tool_name(&name)?;
        if super::discovery::is_synthetic(&name) {
            return Err(ToolDefinitionError::ReservedName(name));
        }
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(ToolDefinitionError::ParametersNotObject { name });
        }
        let validator = jsonschema::validator_for(&parameters).map_err(|e| {
            ToolDefinitionError::InvalidSchema {
                name: name.clone(),
                detail: e.to_string(),
            }
        })?;
        Ok(ToolDefinition {
            name,
            description: description.into(),
            parameters: parameters.into(),
            visibility,
            min_role,
            effects: Effects::NONE,
            handler,
            validator,
        })
    }

    /// A tool whose schema is derived from `T::Args`.
    pub fn typed<T: TypedTool>(
        name: impl Into<String>,
        description: impl Into<String>,
        visibility: Visibility,
        min_role: Role,
        tool: T,
    ) -> Result<Self, ToolDefinitionError> {
        ToolDefinition::new(
            name,
            description,
            schema_of::<T::Args>(),
            visibility,
            min_role,
            Arc::new(TypedHandler(tool)),
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON Schema of the arguments, as sent to the model.
    pub fn parameters(&self) -> &Value {
        &self.parameters
    }

    pub fn visibility(&self) -> Visibility {
        self.visibility
    }

    pub fn min_role(&self) -> Role {
        self.min_role
    }

    /// What the tool does (see [`super::Effect`]); filters read this, never the name.
    pub fn effects(&self) -> Effects {
        self.effects
    }

    /// The definition with `effects` as its effects; set where the tool is built.
    pub fn with_effects(mut self, effects: impl Into<Effects>) -> Self {
        self.effects = effects.into();
        self
    }

    /// The tool as presented to a model in a request's tool list.
    pub fn spec(&self) -> crate::model::ToolSpec {
        crate::model::ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
        }
    }

    pub(crate) fn handler(&self) -> &Arc<dyn ToolHandler> {
        &self.handler
    }

    pub(crate) fn validator(&self) -> &jsonschema::Validator {
        &self.validator
    }
}

impl fmt::Debug for ToolDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDefinition")
            .field("name", &self.name)
            .field("visibility", &self.visibility)
            .field("min_role", &self.min_role)
            .field("effects", &self.effects)
            .finish_non_exhaustive()
    }
}

/// The model-facing schema of `T`: subschemas inlined (models handle `$ref` poorly) and no
/// `$schema`/`title` noise, which costs tokens on every round.
fn schema_of<T: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(object) = value.as_object_mut() {
        object.remove("title");
        object.remove("$schema");
        // An args struct with no fields still gets an explicit (empty) object schema.
        object
            .entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    value
}
