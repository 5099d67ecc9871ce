//! The file tools `read` and `write` (docs/tools.md#files): discoverable, min_role user, confined
//! to `data_dir/files/` unless an admin task runs with `[files] admin_open = true`; a non-admin
//! task only reaches its requester's own space in there, under a quota.
//!
//! This module owns building the two definitions and the sandbox root they share; whose space a
//! call reaches and its quota live in [`space`], the path policy in [`policy`], each tool in its
//! own file. It must not take a role, a root or a limit from the model's arguments: the role and
//! requester come from the `ToolContext`, the limits from its config snapshot at each call.

mod policy;
mod read;
mod space;
mod write;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use mai_core::role::Role;
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, Visibility,
};

pub use policy::PathRefused;

/// Why the file tools could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("cannot create or open the file sandbox root {path}: {source}")]
    Root { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Definition(#[from] ToolDefinitionError),
}

/// `read` and `write`, confined to `files_root` (normally `data_dir/files/`, created if missing):
/// the whole of it for admins, a space per requester beneath it for everyone else.
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
        quota_locks: space::QuotaLocks::default(),
    });
    Ok(vec![
        ToolDefinition::typed(
            "read",
            read::DESCRIPTION,
            Visibility::Discoverable,
            Role::User,
            read::ReadTool(Arc::clone(&sandbox)),
        )?
        .with_effects(Effect::ReadsFiles),
        ToolDefinition::typed(
            "write",
            write::DESCRIPTION,
            Visibility::Discoverable,
            Role::User,
            write::WriteTool(sandbox),
        )?
        .with_effects(Effect::WritesFiles),
    ])
}

/// The sandbox root, opened once.
struct Sandbox {
    root: PathBuf,
    dir: Dir,
    quota_locks: space::QuotaLocks,
}

impl Sandbox {
    /// Runs blocking file work off the async runtime, in the file space this call's role and
    /// requester choose ([`space::root_for`], the only place that decides it).
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        ctx: &ToolContext,
        work: impl FnOnce(&space::Space) -> Result<T, ToolError> + Send + 'static,
    ) -> Result<T, ToolError> {
        let root = space::root_for(ctx)?;
        let quota_mb = ctx.config().files.quota_mb;
        let sandbox = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let space = space::Space::open(
                &sandbox.dir,
                &sandbox.root,
                &root,
                &sandbox.quota_locks,
                quota_mb,
            )
            .map_err(|e| ToolError::new(format!("cannot open your file space: {e}")))?;
            work(&space)
        })
        .await
        .map_err(|e| ToolError::new(format!("file operation did not finish: {e}")))?
    }
}
