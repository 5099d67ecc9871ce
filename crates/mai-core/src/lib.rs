//! mai-agent's domain: roles, identifiers, the task record, the tool system, config types and the
//! capability traits (store, clock) other crates implement, and the retry backoff schedule. This
//! crate does no I/O.

pub mod backoff;
pub mod capabilities;
pub mod clock;
pub mod config;
pub mod host;
pub mod ids;
pub mod lease;
pub mod model;
pub mod permission;
pub mod role;
pub mod store;
pub mod task;
pub mod time_zone;
pub mod tool;
pub mod usage;
