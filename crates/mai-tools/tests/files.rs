//! The file tools through the registry, as the agent loop calls them. Most tests are attacks on
//! the sandbox, run for every confined role (user, admin without `admin_open`, and user even when
//! `admin_open` is set), each asserting both the refusal and that nothing outside changed. Then
//! the file spaces: a non-admin task reaches only its requester's space (or, with no requester,
//! its chat's), under `[files] quota_mb`; an admin reaches the whole sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

use std::fs;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mai_core::config::Config;
use mai_core::ids::{Owner, PersonId, StreamId};
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{
    FixedRole, OutcomeKind, RoleProvider, ToolContext, ToolOutcome, ToolRegistry, Visibility,
};
use mai_tools::files::file_tools;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "OUTSIDE SECRET\n";

/// The requester of the tasks of most tests: its space is `people/qq/1/` (an admin's root is the
/// whole sandbox).
const HOME: &str = "people/qq/1";

/// (role, `[files] admin_open`) pairs that must be confined to the sandbox.
const CONFINED: [(Role, bool); 3] = [
    (Role::User, false),
    (Role::Admin, false),
    (Role::User, true),
];

struct Sandbox {
    _tmp: TempDir,
    root: PathBuf,
    outside: PathBuf,
    registry: ToolRegistry,
}

impl Sandbox {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        // Not created beforehand: `file_tools` must create it.
        let root = tmp.path().join("data").join("files");
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret.txt"), SECRET).unwrap();
        let registry = ToolRegistry::new();
        for tool in file_tools(root.clone()).unwrap() {
            registry.register(tool);
        }
        Sandbox {
            _tmp: tmp,
            root,
            outside,
            registry,
        }
    }

    async fn call(&self, tool: &str, role: Role, admin_open: bool, args: Value) -> ToolOutcome {
        let mut config = Config::default();
        config.files.admin_open = admin_open;
        self.call_with(tool, role, config, args).await
    }

    async fn call_with(&self, tool: &str, role: Role, config: Config, args: Value) -> ToolOutcome {
        let caller = Caller::new(role, person("qq", "1"));
        self.call_as(tool, &caller, config, args).await
    }

    async fn call_as(
        &self,
        tool: &str,
        caller: &Caller,
        config: Config,
        args: Value,
    ) -> ToolOutcome {
        let stream = StreamId::new(caller.stream).unwrap();
        let owner = match &caller.requester {
            Some(person) => Owner::Person(person.clone()),
            None => Owner::Planner(stream.clone()),
        };
        let ctx = ToolContext::new(
            TaskId::new(),
            owner,
            stream,
            "qq",
            caller.role.clone(),
            CancellationToken::new(),
            Arc::new(config),
        )
        .with_requester(caller.requester.clone());
        let role = ctx.role();
        // A hang (e.g. a blocking FIFO open) fails the test instead of stalling the suite.
        tokio::time::timeout(
            Duration::from_secs(20),
            self.registry.execute(tool, role, args, &ctx),
        )
        .await
        .expect("the tool call hung")
    }

    /// Where the relative paths of `role` start on disk (created): the whole sandbox for an
    /// admin, the space of `qq:1` otherwise.
    fn home(&self, role: Role) -> PathBuf {
        let home = if role == Role::Admin {
            self.root.clone()
        } else {
            self.root.join(HOME)
        };
        fs::create_dir_all(&home).unwrap();
        home
    }

    /// The homes of every confined caller, for planting a fixture where each of them looks.
    fn homes(&self) -> [PathBuf; 2] {
        [self.home(Role::Admin), self.home(Role::User)]
    }

    /// A relative symlink text from `home` to the outside directory, climbing just enough.
    fn climb_to_outside(&self, home: &Path) -> String {
        let depth = home.strip_prefix(self.outside.parent().unwrap()).unwrap();
        "../".repeat(depth.components().count()) + "outside"
    }

    /// Every confined role must get a refusal for this call; returns the error messages.
    async fn refused_for_confined(&self, tool: &str, args: Value) -> Vec<String> {
        let mut errors = Vec::new();
        for (role, admin_open) in CONFINED {
            let outcome = self.call(tool, role, admin_open, args.clone()).await;
            assert!(
                !outcome.is_ok(),
                "{tool} {args} must be refused for {role:?} (admin_open={admin_open}), got {:?}",
                outcome.value
            );
            assert_eq!(outcome.value["success"], false);
            errors.push(outcome.error_message().unwrap().to_owned());
        }
        errors
    }

    /// The outside directory holds exactly the secret, unchanged.
    fn assert_outside_untouched(&self) {
        let names: Vec<_> = fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["secret.txt".to_owned()],
            "files appeared outside"
        );
        assert_eq!(
            fs::read_to_string(self.outside.join("secret.txt")).unwrap(),
            SECRET
        );
    }

    /// Every file (anything but a directory) in the sandbox, as paths relative to its root.
    fn files_in_sandbox(&self) -> Vec<String> {
        let mut files = Vec::new();
        let mut pending = vec![self.root.clone()];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    pending.push(entry.path());
                } else {
                    let path = entry.path();
                    let relative = path.strip_prefix(&self.root).unwrap();
                    files.push(relative.display().to_string());
                }
            }
        }
        files.sort();
        files
    }
}

/// Who calls: the role (asked on every call), the requester and the chat.
struct Caller {
    role: Arc<dyn RoleProvider>,
    requester: Option<PersonId>,
    stream: &'static str,
}

impl Caller {
    fn new(role: Role, requester: Option<PersonId>) -> Self {
        Caller {
            role: Arc::new(FixedRole(role)),
            requester,
            stream: "s1",
        }
    }
}

fn person(platform: &str, user_id: &str) -> Option<PersonId> {
    Some(PersonId::new(platform, user_id).unwrap())
}

fn all_contain(errors: &[String], needle: &str) {
    for error in errors {
        assert!(
            error.contains(needle),
            "`{error}` should mention `{needle}`"
        );
    }
}

/// `path` in the user's space as `role` names it: admins see the whole sandbox.
fn seen_by(role: Role, path: &str) -> String {
    if role == Role::Admin {
        format!("{HOME}/{path}")
    } else {
        path.to_owned()
    }
}

fn write_args(path: &str) -> [Value; 2] {
    [
        json!({"path": path, "content": "PWNED"}),
        json!({"path": path, "content": "PWNED", "append": true}),
    ]
}

// ---------------------------------------------------------------------------------------------
// Attacks
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn dot_dot_traversal_is_refused() {
    let sb = Sandbox::new();
    for path in [
        "../outside/secret.txt",
        "../../outside/secret.txt",
        "a/../../outside/secret.txt",
        "./../outside/secret.txt",
        "..",
    ] {
        let errors = sb.refused_for_confined("read", json!({"path": path})).await;
        all_contain(&errors, "`..` is refused");
        for args in write_args(path) {
            all_contain(
                &sb.refused_for_confined("write", args).await,
                "`..` is refused",
            );
        }
    }
    assert!(sb.files_in_sandbox().is_empty());
    sb.assert_outside_untouched();
}

#[tokio::test]
async fn absolute_paths_are_refused() {
    let sb = Sandbox::new();
    let outside_secret = sb.outside.join("secret.txt").display().to_string();
    let outside_new = sb.outside.join("new.txt").display().to_string();
    for path in ["/etc/passwd", "/", outside_secret.as_str()] {
        let errors = sb.refused_for_confined("read", json!({"path": path})).await;
        all_contain(&errors, "relative to the sandbox root");
    }
    for path in [
        outside_secret.as_str(),
        outside_new.as_str(),
        "/tmp/mai-files-pwned",
    ] {
        for args in write_args(path) {
            let errors = sb.refused_for_confined("write", args).await;
            all_contain(&errors, "relative to the sandbox root");
        }
    }
    assert!(!Path::new("/tmp/mai-files-pwned").exists());
    sb.assert_outside_untouched();
}

#[tokio::test]
async fn symlinks_leading_outside_are_not_followed() {
    let sb = Sandbox::new();
    for home in sb.homes() {
        symlink("/etc", home.join("etc")).unwrap();
        symlink(&sb.outside, home.join("out")).unwrap();
        symlink(sb.outside.join("secret.txt"), home.join("secret_link")).unwrap();
        symlink(sb.outside.join("new.txt"), home.join("dangling_out")).unwrap();
        // A relative symlink climbing out.
        symlink(sb.climb_to_outside(&home), home.join("rel_out")).unwrap();
    }

    for path in [
        "etc/passwd",
        "etc",
        "out",
        "out/secret.txt",
        "secret_link",
        "rel_out/secret.txt",
    ] {
        let errors = sb.refused_for_confined("read", json!({"path": path})).await;
        for error in &errors {
            assert!(!error.contains("OUTSIDE SECRET"), "{error}");
        }
    }
    for path in [
        "out/secret.txt",
        "out/new.txt",
        "secret_link",
        "dangling_out",
        "rel_out/new.txt",
        "out/sub/new.txt",
    ] {
        for args in write_args(path) {
            sb.refused_for_confined("write", args).await;
        }
    }
    sb.assert_outside_untouched();
    // The symlinks themselves were not replaced by files.
    for home in sb.homes() {
        for link in ["secret_link", "dangling_out"] {
            assert!(fs::symlink_metadata(home.join(link)).unwrap().is_symlink());
        }
    }
}

#[tokio::test]
async fn symlinks_inside_the_sandbox_work() {
    let sb = Sandbox::new();
    let home = sb.home(Role::User);
    fs::create_dir_all(home.join("real")).unwrap();
    fs::write(home.join("real/a.txt"), "inside\n").unwrap();
    symlink("real", home.join("alias")).unwrap();
    symlink("real/a.txt", home.join("a_link")).unwrap();
    let read = sb
        .call("read", Role::User, false, json!({"path": "alias/a.txt"}))
        .await;
    assert_eq!(read.value["content"], "inside\n", "{:?}", read.value);
    let write = sb
        .call(
            "write",
            Role::User,
            false,
            json!({"path": "a_link", "content": "new\n"}),
        )
        .await;
    assert!(write.is_ok(), "{:?}", write.value);
    // Written through the link: the target changed, the link is still a link.
    assert_eq!(
        fs::read_to_string(home.join("real/a.txt")).unwrap(),
        "new\n"
    );
    assert!(
        fs::symlink_metadata(home.join("a_link"))
            .unwrap()
            .is_symlink()
    );
}

/// A directory replaced by a symlink to the outside while reads and writes run: the
/// `Dir`-based open resolves each path beneath the root at open time, so no interleaving
/// reaches the outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_swapped_during_access_never_escapes() {
    let sb = Sandbox::new();
    // In the user's space; admins reach it as `people/qq/1/sub`.
    let home = sb.home(Role::User);
    let sub = home.join("sub");
    let parked = home.join("sub_real");
    fs::create_dir_all(&sub).unwrap();
    fs::write(sub.join("secret.txt"), "INSIDE\n").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, sub, parked, outside) = (
            stop.clone(),
            sub.clone(),
            parked.clone(),
            sb.outside.clone(),
        );
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            // A concurrent `write` may recreate `sub` as a fresh directory at any point
            // (it creates missing parents); such a directory is simply cleared away.
            while !stop.load(Ordering::Relaxed) && swaps < 200_000 {
                fs::rename(&sub, &parked).unwrap();
                while symlink(&outside, &sub).is_err() {
                    let _ = fs::remove_dir_all(&sub);
                }
                fs::remove_file(&sub).unwrap();
                while fs::rename(&parked, &sub).is_err() {
                    let _ = fs::remove_dir_all(&sub);
                }
                swaps += 1;
            }
            swaps
        })
    };

    let (mut inside, mut refused) = (0, 0);
    for i in 0..400 {
        for (role, admin_open) in CONFINED {
            let path = seen_by(role, "sub/secret.txt");
            let read = sb
                .call("read", role, admin_open, json!({"path": path}))
                .await;
            assert!(
                !read.value.to_string().contains("OUTSIDE"),
                "a read escaped the sandbox: {:?}",
                read.value
            );
            if read.is_ok() {
                assert_eq!(read.value["content"], "INSIDE\n");
                inside += 1;
            } else {
                refused += 1;
            }
        }
        let new = format!("sub/new{}.txt", i % 4);
        let write = json!({"path": new, "content": "PWNED"});
        let append = json!({"path": seen_by(Role::Admin, "sub/log.txt"), "content": "PWNED", "append": true});
        let _ = sb.call("write", Role::User, false, write).await;
        let _ = sb.call("write", Role::Admin, false, append).await;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0);
    // The swapper did interleave with the reads (most of them met the symlink or no `sub`).
    assert!(refused > 0, "the swap never raced a read");
    assert_eq!(inside + refused, 1200);
    sb.assert_outside_untouched();
}

#[tokio::test]
async fn proc_self_is_unreachable() {
    let sb = Sandbox::new();
    for path in [
        "/proc/self/environ",
        "/proc/self/root/etc/passwd",
        "/proc/self/fd/0",
    ] {
        let errors = sb.refused_for_confined("read", json!({"path": path})).await;
        all_contain(&errors, "relative to the sandbox root");
    }
    for home in sb.homes() {
        symlink("/proc/self", home.join("me")).unwrap();
    }
    for path in ["me/environ", "me/root/etc/passwd", "me/cwd"] {
        sb.refused_for_confined("read", json!({"path": path})).await;
        for args in write_args(&format!("{path}/x")) {
            sb.refused_for_confined("write", args).await;
        }
    }
}

#[tokio::test]
async fn device_files_are_refused() {
    let sb = Sandbox::new();
    for home in sb.homes() {
        symlink("/dev/zero", home.join("zero")).unwrap();
        symlink("/dev/null", home.join("null")).unwrap();
        symlink("/dev", home.join("dev")).unwrap();
    }
    for path in ["/dev/zero", "zero", "dev/zero", "dev/urandom"] {
        sb.refused_for_confined("read", json!({"path": path})).await;
    }
    for path in ["null", "dev/null", "/dev/null"] {
        for args in write_args(path) {
            sb.refused_for_confined("write", args).await;
        }
    }
    // Even with the host filesystem open, a device is not a file.
    for path in ["/dev/zero", "/dev/urandom"] {
        let read = sb
            .call("read", Role::Admin, true, json!({"path": path}))
            .await;
        assert!(!read.is_ok(), "{:?}", read.value);
        assert!(
            read.error_message().unwrap().contains("device"),
            "{:?}",
            read.value
        );
    }
    for args in write_args("/dev/null") {
        let write = sb.call("write", Role::Admin, true, args).await;
        assert!(!write.is_ok(), "{:?}", write.value);
    }
    assert!(
        fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

#[tokio::test]
async fn a_fifo_in_the_sandbox_is_refused_without_hanging() {
    let sb = Sandbox::new();
    for home in sb.homes() {
        let made = Command::new("mkfifo")
            .arg(home.join("pipe"))
            .status()
            .unwrap();
        assert!(made.success());
    }
    let fifo = sb.root.join("pipe");
    let errors = sb
        .refused_for_confined("read", json!({"path": "pipe"}))
        .await;
    all_contain(&errors, "FIFO");
    for args in write_args("pipe") {
        all_contain(&sb.refused_for_confined("write", args).await, "FIFO");
    }
    let host = sb
        .call(
            "read",
            Role::Admin,
            true,
            json!({"path": fifo.display().to_string()}),
        )
        .await;
    assert!(
        host.error_message().unwrap().contains("FIFO"),
        "{:?}",
        host.value
    );
    // Still FIFOs: not replaced by the atomic write.
    for home in sb.homes() {
        let meta = fs::symlink_metadata(home.join("pipe")).unwrap();
        assert!(meta.file_type().is_fifo());
    }
}

#[tokio::test]
async fn very_long_names_and_paths_are_refused() {
    let sb = Sandbox::new();
    let long_name = "n".repeat(300);
    let long_path = "d/".repeat(2499) + "fx"; // 5000 bytes
    for (path, needle) in [
        (long_name.as_str(), "limit is 255"),
        (&format!("dir/{long_name}/x"), "limit is 255"),
        (long_path.as_str(), "limit is 4096"),
    ] {
        all_contain(
            &sb.refused_for_confined("read", json!({"path": path})).await,
            needle,
        );
        for args in write_args(path) {
            all_contain(&sb.refused_for_confined("write", args).await, needle);
        }
    }
    assert!(sb.files_in_sandbox().is_empty());
}

#[tokio::test]
async fn nul_bytes_and_empty_paths_are_refused() {
    let sb = Sandbox::new();
    for (path, needle) in [("a\0b", "NUL"), ("secret.txt\0.png", "NUL"), ("", "empty")] {
        all_contain(
            &sb.refused_for_confined("read", json!({"path": path})).await,
            needle,
        );
        for args in write_args(path) {
            all_contain(&sb.refused_for_confined("write", args).await, needle);
        }
        // Also refused on the open host filesystem.
        let host = sb
            .call("read", Role::Admin, true, json!({"path": path}))
            .await;
        assert!(host.error_message().unwrap().contains(needle));
    }
    assert!(sb.files_in_sandbox().is_empty());
}

#[tokio::test]
async fn windows_style_paths_are_refused() {
    let sb = Sandbox::new();
    for (path, needle) in [
        ("..\\..\\outside\\secret.txt", "Windows-style"),
        ("sub\\file.txt", "Windows-style"),
        ("\\\\server\\share\\x", "Windows-style"),
        ("C:\\x", "Windows-style"),
        ("C:/x", "drive prefix"),
        ("c:", "drive prefix"),
    ] {
        all_contain(
            &sb.refused_for_confined("read", json!({"path": path})).await,
            needle,
        );
        for args in write_args(path) {
            all_contain(&sb.refused_for_confined("write", args).await, needle);
        }
    }
    assert!(sb.files_in_sandbox().is_empty());
    sb.assert_outside_untouched();
}

#[tokio::test]
async fn the_role_cannot_come_from_arguments() {
    let sb = Sandbox::new();
    let outside = sb.outside.join("secret.txt").display().to_string();
    let read = sb
        .call(
            "read",
            Role::User,
            true,
            json!({"path": outside, "role": "admin"}),
        )
        .await;
    assert_eq!(read.kind, OutcomeKind::InvalidArguments, "{:?}", read.value);
    let read = sb
        .call("read", Role::User, true, json!({"path": outside}))
        .await;
    assert!(
        read.error_message()
            .unwrap()
            .contains("relative to the sandbox root")
    );
}

#[tokio::test]
async fn guest_is_refused_by_the_registry() {
    let sb = Sandbox::new();
    fs::write(sb.root.join("a.txt"), "hello\n").unwrap();
    for (tool, args) in [
        ("read", json!({"path": "a.txt"})),
        ("write", json!({"path": "a.txt", "content": "PWNED"})),
    ] {
        let outcome = sb.call(tool, Role::Guest, true, args).await;
        assert_eq!(
            outcome.kind,
            OutcomeKind::PermissionDenied,
            "{:?}",
            outcome.value
        );
    }
    assert_eq!(
        fs::read_to_string(sb.root.join("a.txt")).unwrap(),
        "hello\n"
    );
    assert!(sb.registry.presented(Role::Guest).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Happy paths
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn definitions_are_discoverable_user_tools_with_strict_schemas() {
    let sb = Sandbox::new();
    assert!(sb.root.is_dir(), "file_tools creates the root");
    for name in ["read", "write"] {
        let tool = sb.registry.get(name).unwrap();
        assert_eq!(tool.visibility(), Visibility::Discoverable);
        assert_eq!(tool.min_role(), Role::User);
        assert_eq!(tool.parameters()["additionalProperties"], false);
        let mut required: Vec<_> = tool.parameters()["required"].as_array().unwrap().clone();
        required.sort_by_key(|v| v.to_string());
        let expected = if name == "write" {
            json!(["content", "path"])
        } else {
            json!(["path"])
        };
        assert_eq!(Value::Array(required), expected);
        assert!(tool.description().len() < 200, "keep descriptions short");
    }
}

#[tokio::test]
async fn write_then_read_round_trips() {
    let sb = Sandbox::new();
    for (role, admin_open) in CONFINED {
        let write = sb
            .call(
                "write",
                role,
                admin_open,
                json!({"path": "notes/day/1.txt", "content": "one\ntwo\n"}),
            )
            .await;
        assert_eq!(
            write.value,
            json!({"success": true, "path": "notes/day/1.txt", "bytes_written": 8})
        );
        let read = sb
            .call("read", role, admin_open, json!({"path": "notes/day/1.txt"}))
            .await;
        assert_eq!(read.value["success"], true);
        assert_eq!(read.value["content"], "one\ntwo\n");
        assert_eq!(read.value["start_line"], 1);
        assert_eq!(read.value["end_line"], 2);
        assert_eq!(read.value["total_lines"], 2);
        assert_eq!(read.value["truncated"], false);
    }
    // Replacing is atomic and leaves no temporary file behind.
    let write = sb
        .call(
            "write",
            Role::User,
            false,
            json!({"path": "notes/day/1.txt", "content": "new"}),
        )
        .await;
    assert!(write.is_ok());
    let home = sb.home(Role::User);
    assert_eq!(
        fs::read_to_string(home.join("notes/day/1.txt")).unwrap(),
        "new"
    );
    let names: Vec<_> = fs::read_dir(home.join("notes/day"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["1.txt"]);
}

#[tokio::test]
async fn append_adds_to_the_end() {
    let sb = Sandbox::new();
    for content in ["a\n", "b\n", "c\n"] {
        let outcome = sb
            .call(
                "write",
                Role::User,
                false,
                json!({"path": "log/app.log", "content": content, "append": true}),
            )
            .await;
        assert_eq!(outcome.value["bytes_written"], 2, "{:?}", outcome.value);
    }
    assert_eq!(
        fs::read_to_string(sb.home(Role::User).join("log/app.log")).unwrap(),
        "a\nb\nc\n"
    );
}

#[tokio::test]
async fn writing_a_directory_or_a_trailing_slash_is_refused() {
    let sb = Sandbox::new();
    let home = sb.home(Role::User);
    fs::create_dir(home.join("dir")).unwrap();
    for path in ["dir", "dir/", ".", "dir/."] {
        let outcome = sb
            .call(
                "write",
                Role::User,
                false,
                json!({"path": path, "content": "x"}),
            )
            .await;
        assert!(!outcome.is_ok(), "{path}: {:?}", outcome.value);
    }
    assert!(home.join("dir").is_dir());
}

#[tokio::test]
async fn line_ranges_page_through_a_big_file() {
    let sb = Sandbox::new();
    let text: String = (1..=100_000).map(|n| format!("line {n}\n")).collect();
    fs::write(sb.home(Role::User).join("big.txt"), &text).unwrap();

    let read = sb
        .call(
            "read",
            Role::User,
            false,
            json!({"path": "big.txt", "offset": 50_000, "limit": 3}),
        )
        .await;
    assert_eq!(
        read.value["content"],
        "line 50000\nline 50001\nline 50002\n"
    );
    assert_eq!(read.value["start_line"], 50_000);
    assert_eq!(read.value["end_line"], 50_002);
    assert_eq!(read.value["truncated"], true);
    assert_eq!(read.value["next_offset"], 50_003);
    assert_eq!(read.value["size_bytes"], text.len());

    // Follow next_offset with a small byte budget: every call stays under it, and the pieces
    // put together are the file.
    let mut config = Config::default();
    config.files.max_read_bytes = 64 * 1024;
    let (mut offset, mut joined, mut calls) = (1u64, String::new(), 0);
    loop {
        let read = sb
            .call_with(
                "read",
                Role::User,
                config.clone(),
                json!({"path": "big.txt", "offset": offset}),
            )
            .await;
        let content = read.value["content"].as_str().unwrap();
        assert!(content.len() <= 64 * 1024);
        joined.push_str(content);
        calls += 1;
        match read.value.get("next_offset") {
            Some(next) => offset = next.as_u64().unwrap(),
            None => {
                assert_eq!(read.value["total_lines"], 100_000);
                break;
            }
        }
    }
    assert_eq!(joined, text);
    assert!(calls > 10);

    let past = sb
        .call(
            "read",
            Role::User,
            false,
            json!({"path": "big.txt", "offset": 200_000}),
        )
        .await;
    assert_eq!(past.value["content"], "");
    assert_eq!(past.value["total_lines"], 100_000);
}

#[tokio::test]
async fn a_line_longer_than_the_budget_shows_its_start_and_moves_on() {
    let sb = Sandbox::new();
    fs::write(
        sb.home(Role::User).join("wide.txt"),
        format!("{}\nnext\n", "é".repeat(1000)),
    )
    .unwrap();
    let mut config = Config::default();
    config.files.max_read_bytes = 101;
    let read = sb
        .call_with("read", Role::User, config, json!({"path": "wide.txt"}))
        .await;
    // Cut on a character boundary, never in the middle of `é`.
    assert_eq!(read.value["content"], "é".repeat(50));
    assert_eq!(read.value["next_offset"], 2);
    assert!(read.value["note"].as_str().unwrap().contains("longer than"));
}

#[tokio::test]
async fn binary_files_are_refused() {
    let sb = Sandbox::new();
    let home = sb.home(Role::User);
    fs::write(home.join("nul.bin"), b"text\0more").unwrap();
    fs::write(home.join("latin1.txt"), b"caf\xe9 au lait").unwrap();
    let read = sb
        .call("read", Role::User, false, json!({"path": "nul.bin"}))
        .await;
    assert!(
        read.error_message().unwrap().contains("NUL byte at byte 4"),
        "{:?}",
        read.value
    );
    let read = sb
        .call("read", Role::User, false, json!({"path": "latin1.txt"}))
        .await;
    assert!(
        read.error_message()
            .unwrap()
            .contains("invalid UTF-8 at byte 3"),
        "{:?}",
        read.value
    );
}

#[tokio::test]
async fn write_size_limit_is_read_from_the_config_of_each_call() {
    let sb = Sandbox::new();
    let mut config = Config::default();
    config.files.max_write_bytes = 10;
    let too_big = sb
        .call_with(
            "write",
            Role::Admin,
            config.clone(),
            json!({"path": "a.txt", "content": "01234567890"}),
        )
        .await;
    assert!(
        too_big
            .error_message()
            .unwrap()
            .contains("max_write_bytes is 10")
    );
    assert!(!sb.root.join("a.txt").exists());
    let fits = sb
        .call_with(
            "write",
            Role::Admin,
            config,
            json!({"path": "a.txt", "content": "0123456789"}),
        )
        .await;
    assert!(fits.is_ok());
    // The default config of the next call allows more.
    let bigger = sb
        .call(
            "write",
            Role::Admin,
            false,
            json!({"path": "a.txt", "content": "01234567890"}),
        )
        .await;
    assert!(bigger.is_ok());
}

#[tokio::test]
async fn a_directory_is_listed() {
    let sb = Sandbox::new();
    let home = sb.home(Role::User);
    fs::create_dir(home.join("sub")).unwrap();
    fs::write(home.join("b.txt"), "12345").unwrap();
    let read = sb
        .call("read", Role::User, false, json!({"path": "."}))
        .await;
    assert_eq!(read.value["kind"], "directory");
    assert_eq!(
        read.value["entries"],
        json!([{"name": "b.txt", "kind": "file", "size": 5}, {"name": "sub", "kind": "dir"}])
    );
    assert_eq!(read.value["total_entries"], 2);
}

#[tokio::test]
async fn admin_with_admin_open_reaches_the_host() {
    let sb = Sandbox::new();
    let secret = sb.outside.join("secret.txt").display().to_string();
    let read = sb
        .call("read", Role::Admin, true, json!({"path": secret}))
        .await;
    assert_eq!(read.value["content"], SECRET, "{:?}", read.value);
    let new = sb.outside.join("deep/new.txt").display().to_string();
    let write = sb
        .call(
            "write",
            Role::Admin,
            true,
            json!({"path": new, "content": "hi"}),
        )
        .await;
    assert!(write.is_ok(), "{:?}", write.value);
    assert_eq!(
        fs::read_to_string(sb.outside.join("deep/new.txt")).unwrap(),
        "hi"
    );
    // Relative paths still start at the sandbox root.
    let write = sb
        .call(
            "write",
            Role::Admin,
            true,
            json!({"path": "rel.txt", "content": "r"}),
        )
        .await;
    assert!(write.is_ok());
    assert_eq!(fs::read_to_string(sb.root.join("rel.txt")).unwrap(), "r");
}

// ---------------------------------------------------------------------------------------------
// File spaces: one per requester, the whole sandbox for admins
// ---------------------------------------------------------------------------------------------

const MIB: usize = 1024 * 1024;

fn quota_config(quota_mb: u64) -> Config {
    let mut config = Config::default();
    config.files.quota_mb = quota_mb;
    config
}

#[tokio::test]
async fn a_user_task_cannot_list_read_or_overwrite_another_persons_files() {
    let sb = Sandbox::new();
    let (admin, other, user) = (
        Caller::new(Role::Admin, person("qq", "9")),
        Caller::new(Role::User, person("qq", "2")),
        Caller::new(Role::User, person("qq", "1")),
    );
    let secret = |text: &str| json!({"path": "reports/ops-secrets.md", "content": text});
    for (caller, text) in [(&admin, "ADMIN SECRET\n"), (&other, "SECRET OF 2\n")] {
        let write = sb
            .call_as("write", caller, Config::default(), secret(text))
            .await;
        assert!(write.is_ok(), "{:?}", write.value);
    }
    let admin_file = sb.root.join("reports/ops-secrets.md");
    let other_file = sb.root.join("people/qq/2/reports/ops-secrets.md");
    // Links planted in the user's space (by hand, as no tool makes them): relative ones
    // climbing to the others' files, and absolute ones naming them.
    let home = sb.home(Role::User);
    symlink("../2/reports/ops-secrets.md", home.join("rel_other")).unwrap();
    symlink("../../../reports", home.join("rel_admin")).unwrap();
    symlink(&other_file, home.join("abs_other")).unwrap();
    symlink(sb.root.join("people/qq/2"), home.join("abs_other_dir")).unwrap();

    let listed = sb
        .call_as("read", &user, Config::default(), json!({"path": "."}))
        .await;
    let names: Vec<_> = listed.value["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        ["abs_other", "abs_other_dir", "rel_admin", "rel_other"],
        "the user lists only its own space"
    );
    let admin_abs = admin_file.display().to_string();
    let other_abs = other_file.display().to_string();
    let escapes = [
        "../2/reports/ops-secrets.md",
        "../../../reports/ops-secrets.md",
        admin_abs.as_str(),
        other_abs.as_str(),
        "rel_other",
        "rel_admin/ops-secrets.md",
        "abs_other",
        "abs_other_dir/reports/ops-secrets.md",
    ];
    for path in escapes.iter().chain(&["reports", "reports/ops-secrets.md"]) {
        let read = sb
            .call_as("read", &user, Config::default(), json!({"path": path}))
            .await;
        assert!(!read.is_ok(), "{path}: {:?}", read.value);
        assert!(!read.value.to_string().contains("SECRET"), "{path}");
    }
    for path in escapes {
        for args in write_args(path) {
            let write = sb.call_as("write", &user, Config::default(), args).await;
            assert!(!write.is_ok(), "{path}: {:?}", write.value);
        }
    }
    // The same path names the user's own file, not theirs.
    for args in write_args("reports/ops-secrets.md") {
        let write = sb.call_as("write", &user, Config::default(), args).await;
        assert!(write.is_ok(), "{:?}", write.value);
    }
    assert_eq!(fs::read_to_string(&admin_file).unwrap(), "ADMIN SECRET\n");
    assert_eq!(fs::read_to_string(&other_file).unwrap(), "SECRET OF 2\n");
    assert_eq!(
        fs::read_to_string(home.join("reports/ops-secrets.md")).unwrap(),
        "PWNEDPWNED"
    );
}

#[tokio::test]
async fn two_requesters_with_the_same_path_get_separate_files() {
    let sb = Sandbox::new();
    let people = [("qq", "1"), ("qq", "2"), ("telegram", "1")];
    for (platform, user_id) in people {
        let caller = Caller::new(Role::User, person(platform, user_id));
        let content = format!("notes of {platform}:{user_id}\n");
        let write = json!({"path": "notes.md", "content": content});
        let outcome = sb.call_as("write", &caller, Config::default(), write).await;
        assert!(outcome.is_ok(), "{:?}", outcome.value);
    }
    for (platform, user_id) in people {
        let caller = Caller::new(Role::User, person(platform, user_id));
        let read = sb
            .call_as(
                "read",
                &caller,
                Config::default(),
                json!({"path": "notes.md"}),
            )
            .await;
        assert_eq!(
            read.value["content"],
            format!("notes of {platform}:{user_id}\n")
        );
    }
    assert_eq!(
        sb.files_in_sandbox(),
        [
            "people/qq/1/notes.md",
            "people/qq/2/notes.md",
            "people/telegram/1/notes.md"
        ]
    );
}

#[tokio::test]
async fn an_admin_sees_every_persons_files_and_the_files_from_before() {
    let sb = Sandbox::new();
    // A file kept before file spaces existed: its owner is unknown, so it stays with admins.
    fs::write(sb.root.join("old.md"), "from before\n").unwrap();
    for user_id in ["1", "2"] {
        let caller = Caller::new(Role::User, person("qq", user_id));
        let write = json!({"path": "notes.md", "content": format!("of {user_id}\n")});
        assert!(
            sb.call_as("write", &caller, Config::default(), write)
                .await
                .is_ok()
        );
    }
    let admin = Caller::new(Role::Admin, person("qq", "9"));
    let listed = sb
        .call_as(
            "read",
            &admin,
            Config::default(),
            json!({"path": "people/qq"}),
        )
        .await;
    assert_eq!(
        listed.value["entries"],
        json!([{"name": "1", "kind": "dir"}, {"name": "2", "kind": "dir"}])
    );
    for (path, content) in [
        ("people/qq/1/notes.md", "of 1\n"),
        ("people/qq/2/notes.md", "of 2\n"),
        ("old.md", "from before\n"),
    ] {
        let read = sb
            .call_as("read", &admin, Config::default(), json!({"path": path}))
            .await;
        assert_eq!(read.value["content"], content, "{path}");
    }
    // The old file is not in any person's space.
    let user = Caller::new(Role::User, person("qq", "1"));
    let read = sb
        .call_as("read", &user, Config::default(), json!({"path": "old.md"}))
        .await;
    assert!(read.error_message().unwrap().contains("no such file"));
}

#[tokio::test]
async fn a_task_without_a_requester_gets_its_own_root() {
    let sb = Sandbox::new();
    let planner_s1 = Caller::new(Role::User, None);
    let write = json!({"path": "notes.md", "content": "planner of s1\n"});
    let outcome = sb
        .call_as("write", &planner_s1, Config::default(), write)
        .await;
    assert!(outcome.is_ok(), "{:?}", outcome.value);
    assert_eq!(sb.files_in_sandbox(), ["planner/s1/notes.md"]);

    // Neither another chat's requester-less task nor a requester in the same chat sees it.
    let planner_s2 = Caller {
        stream: "s2",
        ..Caller::new(Role::User, None)
    };
    for caller in [&planner_s2, &Caller::new(Role::User, person("qq", "1"))] {
        let read = sb
            .call_as(
                "read",
                caller,
                Config::default(),
                json!({"path": "notes.md"}),
            )
            .await;
        assert!(!read.is_ok(), "{:?}", read.value);
    }
    let read = sb
        .call_as(
            "read",
            &planner_s1,
            Config::default(),
            json!({"path": "notes.md"}),
        )
        .await;
    assert_eq!(read.value["content"], "planner of s1\n");
}

/// A role that an admin can take away between two calls of a running task.
struct Switchable(AtomicBool);

impl RoleProvider for Switchable {
    fn role(&self) -> Role {
        if self.0.load(Ordering::SeqCst) {
            Role::Admin
        } else {
            Role::User
        }
    }
}

#[tokio::test]
async fn the_root_follows_the_role_of_each_call() {
    let sb = Sandbox::new();
    fs::write(sb.root.join("admin.md"), "admin only\n").unwrap();
    let role = Arc::new(Switchable(AtomicBool::new(true)));
    let caller = Caller {
        role: role.clone(),
        ..Caller::new(Role::User, person("qq", "1"))
    };
    let read =
        |path: &'static str| sb.call_as("read", &caller, Config::default(), json!({"path": path}));
    assert_eq!(read("admin.md").await.value["content"], "admin only\n");
    role.0.store(false, Ordering::SeqCst);
    assert!(
        !read("admin.md").await.is_ok(),
        "demoted: only its own space"
    );
    role.0.store(true, Ordering::SeqCst);
    assert!(read("admin.md").await.is_ok());
}

#[tokio::test]
async fn hostile_user_ids_cannot_escape_or_collide() {
    let sb = Sandbox::new();
    let hostile = [
        ("qq", "../.."),
        ("qq", ".."),
        ("qq", "."),
        ("qq", "a/b"),
        ("qq", "a%2Fb"),
        ("qq", "a"),
        ("qq", "b"),
        ("qq", "/etc"),
        ("..", "x"),
        ("a", "b/c"),
        ("a/b", "c"),
        ("people", "qq"),
        ("qq", ".hidden"),
    ];
    for (platform, user_id) in hostile {
        let caller = Caller::new(Role::User, person(platform, user_id));
        let write = json!({"path": "mine.txt", "content": format!("{platform}:{user_id}")});
        let outcome = sb.call_as("write", &caller, Config::default(), write).await;
        assert!(outcome.is_ok(), "{platform}:{user_id}: {:?}", outcome.value);
    }
    for (platform, user_id) in hostile {
        let caller = Caller::new(Role::User, person(platform, user_id));
        let read = sb
            .call_as(
                "read",
                &caller,
                Config::default(),
                json!({"path": "mine.txt"}),
            )
            .await;
        assert_eq!(read.value["content"], format!("{platform}:{user_id}"));
        let listed = sb
            .call_as("read", &caller, Config::default(), json!({"path": "."}))
            .await;
        assert_eq!(listed.value["total_entries"], 1, "{platform}:{user_id}");
    }
    // One file per id, each exactly at people/<platform>/<user_id>/, none anywhere else.
    let files = sb.files_in_sandbox();
    assert_eq!(files.len(), hostile.len(), "{files:?}");
    for file in &files {
        let names: Vec<_> = Path::new(file).components().collect();
        assert_eq!(names.len(), 4, "{file}");
        assert!(
            file.starts_with("people/") && file.ends_with("/mine.txt"),
            "{file}"
        );
    }
    assert!(files.contains(&"people/qq/%2E.%2F../mine.txt".to_owned()));
    sb.assert_outside_untouched();
    // An id too long to be a directory name gets no space, and says so.
    let long = Caller::new(Role::User, person("qq", &"9".repeat(300)));
    let write = json!({"path": "mine.txt", "content": "x"});
    let outcome = sb.call_as("write", &long, Config::default(), write).await;
    assert!(
        outcome.error_message().unwrap().contains("too long"),
        "{:?}",
        outcome.value
    );
    assert_eq!(sb.files_in_sandbox().len(), hostile.len());
}

// ---------------------------------------------------------------------------------------------
// The quota
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_append_over_the_quota_is_refused_and_the_file_is_unchanged() {
    let sb = Sandbox::new();
    let user = Caller::new(Role::User, person("qq", "1"));
    let big = "x".repeat(MIB - 10);
    let write = |args: Value| sb.call_as("write", &user, quota_config(1), args);
    assert!(
        write(json!({"path": "big.txt", "content": big}))
            .await
            .is_ok()
    );
    let fill = json!({"path": "big.txt", "content": "0123456789", "append": true});
    assert!(write(fill).await.is_ok(), "exactly the quota fits");

    let over = write(json!({"path": "big.txt", "content": "!", "append": true})).await;
    let error = over.error_message().unwrap();
    for needle in [
        "quota of 1 MiB",
        "[files] quota_mb = 1",
        &format!("it holds {MIB} bytes now"),
        "replacing files you no longer need",
        "ask the operator to raise [files] quota_mb",
    ] {
        assert!(
            error.contains(needle),
            "`{error}` should mention `{needle}`"
        );
    }
    let file = sb.home(Role::User).join("big.txt");
    assert_eq!(fs::metadata(&file).unwrap().len(), MIB as u64);
    assert!(!fs::read_to_string(&file).unwrap().ends_with('!'));
    // A new file, even in a new directory, changes nothing either.
    let new = write(json!({"path": "sub/new.txt", "content": "!"})).await;
    assert!(new.error_message().unwrap().contains("quota"));
    assert!(!sb.home(Role::User).join("sub").exists());
    // A replacement counts only what it adds: shrinking a file frees space.
    assert!(
        write(json!({"path": "big.txt", "content": "small"}))
            .await
            .is_ok()
    );
    assert!(
        write(json!({"path": "sub/new.txt", "content": "!"}))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn many_small_writes_cannot_exceed_the_quota() {
    let sb = Sandbox::new();
    let user = Caller::new(Role::User, person("qq", "1"));
    let chunk = "y".repeat(MIB / 16);
    let mut written = 0;
    for i in 0..40 {
        let (path, append) = if i % 2 == 0 {
            (format!("parts/{i}.txt"), false)
        } else {
            ("log.txt".to_owned(), true)
        };
        let args = json!({"path": path, "content": chunk, "append": append});
        if sb
            .call_as("write", &user, quota_config(1), args)
            .await
            .is_ok()
        {
            written += 1;
        }
    }
    assert_eq!(written, 16);
    let total: u64 = sb
        .files_in_sandbox()
        .iter()
        .map(|file| fs::metadata(sb.root.join(file)).unwrap().len())
        .sum();
    assert_eq!(total, MIB as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_cannot_pass_the_quota_together() {
    let sb = Arc::new(Sandbox::new());
    let chunk = "z".repeat(MIB / 16);
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..40 {
        let (sb, chunk) = (Arc::clone(&sb), chunk.clone());
        calls.spawn(async move {
            let user = Caller::new(Role::User, person("qq", "1"));
            let args = json!({"path": format!("part{i}.txt"), "content": chunk});
            sb.call_as("write", &user, quota_config(1), args)
                .await
                .is_ok()
        });
    }
    let written = calls.join_all().await.into_iter().filter(|ok| *ok).count();
    assert_eq!(written, 16);
    assert_eq!(sb.files_in_sandbox().len(), 16);
}

/// Admins write anywhere in the sandbox, so no one space's quota is theirs: only
/// `max_write_bytes` bounds each of their calls.
#[tokio::test]
async fn admin_writes_are_bounded_by_max_write_bytes_only() {
    let sb = Sandbox::new();
    let admin = Caller::new(Role::Admin, person("qq", "9"));
    let chunk = "a".repeat(MIB);
    for _ in 0..3 {
        let args = json!({"path": "people/qq/1/big.txt", "content": chunk, "append": true});
        let outcome = sb.call_as("write", &admin, quota_config(1), args).await;
        assert!(outcome.is_ok(), "{:?}", outcome.value);
    }
    // The person's own writes are still held to the quota their space is now over.
    let user = Caller::new(Role::User, person("qq", "1"));
    let args = json!({"path": "more.txt", "content": "x"});
    let outcome = sb.call_as("write", &user, quota_config(1), args).await;
    assert!(outcome.error_message().unwrap().contains("quota"));
}
