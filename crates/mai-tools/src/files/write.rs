//! The `write` tool: create, replace or append to a text file.
//!
//! A replacement is atomic — a temporary file in the same directory, then a rename over the
//! name — so a reader never sees half a file and a failed write leaves the old one. Every
//! operation is on the parent directory's `Dir` handle with a single name, never on a path. It
//! must not write to anything but a regular file, must not accept more than
//! `[files] max_write_bytes` per call, and must not leave a non-admin space over its quota
//! (`[files] quota_mb`, checked on every write and append before anything is written).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use cap_fs_ext::OpenOptionsSyncExt;
use cap_std::fs::{Dir, File, Metadata, OpenOptions};
use mai_core::tool::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Sandbox;
use super::policy::{self, Access, WriteTarget};
use super::space::Quota;

pub(super) const DESCRIPTION: &str = "Create or replace a text file in your file space (paths \
relative to its root; missing directories are created), or append to it.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteArgs {
    path: String,
    content: String,
    /// Add to the end of the file instead of replacing it.
    #[serde(default)]
    append: bool,
}

pub(super) struct WriteTool(pub(super) Arc<Sandbox>);

impl TypedTool for WriteTool {
    type Args = WriteArgs;

    async fn call(&self, ctx: &ToolContext, args: WriteArgs) -> Result<Value, ToolError> {
        let max = ctx.config().files.max_write_bytes;
        let size = args.content.len() as u64;
        if size > max {
            return Err(ToolError::new(format!(
                "content is {size} bytes; [files] max_write_bytes is {max}: write it in parts \
                 with append=true"
            )));
        }
        self.0
            .run(ctx, move |space| {
                let access = &space.access;
                let confined = access.is_confined();
                let path = policy::check_path(&args.path, confined).map_err(ToolError::new)?;
                if args.path.ends_with('/') {
                    return Err(ToolError::new(format!(
                        "`{}` ends with `/`: give a file name to write",
                        args.path
                    )));
                }
                let failed = |e: io::Error| policy::io_failure("write", &args.path, &e, confined);
                // Held from the quota check to the end of the write; checked before anything
                // (a missing directory included) is created.
                let _quota_guard = space.quota.as_ref().map(Quota::lock);
                if let (Some(quota), Access::Confined(root)) = (&space.quota, access) {
                    let replaced = if args.append {
                        0
                    } else {
                        replaced_len(root, &path)
                    };
                    quota.check(root, replaced, size)?;
                }
                let target = policy::write_target(access, &path).map_err(failed)?;
                write_into(&target, args.content.as_bytes(), args.append).map_err(failed)?;
                Ok(json!({"success": true, "path": args.path, "bytes_written": size}))
            })
            .await
    }
}

/// The size of the regular file a replacement of `path` frees (through a symlink inside the
/// space, as the write goes); 0 when there is none or it cannot be told, which only makes the
/// quota check stricter.
fn replaced_len(root: &Dir, path: &Path) -> u64 {
    root.metadata(path)
        .ok()
        .filter(Metadata::is_file)
        .map_or(0, |meta| meta.len())
}

fn write_into(target: &WriteTarget, content: &[u8], append: bool) -> io::Result<()> {
    let existing = match target.dir.symlink_metadata(&target.name) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(meta) = &existing {
        refuse_non_regular(meta)?;
    }
    if append {
        let mut options = OpenOptions::new();
        // Non-blocking: a FIFO swapped in after the check above must not hang the call.
        options.append(true).create(true).nonblock(true);
        let mut file = target.dir.open_with(&target.name, &options)?;
        let meta = file.metadata()?;
        refuse_non_regular(&meta)?;
        file.write_all(content)?;
        return file.sync_all();
    }
    let (temp_name, mut temp) = create_temp(target)?;
    let written = (|| {
        temp.write_all(content)?;
        // A replaced file keeps its mode (an executable script stays executable).
        if let Some(meta) = &existing {
            temp.set_permissions(meta.permissions())?;
        }
        temp.sync_all()?;
        target.dir.rename(&temp_name, &target.dir, &target.name)
    })();
    if written.is_err() {
        let _ = target.dir.remove_file(&temp_name);
    }
    written
}

fn refuse_non_regular(meta: &Metadata) -> io::Result<()> {
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        // Only after the name was swapped for a symlink since it was resolved.
        "a symlink that appeared during the write"
    } else {
        "a device, FIFO or socket"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}; only regular files can be written"),
    ))
}

/// A new, empty temporary file beside the target. `create_new` means a leftover of a crashed
/// write is never reused; a fresh name is tried instead.
fn create_temp(target: &WriteTarget) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    let mut attempts = 0;
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = PathBuf::from(format!(".mai-write-{}-{nanos}-{n}.tmp", std::process::id()));
        match target.dir.open_with(&name, &options) {
            Ok(file) => return Ok((name, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 8 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}
