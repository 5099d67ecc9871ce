//! The file tools `read` and `write` (SYSTEM.md §5.3): discoverable, min_role user, confined to
//! `data_dir/files/` unless an admin task runs with `[files] admin_open = true`.
//!
//! This module owns building the two definitions and the sandbox root they share; the path policy
//! lives in [`policy`], each tool in its own file. It must not take a role, a root or a limit
//! from the model's arguments: the role comes from the `ToolContext`, the limits from its config
//! snapshot at each call.

mod policy;
mod read;
mod write;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use mai_core::role::Role;
use mai_core::tool::{ToolContext, ToolDefinition, ToolDefinitionError, ToolError, Visibility};

pub use policy::PathRefused;

/// Why the file tools could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("cannot create or open the file sandbox root {path}: {source}")]
    Root { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Definition(#[from] ToolDefinitionError),
}

/// `read` and `write`, confined to `files_root` (normally `data_dir/files/`, created if missing).
pub fn file_tools(files_root: PathBuf) -> Result<Vec<ToolDefinition>, FilesError> {
    let root_error = |source| FilesError::Root {
        path: files_root.clone(),
        source,
    };
    std::fs::create_dir_all(&files_root).map_err(root_error)?;
    // The only ambient open of a confined call's filesystem: everything after goes through `dir`.
    let dir = Dir::open_ambient_dir(&files_root, ambient_authority()).map_err(root_error)?;
    let sandbox = Arc::new(Sandbox {
        root: files_root,
        dir,
    });
    Ok(vec![
        ToolDefinition::typed(
            "read",
            read::DESCRIPTION,
            Visibility::Discoverable,
            Role::User,
            read::ReadTool(Arc::clone(&sandbox)),
        )?,
        ToolDefinition::typed(
            "write",
            write::DESCRIPTION,
            Visibility::Discoverable,
            Role::User,
            write::WriteTool(sandbox),
        )?,
    ])
}

/// The sandbox root, opened once.
struct Sandbox {
    root: PathBuf,
    dir: Dir,
}

impl Sandbox {
    /// Runs blocking file work off the async runtime, with the access this call's role allows.
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        ctx: &ToolContext,
        work: impl FnOnce(&policy::Access<'_>) -> Result<T, ToolError> + Send + 'static,
    ) -> Result<T, ToolError> {
        let host_open = policy::opens_host(ctx);
        let sandbox = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let access = sandbox.access(host_open);
            work(&access)
        })
        .await
        .map_err(|e| ToolError::new(format!("file operation did not finish: {e}")))?
    }

    fn access(&self, host_open: bool) -> policy::Access<'_> {
        if host_open {
            policy::Access::Host { base: &self.root }
        } else {
            policy::Access::Confined(&self.dir)
        }
    }
}
