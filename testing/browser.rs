//! Shared by the dashboard's browser tests (included with `#[path]`): a real headless Chromium
//! driven over WebDriver (chromedriver, through the `fantoccini` crate), both installed by
//! `testing/browser/setup.sh` (Debian's `chromium` and `chromium-driver`).
//!
//! [`Browser::start`] returns `None` after a SKIP line when they are missing — or, under
//! `CI=true`, panics (see `testing/peers.rs`): CI proves the real thing. Each browser gets a fresh
//! profile directory and the flags a headless Chromium needs as root and offline (no sandbox as
//! root, no background networking, updates, sync or QUIC); [`Browser::start_phone`] emulates a
//! phone with Chromium's mobile emulation. Screenshots go to
//! `<target>/tmp/dashboard-screenshots/`, and also to `docs/img/` when
//! `MAI_UPDATE_DOC_SCREENSHOTS=1`.
#![allow(dead_code)]

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

#[path = "peers.rs"]
mod peers;

/// How long a page may take to show what a test waits for.
pub const WAIT: Duration = Duration::from_secs(30);

/// Chromium and chromedriver, as `setup.sh` found or installed them.
fn installed() -> Result<(PathBuf, PathBuf), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testing/browser/setup.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    match lines.as_slice() {
        [.., chromium, driver] => Ok((PathBuf::from(chromium), PathBuf::from(driver))),
        _ => Err(format!("setup.sh printed no paths: {stdout}")),
    }
}

/// A headless Chromium under chromedriver, and the WebDriver client driving it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A fresh browser with a window of `width` × `height` CSS pixels; `dark` asks for the dark
    /// system theme. `None` (after SKIP) when Chromium is missing outside CI.
    pub async fn start(width: u32, height: u32, dark: bool) -> Option<Browser> {
        Browser::launch(width, height, dark, None).await
    }

    /// A fresh browser emulating a phone (Chromium's mobile emulation): a viewport of 390 × 844
    /// CSS pixels at twice the density, a touch screen, the page's `viewport` meta honoured as a
    /// phone does; `dark` asks for the dark system theme.
    pub async fn start_phone(dark: bool) -> Option<Browser> {
        let phone = json!({"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 2.0,
                                             "mobile": true, "touch": true}});
        Browser::launch(390, 844, dark, Some(phone)).await
    }

    async fn launch(
        width: u32,
        height: u32,
        dark: bool,
        mobile: Option<serde_json::Value>,
    ) -> Option<Browser> {
        let (chromium, driver_path) = match installed() {
            Ok(paths) => paths,
            Err(why) => {
                peers::peer_missing(
                    &format!("headless Chromium is not installed ({why})"),
                    "bash testing/browser/setup.sh",
                );
                return None;
            }
        };
        // Its own process group, so that ending the test ends Chromium too (see `Drop`).
        let mut driver = Command::new(&driver_path)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver starts");
        let port = driver_port(&mut driver);
        let profile = tempfile::tempdir().unwrap();
        let args = chromium_args(profile.path(), width, height, dark);
        let mut options = json!({"binary": chromium, "args": args});
        if let Some(mobile) = mobile {
            options["mobileEmulation"] = mobile;
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("chromedriver opens a Chromium session");
        // `wait_text` waits inside the page, up to 25 s.
        client
            .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
                Some(WAIT),
                Some(WAIT),
                None,
            ))
            .await
            .expect("chromedriver takes timeouts");
        Some(Browser {
            client,
            driver,
            _profile: profile,
        })
    }

    /// Waits (bounded by [`WAIT`]) for an element matching `css`.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element `{css}` appeared: {e}"))
    }

    /// Waits (bounded by [`WAIT`]) until the element matching `css` exists and its text
    /// contains `needle`; returns that text. The browser watches the page for changes (a
    /// `MutationObserver`), so nothing polls.
    pub async fn wait_text(&self, css: &str, needle: &str) -> String {
        let script = r#"
            const [css, needle, done] = arguments;
            const text = () => { const el = document.querySelector(css); return el ? el.innerText : null; };
            const check = () => { const t = text(); return t !== null && t.includes(needle) ? t : null; };
            const now = check();
            if (now !== null) { done({ok: now}); return; }
            const observer = new MutationObserver(() => {
                const t = check();
                if (t !== null) { observer.disconnect(); clearTimeout(timer); done({ok: t}); }
            });
            observer.observe(document.documentElement, {subtree: true, childList: true, characterData: true, attributes: true});
            const timer = setTimeout(() => { observer.disconnect(); done({timeout: text()}); }, 25000);
        "#;
        let answer = self
            .client
            .execute_async(script, vec![json!(css), json!(needle)])
            .await
            .unwrap_or_else(|e| panic!("waiting for `{css}` to show {needle:?} failed: {e}"));
        match answer["ok"].as_str() {
            Some(text) => text.to_owned(),
            None => panic!(
                "`{css}` never showed {needle:?}; it shows: {}",
                answer["timeout"]
            ),
        }
    }

    /// Saves a screenshot of the page as `<name>.png` in the artifact directory (and in
    /// `docs/img/` with `MAI_UPDATE_DOC_SCREENSHOTS=1`); returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, &png).unwrap();
        if std::env::var("MAI_UPDATE_DOC_SCREENSHOTS").is_ok_and(|v| v == "1") {
            let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(docs.join(format!("dashboard-{name}.png")), &png).unwrap();
        }
        path
    }

    /// Ends the session (Chromium quits), then chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    /// Ends chromedriver and whatever it started (Chromium), even when a test failed midway:
    /// they share the process group chromedriver was started in.
    fn drop(&mut self) {
        if let Some(group) = rustix::process::Pid::from_raw(self.driver.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.driver.wait();
    }
}

/// The flags a headless Chromium needs here: a fresh profile, the window size, nothing that
/// reaches the network on its own, no sandbox as root (it cannot start otherwise), and the dark
/// system theme when asked.
fn chromium_args(profile: &Path, width: u32, height: u32, dark: bool) -> Vec<String> {
    let mut args = vec![
        "--headless=new".to_owned(),
        format!("--user-data-dir={}", profile.display()),
        format!("--window-size={width},{height}"),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--no-first-run".into(),
        "--disable-quic".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--hide-scrollbars".into(),
        // No crash handler: it would detach from the process group and outlive the test.
        "--disable-breakpad".into(),
        "--disable-crash-reporter".into(),
    ];
    if rustix::process::geteuid().is_root() {
        args.push("--no-sandbox".into());
    }
    if dark {
        args.push("--force-dark-mode".into());
    }
    args
}

/// The port chromedriver says it listens on ("… started successfully on port 41235.").
fn driver_port(driver: &mut Child) -> u16 {
    let stdout = driver.stdout.take().expect("chromedriver's stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref().map_while(Result::ok) {
        if let Some(rest) = line.split("started successfully on port ").nth(1) {
            let port = rest.trim_end_matches('.').trim();
            if let Ok(port) = port.parse() {
                // Keep draining its output so it never blocks on a full pipe.
                std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
                return port;
            }
        }
    }
    panic!("chromedriver never said which port it listens on");
}
