//! The `fetch` tool's SSRF guard end to end: a loopback HTTP server stands in for the web, and a
//! test resolver maps names to chosen addresses (mixed public/private answers, redirects from an
//! allowed name to a refused one).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mai_mcp::fetch::{FetchError, FetchOptions, Fetcher, Resolver, page_result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Answers from a fixed map; counts lookups so a test can prove a name was resolved once.
#[derive(Default)]
struct MapResolver {
    answers: HashMap<String, Vec<IpAddr>>,
    lookups: Mutex<Vec<String>>,
}

#[async_trait]
impl Resolver for MapResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        self.lookups.lock().unwrap().push(host.to_owned());
        self.answers
            .get(host)
            .map(|ips| ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host"))
    }
}

/// A loopback HTTP/1.1 server answering by path; records the request heads it saw.
struct Web {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn web(routes: Vec<(&'static str, String)>) -> Web {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let routes: HashMap<&'static str, String> = routes.into_iter().collect();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
            log.lock().unwrap().push(head);
            let response = routes.get(path.as_str()).cloned().unwrap_or_else(|| {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
            });
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    Web { port, seen }
}

fn html(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn redirect(to: &str) -> String {
    format!(
        "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn fetcher(resolver: MapResolver, allow_loopback: bool) -> (Fetcher, Arc<MapResolver>) {
    let resolver = Arc::new(resolver);
    let options = FetchOptions {
        allow_addresses: if allow_loopback {
            vec![LOOPBACK]
        } else {
            Vec::new()
        },
        ..FetchOptions::default()
    };
    (
        Fetcher::new(options, Arc::clone(&resolver) as Arc<dyn Resolver>),
        resolver,
    )
}

fn answers(pairs: &[(&str, &[&str])]) -> MapResolver {
    MapResolver {
        answers: pairs
            .iter()
            .map(|(name, ips)| {
                (
                    name.to_string(),
                    ips.iter().map(|ip| ip.parse().unwrap()).collect(),
                )
            })
            .collect(),
        lookups: Mutex::default(),
    }
}

#[tokio::test]
async fn local_servers_are_refused_without_connecting() {
    let web = web(vec![("/", html("<p>secret</p>"))]).await;
    let (fetcher, _) = fetcher(answers(&[]), false);
    for url in [
        format!("http://127.0.0.1:{}/", web.port),
        format!("http://localhost:{}/", web.port),
        format!("http://[::1]:{}/", web.port),
        format!("http://[::ffff:127.0.0.1]:{}/", web.port),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let error = fetcher.fetch(&url).await.unwrap_err();
        assert!(
            matches!(error, FetchError::Refused { .. }),
            "{url}: {error}"
        );
    }
    assert!(
        web.seen.lock().unwrap().is_empty(),
        "no request reached the server"
    );
}

#[tokio::test]
async fn a_dns_answer_mixing_public_and_private_addresses_is_refused() {
    let (fetcher, resolver) = fetcher(
        answers(&[("mixed.test", &["93.184.216.34", "10.0.0.1"])]),
        false,
    );
    let error = fetcher.fetch("http://mixed.test/").await.unwrap_err();
    assert!(error.to_string().contains("10.0.0.1"), "{error}");
    assert_eq!(*resolver.lookups.lock().unwrap(), ["mixed.test"]);
}

#[tokio::test]
async fn the_connection_goes_to_the_checked_address_and_html_becomes_markdown() {
    let web = web(vec![(
        "/page",
        html("<html><body><h1>Title</h1><p>Some <b>bold</b> text.</p></body></html>"),
    )])
    .await;
    let (fetcher, resolver) = fetcher(answers(&[("site.test", &["127.0.0.1"])]), true);
    let page = fetcher
        .fetch(&format!("http://site.test:{}/page", web.port))
        .await
        .unwrap();
    assert_eq!(page.status, 200);
    assert!(page.content.contains("# Title"), "{}", page.content);
    assert!(page.content.contains("**bold**"), "{}", page.content);
    // Resolved exactly once; the request carried the name (pinned connection, not a re-lookup).
    assert_eq!(*resolver.lookups.lock().unwrap(), ["site.test"]);
    let seen = web.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0]
            .to_ascii_lowercase()
            .contains(&format!("host: site.test:{}", web.port)),
        "{}",
        seen[0]
    );

    // Paging for the model.
    let first = page_result(&page, 0, 5);
    assert_eq!(first["content"].as_str().unwrap().chars().count(), 5);
    let next = first["next_start_index"].as_u64().unwrap() as usize;
    let second = page_result(&page, next, 10_000);
    assert!(second.get("next_start_index").is_none());
    assert_eq!(
        format!(
            "{}{}",
            first["content"].as_str().unwrap(),
            second["content"].as_str().unwrap()
        ),
        page.content
    );
}

#[tokio::test]
async fn a_redirect_from_an_allowed_name_to_a_refused_one_is_stopped() {
    let web = web(vec![
        ("/go", redirect("http://internal.test/admin")),
        ("/to-ip", redirect("http://10.1.2.3/")),
    ])
    .await;
    let (fetcher, resolver) = fetcher(
        answers(&[
            ("allowed.test", &["127.0.0.1"]),
            ("internal.test", &["192.168.0.10"]),
        ]),
        true,
    );
    let error = fetcher
        .fetch(&format!("http://allowed.test:{}/go", web.port))
        .await
        .unwrap_err();
    assert!(
        matches!(error, FetchError::Refused { ref host, .. } if host.contains("internal.test")),
        "{error}"
    );
    assert_eq!(
        *resolver.lookups.lock().unwrap(),
        ["allowed.test", "internal.test"]
    );

    let error = fetcher
        .fetch(&format!("http://allowed.test:{}/to-ip", web.port))
        .await
        .unwrap_err();
    assert!(matches!(error, FetchError::Refused { .. }), "{error}");
}

#[tokio::test]
async fn redirects_are_capped_and_schemes_limited() {
    let web = web(vec![("/loop", redirect("/loop"))]).await;
    let (fetcher, _) = fetcher(answers(&[("loop.test", &["127.0.0.1"])]), true);
    let error = fetcher
        .fetch(&format!("http://loop.test:{}/loop", web.port))
        .await
        .unwrap_err();
    assert_eq!(error, FetchError::TooManyRedirects(5));
    assert_eq!(web.seen.lock().unwrap().len(), 6);

    for url in ["file:///etc/passwd", "ftp://example.com/x", "gopher://x/"] {
        let error = fetcher.fetch(url).await.unwrap_err();
        assert!(matches!(error, FetchError::Scheme(_)), "{url}: {error}");
    }
}

#[tokio::test]
async fn the_fetch_tool_is_user_level_and_refusals_reach_the_model_as_results() {
    use mai_core::config::Config;
    use mai_core::ids::StreamId;
    use mai_core::role::Role;
    use mai_core::task::TaskId;
    use mai_core::tool::{FixedRole, OutcomeKind, ToolContext, ToolRegistry};

    let (fetcher, _) = fetcher(answers(&[]), false);
    let registry = ToolRegistry::new();
    registry.register(mai_mcp::fetch::fetch_tool(fetcher).unwrap());
    let ctx = |role| {
        ToolContext::new(
            TaskId::new(),
            "qq:1".parse().unwrap(),
            StreamId::new("s1").unwrap(),
            "qq",
            Arc::new(FixedRole(role)),
            tokio_util::sync::CancellationToken::new(),
            Arc::new(Config::default()),
        )
    };
    let args = serde_json::json!({"url": "http://127.0.0.1/"});
    let guest = registry
        .execute("fetch", Role::Guest, args.clone(), &ctx(Role::Guest))
        .await;
    assert_eq!(guest.kind, OutcomeKind::PermissionDenied);
    let user = registry
        .execute("fetch", Role::User, args, &ctx(Role::User))
        .await;
    assert_eq!(user.kind, OutcomeKind::Failed);
    assert_eq!(user.value["success"], false);
    assert!(
        user.value["error"].as_str().unwrap().contains("refused"),
        "{}",
        user.value
    );
}

fn plain(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn polite(resolver: MapResolver) -> Fetcher {
    let options = FetchOptions {
        allow_addresses: vec![LOOPBACK],
        respect_robots: true,
        ..FetchOptions::default()
    };
    Fetcher::new(options, Arc::new(resolver))
}

fn robots_requests(web: &Web) -> usize {
    web.seen
        .lock()
        .unwrap()
        .iter()
        .filter(|head| head.starts_with("GET /robots.txt"))
        .count()
}

#[tokio::test]
async fn robots_txt_is_asked_once_per_site_and_its_disallow_is_honoured() {
    let web = web(vec![
        (
            "/robots.txt",
            plain(
                "200 OK",
                "User-agent: *\nDisallow: /private/\n\nUser-agent: mai-agent-fetch\nDisallow: /no-agents\n",
            ),
        ),
        ("/open", html("<p>welcome</p>")),
        ("/no-agents/page", html("<p>hidden</p>")),
    ])
    .await;
    let fetcher = polite(answers(&[("site.test", &["127.0.0.1"])]));
    let base = format!("http://site.test:{}", web.port);
    let page = fetcher.fetch(&format!("{base}/open")).await.unwrap();
    assert!(page.content.contains("welcome"));
    let error = fetcher
        .fetch(&format!("{base}/no-agents/page"))
        .await
        .unwrap_err();
    assert!(matches!(error, FetchError::Robots(_)), "{error}");
    let message = error.to_string();
    assert!(message.contains("robots.txt disallows"), "{message}");
    assert!(
        message.contains("fetch_respect_robots = false"),
        "{message}"
    );
    // Cached per origin: one robots.txt request for both pages; the refused page never asked.
    assert_eq!(robots_requests(&web), 1);
    assert!(
        !web.seen
            .lock()
            .unwrap()
            .iter()
            .any(|head| head.starts_with("GET /no-agents"))
    );
}

#[tokio::test]
async fn a_site_without_robots_txt_is_fetched_and_a_failing_one_is_not() {
    let missing = web(vec![("/page", html("<p>fine</p>"))]).await;
    let failing = web(vec![
        ("/robots.txt", plain("503 Service Unavailable", "")),
        ("/page", html("<p>fine</p>")),
    ])
    .await;
    let fetcher = polite(answers(&[("site.test", &["127.0.0.1"])]));
    let page = fetcher
        .fetch(&format!("http://site.test:{}/page", missing.port))
        .await
        .unwrap();
    assert!(page.content.contains("fine"));
    let error = fetcher
        .fetch(&format!("http://site.test:{}/page", failing.port))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("503"), "{error}");
}

#[tokio::test]
async fn robots_txt_goes_through_the_same_guard() {
    // A public name whose robots.txt redirects to the metadata address: refused, not fetched.
    let web = web(vec![(
        "/robots.txt",
        redirect("http://169.254.169.254/robots.txt"),
    )])
    .await;
    let fetcher = polite(answers(&[("site.test", &["127.0.0.1"])]));
    let error = fetcher
        .fetch(&format!("http://site.test:{}/page", web.port))
        .await
        .unwrap_err();
    assert!(matches!(error, FetchError::Refused { .. }), "{error}");
}
