//! robots.txt for the `fetch` tool (RFC 9309), on when `[mcp] fetch_respect_robots`: a model
//! fetching pages on its own is a crawler, so it asks each site first, as the reference MCP fetch
//! server does.
//!
//! Owns the per-origin decision and its cache. The robots.txt itself is fetched by the caller
//! through the same guarded path as any page (SSRF checks, pinned address), never here. Must not
//! block a fetch because a site has no robots.txt.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::Url;
use texting_robots::Robot;

/// How long a site's answer is reused.
const TTL: Duration = Duration::from_secs(600);
/// Origins remembered at most (the oldest is dropped first).
const MAX_ORIGINS: usize = 256;
/// Bytes of robots.txt read at most (RFC 9309 asks crawlers to parse at least 500 KiB).
pub const MAX_ROBOTS_BYTES: usize = 512 * 1024;

/// What a site's robots.txt says, as far as fetching is concerned.
pub enum Rules {
    /// No usable robots.txt (404 or another 4xx): everything is allowed.
    AllowAll,
    /// The server failed (5xx) or could not be reached: RFC 9309 says assume complete disallow.
    Unreachable(String),
    /// A parsed robots.txt.
    Parsed(Box<Robot>),
}

impl Rules {
    /// Builds the rules from the robots.txt response.
    pub fn from_response(status: u16, body: &[u8], agent: &str) -> Rules {
        match status {
            200..=299 => match Robot::new(agent, body) {
                Ok(robot) => Rules::Parsed(Box::new(robot)),
                // An unparsable file restricts nothing.
                Err(_) => Rules::AllowAll,
            },
            400..=499 => Rules::AllowAll,
            _ => Rules::Unreachable(format!("robots.txt answered HTTP {status}")),
        }
    }

    /// `Err` with the reason when `url` may not be fetched.
    pub fn check(&self, url: &Url) -> Result<(), String> {
        match self {
            Rules::AllowAll => Ok(()),
            Rules::Unreachable(why) => Err(format!(
                "{why}, so the site is treated as disallowing everything (RFC 9309)"
            )),
            Rules::Parsed(robot) if robot.allowed(url.as_str()) => Ok(()),
            Rules::Parsed(_) => Err("the site's robots.txt disallows this page".into()),
        }
    }
}

/// The origin a robots.txt covers (`scheme://host:port`) and its robots.txt URL.
pub fn robots_url(url: &Url) -> Option<(String, Url)> {
    let origin = format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str()?,
        url.port_or_known_default()?
    );
    let robots = url.join("/robots.txt").ok()?;
    Some((origin, robots))
}

/// Recent answers per origin.
#[derive(Default)]
pub struct RobotsCache {
    entries: Mutex<HashMap<String, (Instant, std::sync::Arc<Rules>)>>,
}

impl RobotsCache {
    pub fn get(&self, origin: &str) -> Option<std::sync::Arc<Rules>> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(origin)
            .filter(|(at, _)| at.elapsed() < TTL)
            .map(|(_, rules)| rules.clone())
    }

    pub fn put(&self, origin: String, rules: std::sync::Arc<Rules>) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_ORIGINS
            && !entries.contains_key(&origin)
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
        {
            entries.remove(&oldest);
        }
        entries.insert(origin, (Instant::now(), rules));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "mai-agent-fetch";

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn disallowed_paths_are_refused_and_others_allowed() {
        let body = b"User-agent: *\nDisallow: /private/\n\nUser-agent: mai-agent-fetch\nDisallow: /no-bots\n";
        let rules = Rules::from_response(200, body, AGENT);
        assert!(rules.check(&url("https://a.example/public")).is_ok());
        assert!(rules.check(&url("https://a.example/no-bots/x")).is_err());
        // A group for our agent replaces the `*` group.
        assert!(rules.check(&url("https://a.example/private/x")).is_ok());
    }

    #[test]
    fn missing_robots_allows_and_a_failing_server_disallows() {
        assert!(
            Rules::from_response(404, b"", AGENT)
                .check(&url("https://a.example/x"))
                .is_ok()
        );
        let error = Rules::from_response(503, b"", AGENT)
            .check(&url("https://a.example/x"))
            .unwrap_err();
        assert!(error.contains("503"), "{error}");
    }

    #[test]
    fn the_origin_includes_the_port() {
        let (origin, robots) = robots_url(&url("http://a.example:8080/x/y?q=1")).unwrap();
        assert_eq!(origin, "http://a.example:8080");
        assert_eq!(robots.as_str(), "http://a.example:8080/robots.txt");
    }
}
