//! The file tools' sandbox (docs/tools.md#files): `read` and `write` through the registry, exactly
//! as the agent loop calls them, with an arbitrary path, for every confined role. The sandbox root
//! holds symlinks that lead out (to a sibling directory holding a secret, to the parent, by
//! absolute and relative targets, through a subdirectory, in a loop). Asserts that no call ever
//! reads the secret or changes anything outside the root, whatever the path.
#![no_main]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use mai_core::config::Config;
use mai_core::ids::StreamId;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{FixedRole, ToolContext, ToolRegistry};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "OUTSIDE-SECRET-7f3a";
/// (role, `[files] admin_open`): the combinations that must stay confined.
const CONFINED: [(Role, bool); 3] = [
    (Role::User, false),
    (Role::Admin, false),
    (Role::User, true),
];
/// The root is wiped and re-planted this often, so fuzzed writes do not pile up.
const RESET_EVERY: u64 = 2_000;

struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    outside: PathBuf,
    registry: ToolRegistry,
    runtime: tokio::runtime::Runtime,
    /// What `base` (outside the root) holds, to compare against after every call.
    outside_state: BTreeMap<PathBuf, Vec<u8>>,
    calls: AtomicU64,
}

fn must<T, E: std::fmt::Debug>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e:?}"))
}

/// Every path under `dir` (symlinks not followed, the root itself skipped) with its contents.
fn snapshot(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for entry in must(fs::read_dir(dir), "read_dir") {
        let path = must(entry, "dir entry").path();
        if path == skip {
            continue;
        }
        let meta = must(fs::symlink_metadata(&path), "metadata");
        if meta.is_dir() {
            out.insert(path.clone(), Vec::new());
            snapshot(&path, skip, out);
        } else if meta.file_type().is_symlink() {
            out.insert(
                path.clone(),
                must(fs::read_link(&path), "read_link")
                    .into_os_string()
                    .into_encoded_bytes(),
            );
        } else {
            out.insert(path.clone(), must(fs::read(&path), "read"));
        }
    }
}

/// Fresh contents of the root: a normal file, a subdirectory and symlinks that lead out.
fn plant(root: &Path, outside: &Path) {
    for entry in must(fs::read_dir(root), "read_dir root") {
        let path = must(entry, "entry").path();
        let meta = must(fs::symlink_metadata(&path), "metadata");
        if meta.is_dir() {
            must(fs::remove_dir_all(&path), "remove dir");
        } else {
            must(fs::remove_file(&path), "remove file");
        }
    }
    must(fs::write(root.join("hello.txt"), "hello"), "hello");
    must(fs::create_dir_all(root.join("sub/deeper")), "sub");
    must(symlink("../outside", root.join("out")), "out");
    must(
        symlink("../outside/secret.txt", root.join("secret_link")),
        "secret_link",
    );
    must(symlink(outside, root.join("abs_out")), "abs_out");
    must(
        symlink(outside.join("secret.txt"), root.join("abs_secret")),
        "abs_secret",
    );
    must(symlink("..", root.join("parent")), "parent");
    must(symlink("../..", root.join("sub/up")), "sub/up");
    must(
        symlink("../../../outside/new.txt", root.join("sub/deeper/dangling")),
        "dangling",
    );
    must(symlink("loop", root.join("loop")), "loop");
    must(
        symlink("hello.txt", root.join("inside_link")),
        "inside_link",
    );
}

/// The traps in the sandbox root and in the space of qq:1 (`people/qq/1`), whom the non-admin
/// calls act for.
fn plant_all(root: &Path, outside: &Path) {
    plant(root, outside);
    let space = root.join("people/qq/1");
    must(fs::create_dir_all(&space), "space");
    plant(&space, outside);
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let tmp = must(tempfile::tempdir(), "tempdir");
    let base = tmp.path().to_path_buf();
    let root = base.join("files");
    let outside = base.join("outside");
    must(fs::create_dir_all(&root), "root");
    must(fs::create_dir_all(&outside), "outside");
    must(fs::write(outside.join("secret.txt"), SECRET), "secret");
    plant_all(&root, &outside);
    let registry = ToolRegistry::new();
    for tool in must(mai_tools::files::file_tools(root.clone()), "file tools") {
        registry.register(tool);
    }
    let mut outside_state = BTreeMap::new();
    snapshot(&base, &root, &mut outside_state);
    let runtime = must(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        "runtime",
    );
    Fixture {
        _tmp: tmp,
        base,
        root,
        outside,
        registry,
        runtime,
        outside_state,
        calls: AtomicU64::new(0),
    }
});

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let fixture = &*FIXTURE;
    if fixture.calls.fetch_add(1, Ordering::Relaxed) % RESET_EVERY == RESET_EVERY - 1 {
        plant_all(&fixture.root, &fixture.outside);
    }
    let (role, admin_open) = CONFINED[usize::from(selector % 3)];
    let path = String::from_utf8_lossy(rest).into_owned();
    let (tool, args) = match (selector >> 2) % 4 {
        0 => ("read", json!({"path": path})),
        1 => ("write", json!({"path": path, "content": "FUZZ"})),
        2 => (
            "write",
            json!({"path": path, "content": "FUZZ", "append": true}),
        ),
        _ => ("read", json!({"path": path, "offset": 1, "limit": 3})),
    };
    let mut config = Config::default();
    config.files.admin_open = admin_open;
    let ctx = ToolContext::new(
        TaskId::new(),
        must("qq:1".parse(), "owner"),
        must(StreamId::new("s1"), "stream"),
        "qq",
        Arc::new(FixedRole(role)),
        CancellationToken::new(),
        Arc::new(config),
    )
    .with_requester(Some(must("qq:1".parse(), "requester")));
    let outcome = fixture
        .runtime
        .block_on(fixture.registry.execute(tool, role, args, &ctx));
    let text = outcome.value.to_string();
    assert!(
        !text.contains(SECRET),
        "{tool} {path:?} as {role} read the secret: {text:.300}"
    );
    let mut now = BTreeMap::new();
    snapshot(&fixture.base, &fixture.root, &mut now);
    assert!(
        now == fixture.outside_state,
        "{tool} {path:?} as {role} changed something outside the root: {:?}",
        now.keys().collect::<Vec<_>>()
    );
});
