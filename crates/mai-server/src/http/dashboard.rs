//! The web dashboard (docs/dashboard.md): its page at `/` and its assets at `/ui/{name}`, plain
//! ES modules, CSS and an icon embedded in the binary from `crates/mai-server/assets/` — no build
//! step, nothing fetched from elsewhere.
//!
//! The page and assets pass the same Host and Origin checks as the API but need no token: they
//! hold no data, and the page is where a person types the token. Every data call the page makes
//! goes to `/v1/…` with the token. Each answer carries a strict Content-Security-Policy (scripts
//! and styles from this server only, no inline script, no eval, Trusted Types required so no
//! HTML can be written from a string), `nosniff`, no framing and no referrer. Must not: serve
//! anything that is not in [`ASSETS`], or put data into a page.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, PathParams};

/// The policy every dashboard answer carries.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; \
     trusted-types 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../../assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Everything the dashboard is made of.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("main.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("charts.js", JS),
    asset!("tasks.js", JS),
    asset!("detail.js", JS),
    asset!("waiting.js", JS),
    asset!("schedules.js", JS),
    asset!("tools.js", JS),
    asset!("health.js", JS),
];

/// The names of the embedded files (for tests and docs).
pub fn asset_names() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|asset| asset.name)
}

fn serve(name: &str) -> Response {
    let Some(asset) = ASSETS.iter().find(|asset| asset.name == name) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            format!("the dashboard has no file `{name}`; open / instead"),
        )
        .into_response();
    };
    let mut response = ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // A new binary's files apply at the next load.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /`: the dashboard's page.
pub(crate) async fn index() -> Response {
    serve("index.html")
}

/// `GET /ui/{name}`: one of its files.
pub(crate) async fn file(PathParams(name): PathParams<String>) -> Response {
    serve(&name)
}
