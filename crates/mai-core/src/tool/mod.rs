//! The tool system (docs/design.md, "Tools"): definitions and their effects, the role-gated
//! registry, argument validation, the context every handler receives, and the synthetic
//! discovery fallback.
//!
//! Three gates share one comparison ([`crate::role::require`]): presentation (the registry's
//! per-role lists), execution ([`ToolRegistry::execute`] checks again and never runs a refused
//! handler) and the tool itself (file tools read their role from the [`ToolContext`]).

mod context;
mod definition;
pub mod discovery;
mod effect;
mod outcome;
mod registry;
mod validation;

pub use context::{FixedRole, RoleProvider, ToolContext};
pub use definition::{
    ToolDefinition, ToolDefinitionError, ToolError, ToolHandler, TypedTool, Visibility,
    validate_tool_name,
};
pub use effect::{Effect, Effects};
pub use outcome::{OutcomeKind, ToolOutcome};
pub use registry::{RegistryEdit, ToolRegistry};
pub use validation::{MAX_ARGUMENT_BYTES, MAX_ARGUMENT_DEPTH};
