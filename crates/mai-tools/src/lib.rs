//! The built-in tools of the agent-loop channel (docs/design.md, "Tools"), each a small module.
//! Tools see only `mai-core` traits: what a tool needs from the engine or the host arrives as a
//! trait.

pub mod budget;
pub mod files;
pub mod info;
pub mod matrix;
pub mod plugin_api;
pub mod reach;
pub mod send_message;
pub mod shell;
pub mod tasks;

pub use reach::{Reach, check_reach};
