//! The file tools through the registry, as the agent loop calls them. Most tests are attacks on
//! the sandbox, run for every confined role (user, admin without `admin_open`, and user even when
//! `admin_open` is set), each asserting both the refusal and that nothing outside changed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

use std::fs;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mai_core::config::Config;
use mai_core::ids::StreamId;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{FixedRole, OutcomeKind, ToolContext, ToolOutcome, ToolRegistry, Visibility};
use mai_tools::files::file_tools;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "OUTSIDE SECRET\n";

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
        let ctx = ToolContext::new(
            TaskId::new(),
            "qq:1".parse().unwrap(),
            StreamId::new("s1").unwrap(),
            "qq",
            Arc::new(FixedRole(role)),
            CancellationToken::new(),
            Arc::new(config),
        );
        // A hang (e.g. a blocking FIFO open) fails the test instead of stalling the suite.
        tokio::time::timeout(
            Duration::from_secs(20),
            self.registry.execute(tool, role, args, &ctx),
        )
        .await
        .expect("the tool call hung")
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

    fn root_names(&self) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(&self.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

fn all_contain(errors: &[String], needle: &str) {
    for error in errors {
        assert!(
            error.contains(needle),
            "`{error}` should mention `{needle}`"
        );
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
    assert!(sb.root_names().is_empty());
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
    symlink("/etc", sb.root.join("etc")).unwrap();
    symlink(&sb.outside, sb.root.join("out")).unwrap();
    symlink(sb.outside.join("secret.txt"), sb.root.join("secret_link")).unwrap();
    symlink(sb.outside.join("new.txt"), sb.root.join("dangling_out")).unwrap();
    // A relative symlink climbing out.
    symlink("../../outside", sb.root.join("rel_out")).unwrap();

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
    assert!(
        fs::symlink_metadata(sb.root.join("secret_link"))
            .unwrap()
            .is_symlink()
    );
    assert!(
        fs::symlink_metadata(sb.root.join("dangling_out"))
            .unwrap()
            .is_symlink()
    );
}

#[tokio::test]
async fn symlinks_inside_the_sandbox_work() {
    let sb = Sandbox::new();
    fs::create_dir_all(sb.root.join("real")).unwrap();
    fs::write(sb.root.join("real/a.txt"), "inside\n").unwrap();
    symlink("real", sb.root.join("alias")).unwrap();
    symlink("real/a.txt", sb.root.join("a_link")).unwrap();
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
        fs::read_to_string(sb.root.join("real/a.txt")).unwrap(),
        "new\n"
    );
    assert!(
        fs::symlink_metadata(sb.root.join("a_link"))
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
    let sub = sb.root.join("sub");
    let parked = sb.root.join("sub_real");
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
            let read = sb
                .call("read", role, admin_open, json!({"path": "sub/secret.txt"}))
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
        let append = json!({"path": "sub/log.txt", "content": "PWNED", "append": true});
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
    symlink("/proc/self", sb.root.join("me")).unwrap();
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
    symlink("/dev/zero", sb.root.join("zero")).unwrap();
    symlink("/dev/null", sb.root.join("null")).unwrap();
    symlink("/dev", sb.root.join("dev")).unwrap();
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
    let fifo = sb.root.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
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
    // Still a FIFO: not replaced by the atomic write.
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
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
    assert!(sb.root_names().is_empty());
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
    assert!(sb.root_names().is_empty());
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
    assert!(sb.root_names().is_empty());
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
    assert_eq!(
        fs::read_to_string(sb.root.join("notes/day/1.txt")).unwrap(),
        "new"
    );
    let names: Vec<_> = fs::read_dir(sb.root.join("notes/day"))
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
        fs::read_to_string(sb.root.join("log/app.log")).unwrap(),
        "a\nb\nc\n"
    );
}

#[tokio::test]
async fn writing_a_directory_or_a_trailing_slash_is_refused() {
    let sb = Sandbox::new();
    fs::create_dir(sb.root.join("dir")).unwrap();
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
    assert!(sb.root.join("dir").is_dir());
}

#[tokio::test]
async fn line_ranges_page_through_a_big_file() {
    let sb = Sandbox::new();
    let text: String = (1..=100_000).map(|n| format!("line {n}\n")).collect();
    fs::write(sb.root.join("big.txt"), &text).unwrap();

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
        sb.root.join("wide.txt"),
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
    fs::write(sb.root.join("nul.bin"), b"text\0more").unwrap();
    fs::write(sb.root.join("latin1.txt"), b"caf\xe9 au lait").unwrap();
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
    fs::create_dir(sb.root.join("sub")).unwrap();
    fs::write(sb.root.join("b.txt"), "12345").unwrap();
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
