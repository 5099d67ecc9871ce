//! The door of the HTTP API: every request except `GET /healthz` passes here first.
//!
//! In order: the request must name one host unambiguously — exactly one `Host` header, an IPv6
//! literal followed by nothing but `:port`, and an absolute-form target (`GET http://host/…`)
//! naming that same host — or it is a 400; that host must name this server — a loopback name (`localhost`,
//! `127.0.0.1`, `[::1]`, any port), the host of the listen address, or an entry of
//! `[server] allowed_hosts` — so a web page that rebinds its own domain to 127.0.0.1 cannot talk
//! to us (DNS rebinding); an `Origin` header, when a browser sends one, must be a loopback origin
//! or in `allowed_origins`; then, when `auth_token` is set, `Authorization: Bearer <token>` must
//! match it (compared in constant time); a declared body larger than `max_body_bytes` is
//! refused before it is read. Must not: look at what the request asks for — that is the
//! endpoints' business.
//!
//! CORS, for web pages on an allowed origin (a dashboard): a preflight (`OPTIONS` with `Origin`
//! and `Access-Control-Request-Method`) that passed the Host and Origin checks is answered here
//! with 204 and what may be sent — browsers send no `Authorization` on a preflight, and the
//! answer reveals nothing. Every answer to a request from an allowed origin names that origin in
//! `Access-Control-Allow-Origin`, so the page can read it (errors included).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// A request the guard let through.
enum Pass {
    /// On to the endpoint.
    Request,
    /// A CORS preflight from an allowed origin: answered by the guard.
    Preflight,
}

/// What the guard checks against; built once from `[server]`.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    token: Option<String>,
    /// The host part of the listen address, when it is a specific address (not 0.0.0.0/[::]).
    listen_host: Option<String>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    max_body_bytes: usize,
}

impl Guard {
    pub(crate) fn new(config: &mai_core::config::ServerConfig) -> Self {
        let listen_host = config
            .listen
            .parse::<SocketAddr>()
            .ok()
            .map(|addr| addr.ip())
            .filter(|ip| !ip.is_unspecified())
            .map(|ip| match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            });
        Guard {
            token: config.auth_token.clone().filter(|t| !t.is_empty()),
            listen_host,
            allowed_hosts: config
                .allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            allowed_origins: config
                .allowed_origins
                .iter()
                .map(|o| normalize_origin(o))
                .collect(),
            max_body_bytes: config.max_body_bytes,
        }
    }

    /// `needs_token`: false only for the dashboard's page and assets, which carry no data.
    fn check(&self, request: &Request, needs_token: bool) -> Result<Pass, ApiError> {
        let host = requested_host(request)?;
        if !self.host_allowed(&host) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "Host `{host}` is not this server's name; use localhost or add it to \
                     [server] allowed_hosts"
                ),
            ));
        }
        let origin = request.headers().get(header::ORIGIN);
        if let Some(origin) = origin {
            let origin = origin.to_str().unwrap_or("(not text)");
            if !self.origin_allowed(origin) && !same_origin(origin, &host) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Origin `{origin}` may not call this API; add it to [server] \
                         allowed_origins"
                    ),
                ));
            }
        }
        if origin.is_some() && is_preflight(request) {
            return Ok(Pass::Preflight);
        }
        if let Some(token) = self.token.as_ref().filter(|_| needs_token) {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|h| h.to_str().ok())
                .and_then(bearer);
            let Some(given) = given else {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "missing `Authorization: Bearer <token>` header ([server] auth_token is set)",
                ));
            };
            // Constant time over the bytes; only the length can leak, which is not the secret.
            if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "wrong bearer token; use [server] auth_token",
                ));
            }
        }
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<u64>().ok());
        if let Some(length) = declared
            && length > self.max_body_bytes as u64
        {
            return Err(too_large(self.max_body_bytes));
        }
        Ok(Pass::Request)
    }

    /// The request's `Origin` when a browser sent one this API allows (a page of this server
    /// itself needs no CORS header: it is same-origin).
    fn allowed_origin(&self, request: &Request) -> Option<HeaderValue> {
        request
            .headers()
            .get(header::ORIGIN)
            .filter(|origin| origin.to_str().is_ok_and(|o| self.origin_allowed(o)))
            .cloned()
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = host_name(&host);
        if is_loopback_name(name) {
            return true;
        }
        if self.listen_host.as_deref() == Some(name) {
            return true;
        }
        // An entry with a port must match exactly; one without matches that name on any port.
        self.allowed_hosts
            .iter()
            .any(|allowed| *allowed == host || (host_name(allowed) == allowed && allowed == name))
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = normalize_origin(origin);
        if self.allowed_origins.contains(&origin) {
            return true;
        }
        match origin.split_once("://") {
            Some(("http" | "https", authority)) => is_loopback_name(host_name(authority)),
            _ => false,
        }
    }
}

pub(crate) fn too_large(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {max} bytes ([server] max_body_bytes)"),
    )
}

/// Reads the whole body (already capped by the body-limit layer) before the inner service sees
/// it, for services that do not know that layer's error: rmcp answers a body that fails to read
/// with 500, so an oversized chunked body to `/mcp` was a 500 instead of a 413.
pub(crate) async fn buffer_body(
    State(max): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    use axum::extract::FromRequest;
    use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
    let (parts, body) = request.into_parts();
    match axum::body::Bytes::from_request(Request::new(body), &()).await {
        Ok(bytes) => next.run(Request::from_parts(parts, bytes.into())).await,
        Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_))) => {
            too_large(max).into_response()
        }
        Err(rejection) => ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("could not read the request body: {rejection}"),
        )
        .into_response(),
    }
}

/// The one host the request is for: its single `Host` header, which an absolute-form target
/// (`GET http://host/path`) must agree with; over HTTP/2 the `:authority` stands in for a missing
/// `Host`. Anything ambiguous — two `Host` headers, a target naming another host, a `Host` with
/// junk after an IPv6 literal — is refused, because another server or proxy on the way could
/// read a different host from it than this check did.
fn requested_host(request: &Request) -> Result<String, ApiError> {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return Err(ApiError::bad_request(
            "the request has more than one Host header; send exactly one (e.g. \
             `Host: localhost:8760`)",
        ));
    }
    let header = match header {
        Some(value) => Some(value.to_str().map_err(|_| {
            ApiError::bad_request("the Host header is not text; send e.g. `Host: localhost:8760`")
        })?),
        None => None,
    };
    let target = request.uri().authority().map(|a| a.as_str());
    let host = match (header, target) {
        (Some(host), Some(target)) if !host.trim().eq_ignore_ascii_case(target) => {
            return Err(ApiError::bad_request(format!(
                "the request target names host `{target}` but the Host header says `{host}`; \
                 send the path only (`GET /v1/tasks`) with Host naming this server"
            )));
        }
        (Some(host), _) => host,
        (None, Some(target)) if request.version() == axum::http::Version::HTTP_2 => target,
        (None, Some(target)) => {
            return Err(ApiError::bad_request(format!(
                "the request target names host `{target}` but there is no Host header; send \
                 the path only (`GET /v1/tasks`) with a Host header naming this server"
            )));
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "the request has no Host header; send e.g. `Host: localhost:8760`",
            ));
        }
    };
    well_formed_host(host.trim())?;
    Ok(host.trim().to_owned())
}

/// A bracketed IPv6 literal may be followed only by `:port`: `[::1]evil.com` is not `[::1]`.
fn well_formed_host(host: &str) -> Result<(), ApiError> {
    let Some(literal) = host.strip_prefix('[') else {
        return Ok(());
    };
    let after = literal.split_once(']').map(|(_, after)| after);
    let ok = match after {
        Some("") => true,
        Some(after) => after
            .strip_prefix(':')
            .is_some_and(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "Host `{host}` is malformed: an IPv6 address must be closed by `]` and followed \
             only by `:port` (digits); send e.g. `Host: [::1]:8760`"
        )))
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// `host[:port]` → `host` (an IPv6 literal keeps its brackets).
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => authority,
    }
}

fn is_loopback_name(name: &str) -> bool {
    if name == "localhost" {
        return true;
    }
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    literal.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether `origin` is the origin of a page this server served under `host` (the dashboard
/// reached by a name in `allowed_hosts`): its authority is exactly the `Host` the request names,
/// which already passed the Host check, so no other site can be behind it.
fn same_origin(origin: &str, host: &str) -> bool {
    let origin = normalize_origin(origin);
    match origin.split_once("://") {
        Some(("http" | "https", authority)) => authority == host.trim().to_ascii_lowercase(),
        _ => false,
    }
}

fn normalize_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// A CORS preflight: what a browser asks before a request it may not send unasked.
fn is_preflight(request: &Request) -> bool {
    request.method() == axum::http::Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The answer to a preflight from an allowed origin: what the API accepts, cached 10 minutes.
fn preflight_answer() -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, DELETE"),
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                "authorization, content-type, accept, last-event-id, mcp-session-id, \
                 mcp-protocol-version, x-mai-client",
            ),
            (header::ACCESS_CONTROL_MAX_AGE, "600"),
        ],
    )
        .into_response()
}

/// The middleware of the API: every check, the token included.
pub(crate) async fn guard(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    guarded(&guard, request, next, true).await
}

/// The middleware of the dashboard's page and assets: the same checks but the token (the page
/// is where a person types it; it holds no data — every data call needs the token).
pub(crate) async fn page_guard(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    guarded(&guard, request, next, false).await
}

async fn guarded(guard: &Guard, request: Request, next: Next, needs_token: bool) -> Response {
    let origin = guard.allowed_origin(&request);
    let mut response = match guard.check(&request, needs_token) {
        Ok(Pass::Request) => next.run(request).await,
        Ok(Pass::Preflight) => preflight_answer(),
        Err(refusal) => refusal.into_response(),
    };
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("x-tool-outcome, mcp-session-id"),
        );
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
    // A 413 leaves (part of) the body unread on the connection, so it cannot carry another
    // request. Say so: without `Connection: close` a keep-alive client puts the connection
    // back in its pool and its next request there fails with "connection closed before
    // message completed" (seen under load: innocent requests failing after an oversized one).
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use mai_core::config::ServerConfig;

    fn guard_with(hosts: &[&str], origins: &[&str], listen: &str) -> Guard {
        Guard::new(&ServerConfig {
            listen: listen.into(),
            allowed_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            allowed_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            ..ServerConfig::default()
        })
    }

    #[test]
    fn hosts() {
        let g = guard_with(
            &["bot.example.org", "api.example.org:8443"],
            &[],
            "10.0.0.5:8760",
        );
        for ok in [
            "localhost",
            "localhost:8760",
            "127.0.0.1:1",
            "[::1]:8760",
            "[::1]",
            "LOCALHOST:80",
            "10.0.0.5:8760",
            "10.0.0.5",
            "bot.example.org",
            "bot.example.org:9999",
            "api.example.org:8443",
        ] {
            assert!(g.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8760",
            "localhost.evil.example",
            "api.example.org",
            "api.example.org:80",
            "10.0.0.6:8760",
            "127.0.0.1.nip.io",
        ] {
            assert!(!g.host_allowed(bad), "{bad}");
        }
        let any = guard_with(&[], &[], "0.0.0.0:8760");
        assert!(!any.host_allowed("0.0.0.0:8760"));
        assert!(any.host_allowed("127.0.0.1:8760"));
    }

    #[test]
    fn origins() {
        let g = guard_with(&[], &["https://dash.example.org"], "127.0.0.1:8760");
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
            "https://dash.example.org",
            "https://dash.example.org/",
        ] {
            assert!(g.origin_allowed(ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "https://dash.example.org:444",
            "file://localhost",
            "http://localhost.evil.example",
        ] {
            assert!(!g.origin_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn only_a_port_may_follow_an_ipv6_literal() {
        for ok in ["[::1]", "[::1]:8760", "localhost", "127.0.0.1:1"] {
            assert!(well_formed_host(ok).is_ok(), "{ok}");
        }
        for bad in [
            "[::1]evil.com",
            "[::1",
            "[::1]:",
            "[::1]:80x",
            "[::1].evil",
            "[::1]:80:80",
        ] {
            let error = well_formed_host(bad).unwrap_err();
            assert!(error.message.contains("followed only by `:port`"), "{bad}");
        }
    }

    #[test]
    fn bearer_scheme() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
