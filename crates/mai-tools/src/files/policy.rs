//! The sandbox path policy of the file tools (docs/tools.md#files; the third gate): which
//! filesystem a call may reach, which path texts are refused outright, and how files are opened so
//! that no special file is ever read or written.
//!
//! Confined calls (user; admin unless `[files] admin_open`) go through one `cap_std::fs::Dir`
//! opened on the call's root (its file space, or the whole sandbox for an admin — see
//! [`super::space`]): every lookup resolves beneath it, so `..`, absolute paths and
//! symlinks cannot lead out by construction, and there is no gap between a check and the open.
//! The textual checks below only turn the common mistakes into clear messages; they are not what
//! keeps a path inside.
//!
//! This module must not decide the role from anything but the `ToolContext`, and must not open a
//! path outside the `Dir` for a confined call.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::OpenOptionsSyncExt;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use mai_core::tool::ToolError;

/// Longest accepted path, in bytes (Linux `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted single name, in bytes (Linux `NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;

/// A path text refused before any filesystem access.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefused {
    #[error("the path is empty; give a file path relative to the sandbox root, e.g. `notes.txt`")]
    Empty,
    #[error("the path contains a NUL byte")]
    NulByte,
    #[error("the path is {0} bytes long; the limit is {MAX_PATH_BYTES}")]
    TooLong(usize),
    #[error("the name `{name}…` is {len} bytes long; the limit is {MAX_NAME_BYTES} per name")]
    NameTooLong { name: String, len: usize },
    #[error("`\\` is not a path separator here; use `/` (Windows-style paths are refused)")]
    Backslash,
    #[error("drive prefixes like `C:` are not paths here; use `/`-separated relative paths")]
    DrivePrefix,
    #[error(
        "absolute paths are refused: paths are relative to the sandbox root (write `x`, not `/x`)"
    )]
    Absolute,
    #[error("`..` is refused: paths stay inside the sandbox root")]
    ParentComponent,
}

/// Which filesystem one call may reach (chosen by [`super::space::root_for`]).
pub(crate) enum Access {
    /// Only beneath a root inside the sandbox (the caller's space, or the whole sandbox for an
    /// admin), through its `Dir`.
    Confined(Dir),
    /// The host filesystem (admin with `admin_open`); relative paths start at `base`.
    Host { base: PathBuf },
}

impl Access {
    pub(crate) fn is_confined(&self) -> bool {
        matches!(self, Access::Confined(_))
    }
}

/// Checks a path text: refuses what is never a valid path for these tools, and for a confined
/// call what would try to leave the sandbox. `/x` is refused rather than read as `x` so that the
/// model learns where it is instead of silently getting a different file than it named.
pub(crate) fn check_path(raw: &str, confined: bool) -> Result<PathBuf, PathRefused> {
    if raw.is_empty() {
        return Err(PathRefused::Empty);
    }
    if raw.contains('\0') {
        return Err(PathRefused::NulByte);
    }
    if raw.len() > MAX_PATH_BYTES {
        return Err(PathRefused::TooLong(raw.len()));
    }
    // A backslash is a legal name byte on Linux, but a model writing one means a Windows path;
    // taking it literally would create a file named `..\..\x`.
    if raw.contains('\\') {
        return Err(PathRefused::Backslash);
    }
    if has_drive_prefix(raw) {
        return Err(PathRefused::DrivePrefix);
    }
    if let Some(name) = raw.split('/').find(|name| name.len() > MAX_NAME_BYTES) {
        return Err(PathRefused::NameTooLong {
            name: name.chars().take(40).collect(),
            len: name.len(),
        });
    }
    let path = PathBuf::from(raw);
    if confined {
        if path.is_absolute() {
            return Err(PathRefused::Absolute);
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(PathRefused::ParentComponent);
        }
    }
    Ok(path)
}

/// `C:`, `C:/…`: a drive letter followed by nothing or a separator.
fn has_drive_prefix(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    bytes.len() >= 2
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && matches!(bytes.get(2), None | Some(b'/') | Some(b'\\'))
}

/// What `read` found at a path, already opened.
pub(crate) enum Opened {
    File { file: fs::File, size: u64 },
    Directory(Dir),
}

/// Opens an existing file or directory for reading. Special files are refused: first from the
/// path's metadata (so a device is not even opened, which can have side effects), then — the
/// check that counts — from the metadata of the opened handle. The open is non-blocking so a
/// FIFO swapped in between cannot hang the call.
pub(crate) fn open_for_read(access: &Access, path: &Path) -> io::Result<Opened> {
    let options = read_options();
    let file = match access {
        Access::Confined(dir) => {
            let meta = dir.metadata(path)?;
            refuse_special(meta.is_file() || meta.is_dir())?;
            dir.open_with(path, &options)?
        }
        Access::Host { base } => {
            let path = base.join(path);
            let meta = fs::metadata(&path)?;
            refuse_special(meta.is_file() || meta.is_dir())?;
            cap_std::fs::File::open_ambient_with(&path, &options, ambient_authority())?
        }
    };
    let file = file.into_std();
    let meta = file.metadata()?;
    if meta.is_dir() {
        Ok(Opened::Directory(Dir::from_std_file(file)))
    } else if meta.is_file() {
        Ok(Opened::File {
            file,
            size: meta.len(),
        })
    } else {
        Err(special_file_error(meta.file_type()))
    }
}

/// Read-only and non-blocking: opening a FIFO returns at once instead of waiting for a writer.
fn read_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true).nonblock(true);
    options
}

/// The directory a `write` lands in, opened, and the file name inside it.
pub(crate) struct WriteTarget {
    pub dir: Dir,
    pub name: PathBuf,
}

/// Resolves where `write` puts `path`: follows a symlink at the final name (inside the sandbox
/// for a confined call — one leading out fails here), creates the parent directories and opens
/// the parent as a `Dir`, so the write itself is a single-name operation on a fixed handle.
pub(crate) fn write_target(access: &Access, path: &Path) -> io::Result<WriteTarget> {
    match access {
        Access::Confined(root) => {
            let path = match root.symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_symlink() => root.canonicalize(path)?,
                _ => path.to_path_buf(),
            };
            let (parent, name) = split_name(&path)?;
            let dir = if parent.as_os_str().is_empty() {
                root.try_clone()?
            } else {
                root.create_dir_all(parent)?;
                root.open_dir(parent)?
            };
            Ok(WriteTarget { dir, name })
        }
        Access::Host { base } => {
            let path = base.join(path);
            let path = match fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => fs::canonicalize(&path)?,
                _ => path,
            };
            let (parent, name) = split_name(&path)?;
            fs::create_dir_all(parent)?;
            let dir = Dir::open_ambient_dir(parent, ambient_authority())?;
            Ok(WriteTarget { dir, name })
        }
    }
}

fn split_name(path: &Path) -> io::Result<(&Path, PathBuf)> {
    let name = path
        .file_name()
        .filter(|name| *name != OsStr::new("."))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path names a directory, not a file",
            )
        })?;
    let parent = path.parent().unwrap_or(Path::new(""));
    Ok((parent, PathBuf::from(name)))
}

fn refuse_special(regular_or_dir: bool) -> io::Result<()> {
    if regular_or_dir {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file or directory (devices, FIFOs and sockets are refused)",
        ))
    }
}

/// The refusal for a special file, naming what it is.
pub(crate) fn special_file_error(kind: fs::FileType) -> io::Error {
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    };
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}; only regular files can be read or written"),
    )
}

/// Turns an I/O failure into a message that says what to do.
pub(crate) fn io_failure(action: &str, path: &str, err: &io::Error, confined: bool) -> ToolError {
    match err.kind() {
        io::ErrorKind::NotFound if confined => ToolError::new(format!(
            "cannot {action} `{path}`: no such file or directory (paths are relative to your \
             file space; read `.` to list it)"
        )),
        io::ErrorKind::PermissionDenied if confined => ToolError::new(format!(
            "cannot {action} `{path}`: {err}; only files inside your file space are \
             reachable (symlinks leading out are refused)"
        )),
        _ => ToolError::new(format!("cannot {action} `{path}`: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confined_paths_refuse_escapes_and_windows_forms() {
        let refused = |raw: &str| check_path(raw, true).unwrap_err();
        assert_eq!(refused(""), PathRefused::Empty);
        assert_eq!(refused("a\0b"), PathRefused::NulByte);
        assert_eq!(refused("/etc/passwd"), PathRefused::Absolute);
        assert_eq!(refused("../x"), PathRefused::ParentComponent);
        assert_eq!(refused("a/../../x"), PathRefused::ParentComponent);
        assert_eq!(refused("..\\..\\x"), PathRefused::Backslash);
        assert_eq!(refused("C:/x"), PathRefused::DrivePrefix);
        assert_eq!(refused("c:"), PathRefused::DrivePrefix);
        assert!(matches!(
            refused(&"n".repeat(300)),
            PathRefused::NameTooLong { len: 300, .. }
        ));
        assert_eq!(refused(&"a/".repeat(2500)), PathRefused::TooLong(5000));
    }

    /// The path pre-check refuses a FIFO before opening it, so this checks the layer behind it:
    /// if a FIFO appears after the pre-check, the open does not block and the handle check
    /// names it.
    #[test]
    fn a_fifo_opened_behind_the_precheck_does_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(tmp.path().join("pipe"))
            .status()
            .unwrap();
        assert!(made.success());
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let file = dir.open_with("pipe", &read_options()).unwrap().into_std();
        let kind = file.metadata().unwrap().file_type();
        assert!(special_file_error(kind).to_string().contains("a FIFO"));
    }

    #[test]
    fn ordinary_paths_pass() {
        assert_eq!(
            check_path("a/b.txt", true).unwrap(),
            PathBuf::from("a/b.txt")
        );
        assert_eq!(check_path("./x", true).unwrap(), PathBuf::from("./x"));
        assert_eq!(check_path("c:d", true).unwrap(), PathBuf::from("c:d"));
        assert_eq!(
            check_path("/etc/hosts", false).unwrap(),
            PathBuf::from("/etc/hosts")
        );
        assert_eq!(check_path("../x", false).unwrap(), PathBuf::from("../x"));
    }
}
