//! The native `fetch` tool (docs/design.md, "Tools"): GET an http(s) URL, HTML turned into
//! Markdown, paged by `start_index`/`max_length`, behind an SSRF guard.
//!
//! Owns the request loop: every hop's host is checked and resolved once through the
//! [`Resolver`], every answer must pass [`guard::refused_address`], and the connection is pinned
//! to the checked address (reqwest `resolve`, proxies off) so no second resolution can swap it
//! (DNS rebinding). Redirects are followed by hand so each hop is checked again. Must not follow
//! a redirect, use a proxy or resolve a name anywhere else.

pub mod guard;
mod robots;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mai_core::role::Role;
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
};
use reqwest::Url;
use reqwest::redirect::Policy;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

pub use guard::{Resolver, SystemResolver, refused_address, refused_name};

/// Limits of one fetch.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Refuse internal addresses (`[mcp] fetch_block_internal`).
    pub block_internal: bool,
    /// Exact addresses exempt from the guard (an operator's own service; tests).
    pub allow_addresses: Vec<IpAddr>,
    pub max_redirects: u8,
    /// Whole fetch, all hops together.
    pub timeout: Duration,
    /// Bytes of body read at most; the rest is not downloaded.
    pub max_body_bytes: usize,
    /// Characters returned when the call gives no `max_length`.
    pub default_max_length: usize,
    pub user_agent: String,
    /// Ask each site's robots.txt first (`[mcp] fetch_respect_robots`).
    pub respect_robots: bool,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            block_internal: true,
            allow_addresses: Vec::new(),
            max_redirects: 5,
            timeout: Duration::from_secs(30),
            max_body_bytes: 5 * 1024 * 1024,
            default_max_length: 5000,
            user_agent: concat!("mai-agent-fetch/", env!("CARGO_PKG_VERSION")).to_owned(),
            respect_robots: false,
        }
    }
}

/// Why a fetch did not produce a page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("invalid URL `{0}`")]
    InvalidUrl(String),
    #[error("only http and https URLs can be fetched, not `{0}`")]
    Scheme(String),
    #[error("refused: `{host}` is {reason} (internal addresses are blocked)")]
    Refused { host: String, reason: String },
    #[error("could not resolve `{host}`: {detail}")]
    Resolve { host: String, detail: String },
    #[error("more than {0} redirects")]
    TooManyRedirects(u8),
    #[error("timed out")]
    Timeout,
    #[error("request failed: {0}")]
    Http(String),
    #[error("not fetched: {0}; set [mcp] fetch_respect_robots = false to ignore robots.txt")]
    Robots(String),
    #[error("unsupported content type `{0}` (only text, HTML and JSON are returned)")]
    Binary(String),
}

/// A fetched page.
#[derive(Debug, Clone)]
pub struct Page {
    pub url: String,
    pub status: u16,
    pub content_type: String,
    /// Markdown for HTML, the text itself otherwise.
    pub content: String,
    /// True when the body was longer than `max_body_bytes`.
    pub body_truncated: bool,
}

/// Fetches URLs under [`FetchOptions`], resolving through a [`Resolver`].
#[derive(Clone)]
pub struct Fetcher {
    options: FetchOptions,
    resolver: Arc<dyn Resolver>,
    robots: Arc<robots::RobotsCache>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    pub fn new(options: FetchOptions, resolver: Arc<dyn Resolver>) -> Fetcher {
        Fetcher {
            options,
            resolver,
            robots: Arc::default(),
        }
    }

    /// GETs `url`, following at most `max_redirects` redirects, each hop checked.
    pub async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        let deadline = Instant::now() + self.options.timeout;
        tokio::time::timeout_at(deadline.into(), self.fetch_hops(url, deadline))
            .await
            .map_err(|_| FetchError::Timeout)?
    }

    async fn fetch_hops(&self, url: &str, deadline: Instant) -> Result<Page, FetchError> {
        let mut url = Url::parse(url).map_err(|_| FetchError::InvalidUrl(url.to_owned()))?;
        let mut redirects = 0u8;
        loop {
            if self.options.respect_robots {
                self.robots_allow(&url, deadline).await?;
            }
            let response = self.one_hop(&url, deadline).await?;
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok());
            if response.status().is_redirection()
                && let Some(location) = location
            {
                if redirects == self.options.max_redirects {
                    return Err(FetchError::TooManyRedirects(self.options.max_redirects));
                }
                redirects += 1;
                url = url
                    .join(location)
                    .map_err(|_| FetchError::InvalidUrl(location.to_owned()))?;
                continue;
            }
            return self.read_page(url, response).await;
        }
    }

    /// Refuses `url` when its site's robots.txt disallows it for our user agent. The robots.txt
    /// is fetched like any page (guarded, pinned, redirects re-checked) and cached per origin.
    async fn robots_allow(&self, url: &Url, deadline: Instant) -> Result<(), FetchError> {
        let Some((origin, robots_url)) = robots::robots_url(url) else {
            return Ok(());
        };
        let rules = match self.robots.get(&origin) {
            Some(rules) => rules,
            None => {
                let rules = Arc::new(self.fetch_robots(robots_url, deadline).await?);
                self.robots.put(origin, rules.clone());
                rules
            }
        };
        // Product token only: robots.txt groups name `mai-agent-fetch`, not its version.
        rules
            .check(url)
            .map_err(|why| FetchError::Robots(format!("{url}: {why}")))
    }

    async fn fetch_robots(
        &self,
        mut url: Url,
        deadline: Instant,
    ) -> Result<robots::Rules, FetchError> {
        let agent = self
            .options
            .user_agent
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        for _ in 0..=self.options.max_redirects {
            let mut response = match self.one_hop(&url, deadline).await {
                Ok(response) => response,
                // The guard's refusals stay refusals; anything else is "unreachable".
                Err(error @ (FetchError::Refused { .. } | FetchError::Timeout)) => {
                    return Err(error);
                }
                Err(error) => return Ok(robots::Rules::Unreachable(error.to_string())),
            };
            if response.status().is_redirection()
                && let Some(next) = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok())
            {
                url = next;
                continue;
            }
            let status = response.status().as_u16();
            let mut body = Vec::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                let room = robots::MAX_ROBOTS_BYTES.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() >= robots::MAX_ROBOTS_BYTES {
                    break;
                }
            }
            return Ok(robots::Rules::from_response(status, &body, &agent));
        }
        Ok(robots::Rules::Unreachable(
            "robots.txt redirects too often".into(),
        ))
    }

    /// Checks `url`'s host, resolves it once, checks every answer and sends the request to the
    /// first checked address only.
    async fn one_hop(&self, url: &Url, deadline: Instant) -> Result<reqwest::Response, FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::Scheme(url.scheme().to_owned()));
        }
        let port = url
            .port_or_known_default()
            .ok_or_else(|| FetchError::InvalidUrl(url.to_string()))?;
        let mut builder = reqwest::Client::builder()
            .redirect(Policy::none())
            // A proxy would resolve the name itself, after our check.
            .no_proxy()
            .user_agent(self.options.user_agent.clone())
            .timeout(deadline.saturating_duration_since(Instant::now()));
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(&ip.to_string(), IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.check(&ip.to_string(), IpAddr::V6(ip))?,
            Some(url::Host::Domain(name)) => {
                if self.options.block_internal
                    && let Some(reason) = refused_name(name)
                {
                    return Err(FetchError::Refused {
                        host: name.to_owned(),
                        reason: reason.to_owned(),
                    });
                }
                let answers =
                    self.resolver
                        .resolve(name, port)
                        .await
                        .map_err(|e| FetchError::Resolve {
                            host: name.to_owned(),
                            detail: e.to_string(),
                        })?;
                // Every answer must pass, not just the one we would use: a mixed answer is the
                // classic way to smuggle an internal address past a check of the first one.
                for answer in &answers {
                    self.check(name, answer.ip())?;
                }
                let first = answers.first().ok_or_else(|| FetchError::Resolve {
                    host: name.to_owned(),
                    detail: "no addresses".into(),
                })?;
                builder = builder.resolve(name, SocketAddr::new(first.ip(), port));
            }
            None => return Err(FetchError::InvalidUrl(url.to_string())),
        }
        let client = builder
            .build()
            .map_err(|e| FetchError::Http(e.to_string()))?;
        client.get(url.clone()).send().await.map_err(|e| {
            if e.is_timeout() {
                FetchError::Timeout
            } else {
                FetchError::Http(e.to_string())
            }
        })
    }

    fn check(&self, host: &str, ip: IpAddr) -> Result<(), FetchError> {
        if !self.options.block_internal || self.options.allow_addresses.contains(&ip) {
            return Ok(());
        }
        match refused_address(ip) {
            Some(reason) => Err(FetchError::Refused {
                host: if host == ip.to_string() {
                    host.to_owned()
                } else {
                    format!("{host} ({ip})")
                },
                reason: reason.to_owned(),
            }),
            None => Ok(()),
        }
    }

    async fn read_page(
        &self,
        url: Url,
        mut response: reqwest::Response,
    ) -> Result<Page, FetchError> {
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let textual = content_type.is_empty()
            || content_type.starts_with("text/")
            || content_type.contains("json")
            || content_type.contains("xml")
            || content_type.contains("javascript");
        if !textual {
            return Err(FetchError::Binary(content_type));
        }
        let mut body = Vec::new();
        let mut body_truncated = false;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| FetchError::Http(e.to_string()))?
        {
            let room = self.options.max_body_bytes - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                body_truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let content = if content_type.contains("html") || looks_like_html(&text) {
            htmd::convert(&text).unwrap_or(text)
        } else {
            text
        };
        Ok(Page {
            url: url.to_string(),
            status,
            content_type,
            content,
            body_truncated,
        })
    }
}

fn looks_like_html(text: &str) -> bool {
    let start = text
        .trim_start()
        .get(..15)
        .unwrap_or("")
        .to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

/// Arguments of the `fetch` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FetchArgs {
    /// The http or https URL to fetch.
    pub url: String,
    /// Characters of content to return (default 5000).
    #[serde(default)]
    pub max_length: Option<usize>,
    /// Character offset to start from, to read on where the previous call stopped.
    #[serde(default)]
    pub start_index: Option<usize>,
}

struct FetchTool(Fetcher);

impl TypedTool for FetchTool {
    type Args = FetchArgs;

    async fn call(&self, _ctx: &ToolContext, args: FetchArgs) -> Result<Value, ToolError> {
        let page = self.0.fetch(&args.url).await.map_err(ToolError::new)?;
        let max_length = args
            .max_length
            .unwrap_or(self.0.options.default_max_length)
            .max(1);
        Ok(page_result(
            &page,
            args.start_index.unwrap_or(0),
            max_length,
        ))
    }
}

/// The model's view of `page` from character `start` on, at most `max_length` characters.
pub fn page_result(page: &Page, start: usize, max_length: usize) -> Value {
    let total = page.content.chars().count();
    let content: String = page.content.chars().skip(start).take(max_length).collect();
    let end = start.saturating_add(content.chars().count());
    let mut out = json!({
        "success": (200..400).contains(&page.status),
        "url": page.url,
        "status": page.status,
        "content_type": page.content_type,
        "start_index": start,
        "total_length": total,
        "content": content,
    });
    if end < total {
        out["next_start_index"] = json!(end);
        out["note"] = json!(format!(
            "content truncated: call fetch again with start_index {end} to read on"
        ));
    }
    if page.body_truncated {
        out["body_truncated"] = json!(true);
    }
    if !(200..400).contains(&page.status) {
        out["error"] = json!(format!("HTTP status {}", page.status));
    }
    out
}

/// The tool's name.
pub const FETCH: &str = "fetch";

/// The `fetch` tool (discoverable, min_role user). Register it when `[mcp] fetch_enabled`.
pub fn fetch_tool(fetcher: Fetcher) -> Result<ToolDefinition, ToolDefinitionError> {
    ToolDefinition::typed(
        FETCH,
        "Fetch a web page (http/https) and return its content as Markdown text, paged with \
         start_index and max_length. Internal and local addresses are refused.",
        Visibility::Discoverable,
        Role::User,
        FetchTool(fetcher),
    )
    .map(|tool| tool.with_effects(Effect::FetchesWeb))
}
