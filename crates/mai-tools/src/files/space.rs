//! Whose files one call reaches (its file space) and how much it may keep there.
//!
//! The layout beneath the sandbox root (`data_dir/files/`):
//! - `people/<platform>/<user_id>/` — the space of a requester (the person a task acts for);
//! - `planner/<stream_id>/` — the space of a task with no requester, one per chat;
//! - anything else (the files kept before spaces existed) belongs to no one and only admins
//!   reach it, since an admin call's root is the whole sandbox (or the host with
//!   `[files] admin_open`).
//!
//! Each component is encoded by [`encode_name`] so that no id can name `.`, `..`, a `/` or the
//! space of another id. [`root_for`] is the only place that decides a call's root; every file
//! operation opens its space through [`Space::open`]. The quota (`[files] quota_mb`) bounds
//! non-admin spaces; it is checked by walking the space on each write (with cap-std, never
//! following a symlink), which is fine for spaces of some thousands of files.
//!
//! This module must not take a role, a requester or a root from the model's arguments, and must
//! not open a space except beneath the sandbox `Dir`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;
use mai_core::role::Role;
use mai_core::tool::{ToolContext, ToolError};

use super::policy::Access;

/// The directory of the requesters' spaces.
const PEOPLE: &str = "people";
/// The directory of the spaces of tasks with no requester.
const PLANNER: &str = "planner";
/// Longest encoded name (Linux `NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;
const MIB: u64 = 1024 * 1024;

/// Where one call's paths start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Root {
    /// An admin with `[files] admin_open`: the host filesystem; relative paths start at the
    /// sandbox root.
    Host,
    /// An admin: the whole sandbox — every space and the files from before spaces existed.
    Sandbox,
    /// Anyone else: their own space, at this path relative to the sandbox root; the quota
    /// applies.
    Own(PathBuf),
}

/// The one decision of a call's root: from the role (resolved once, now) and the requester of
/// the context, never from arguments.
pub(crate) fn root_for(ctx: &ToolContext) -> Result<Root, ToolError> {
    if ctx.role() == Role::Admin {
        return Ok(if ctx.config().files.admin_open {
            Root::Host
        } else {
            Root::Sandbox
        });
    }
    let names: Vec<&str> = match ctx.requester() {
        Some(person) => vec![PEOPLE, &person.platform, &person.user_id],
        None => vec![PLANNER, ctx.stream_id().as_str()],
    };
    let mut path = PathBuf::from(names[0]);
    for name in &names[1..] {
        path.push(encode_name(name).ok_or_else(|| {
            ToolError::new(format!(
                "no file space can be made for this task: the id `{}…` is too long to be a \
                 directory name; ask the operator",
                name.chars().take(40).collect::<String>()
            ))
        })?);
    }
    Ok(Root::Own(path))
}

/// One id as a single directory name: ASCII letters, digits, `-`, `_` and a `.` that is not the
/// first byte stay; every other byte becomes `%XX`. So the name is never empty, `.`, `..` or
/// hidden, holds no `/`, and two ids never share a name (`%` itself is encoded). `None` when the
/// name would be over 255 bytes.
pub(crate) fn encode_name(id: &str) -> Option<String> {
    let mut name = String::with_capacity(id.len());
    for (at, byte) in id.bytes().enumerate() {
        let keep = byte.is_ascii_alphanumeric()
            || byte == b'-'
            || byte == b'_'
            || (byte == b'.' && at > 0);
        if keep {
            name.push(char::from(byte));
        } else {
            let _ = write!(name, "%{byte:02X}");
        }
    }
    (!name.is_empty() && name.len() <= MAX_NAME_BYTES).then_some(name)
}

/// A call's file space, opened.
pub(crate) struct Space {
    pub access: Access,
    /// Set for a non-admin space: writes must keep it under the quota.
    pub quota: Option<Quota>,
}

impl Space {
    /// Opens `root` beneath the sandbox `dir` (creating an own space on first use, one name at
    /// a time and without following a symlink).
    pub(crate) fn open(
        dir: &Dir,
        sandbox_path: &Path,
        root: &Root,
        locks: &QuotaLocks,
        quota_mb: u64,
    ) -> io::Result<Space> {
        Ok(match root {
            Root::Host => Space {
                access: Access::Host {
                    base: sandbox_path.to_path_buf(),
                },
                quota: None,
            },
            Root::Sandbox => Space {
                access: Access::Confined(dir.try_clone()?),
                quota: None,
            },
            Root::Own(path) => Space {
                access: Access::Confined(open_nofollow(dir, path, true)?),
                quota: Some(Quota {
                    limit: quota_mb.saturating_mul(MIB),
                    quota_mb,
                    lock: locks.for_space(path),
                }),
            },
        })
    }
}

/// Opens the directory `path` beneath `base` one name at a time, refusing a symlink at every
/// step (and creating each missing name when `create`).
fn open_nofollow(base: &Dir, path: &Path, create: bool) -> io::Result<Dir> {
    let mut dir = base.try_clone()?;
    for name in path {
        if create {
            match dir.create_dir(name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        dir = dir.open_dir_nofollow(name)?;
    }
    Ok(dir)
}

/// One lock per space, held from the quota check to the end of the write, so that concurrent
/// writes of one requester (parallel tool calls, several tasks) cannot pass the check together.
#[derive(Default)]
pub(crate) struct QuotaLocks(Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>);

impl QuotaLocks {
    fn for_space(&self, path: &Path) -> Arc<Mutex<()>> {
        let mut locks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget the locks no call holds, so the map stays as small as the active spaces.
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(locks.entry(path.to_path_buf()).or_default())
    }
}

/// The quota of one space.
pub(crate) struct Quota {
    limit: u64,
    quota_mb: u64,
    lock: Arc<Mutex<()>>,
}

impl Quota {
    /// Held across the check and the write.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses a write that would leave the space over its quota: `replaced` bytes go away (the
    /// old file of a replacement), `added` come in.
    pub(crate) fn check(&self, space: &Dir, replaced: u64, added: u64) -> Result<(), ToolError> {
        let used = usage(space).map_err(|e| {
            ToolError::new(format!(
                "cannot check the quota of your file space: {e}; try again"
            ))
        })?;
        let after = used.saturating_sub(replaced).saturating_add(added);
        if after <= self.limit {
            return Ok(());
        }
        Err(ToolError::new(format!(
            "refused: your file space would hold {after} bytes after this write, over its quota \
             of {} MiB ({} bytes, [files] quota_mb = {}); it holds {used} bytes now. Nothing \
             was written. Free space by replacing files you no longer need with empty content, \
             or ask the operator to raise [files] quota_mb",
            self.quota_mb, self.limit, self.quota_mb
        )))
    }
}

/// The bytes of the regular files beneath `root`. Directories are opened by name without
/// following a symlink, and a symlink counts nothing, so no file is counted twice or outside.
/// A few directory handles are open at a time; an entry removed during the walk is skipped.
pub(crate) fn usage(root: &Dir) -> io::Result<u64> {
    let mut total = 0u64;
    let mut pending = vec![PathBuf::new()];
    while let Some(path) = pending.pop() {
        let dir = match open_nofollow(root, &path, false) {
            Ok(dir) => dir,
            // Removed since it was listed.
            Err(e) if !path.as_os_str().is_empty() && is_gone(&e) => continue,
            Err(e) => return Err(e),
        };
        for entry in dir.entries()? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(path.join(entry.file_name()));
            } else if kind.is_file() {
                match entry.metadata() {
                    Ok(meta) => total = total.saturating_add(meta.len()),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(total)
}

fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_a_safe_charset_and_encode_the_rest() {
        let encoded = |id: &str| encode_name(id).unwrap();
        assert_eq!(encoded("12345"), "12345");
        assert_eq!(encoded("alice.smith_2-x"), "alice.smith_2-x");
        assert_eq!(encoded("."), "%2E");
        assert_eq!(encoded(".."), "%2E.");
        assert_eq!(encoded("../.."), "%2E.%2F..");
        assert_eq!(encoded("a/b"), "a%2Fb");
        assert_eq!(encoded("a%2Fb"), "a%252Fb");
        assert_eq!(encoded(".hidden"), "%2Ehidden");
        assert_eq!(encoded("é"), "%C3%A9");
        assert_eq!(encoded(&"9".repeat(255)), "9".repeat(255));
        assert_eq!(encode_name(&"9".repeat(256)), None);
        assert_eq!(encode_name(&"/".repeat(86)), None);
        assert_eq!(encode_name(""), None);
    }

    #[test]
    fn distinct_ids_get_distinct_names() {
        let ids = [
            "..", ".", "a/b", "a%2Fb", "a%2fb", "a_2Fb", "%", "%25", "a.b", "a%2Eb", "A", "a",
        ];
        let mut names: Vec<_> = ids.iter().map(|id| encode_name(id).unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ids.len());
        for name in &names {
            assert!(!name.contains('/') && name != "." && name != ".." && !name.starts_with('.'));
        }
    }
}
