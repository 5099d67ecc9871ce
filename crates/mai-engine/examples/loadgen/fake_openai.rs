//! A fake OpenAI-compatible Chat Completions server on loopback that plays the script of
//! `echo`: an agent request (one with tools) gets an echo call until it holds `echo::ROUNDS`
//! tool results, then the answer; a request without tools (title, polish) gets "ok". Owns its
//! listener and counters; must read no more of a request than the answer needs, so the fake
//! costs the benchmark little CPU of its own.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::echo;

/// Requests served, by kind.
#[derive(Default)]
pub struct Served {
    /// Requests with tools (agent rounds).
    pub agent: AtomicUsize,
    /// Requests without tools (titles, polish).
    pub other: AtomicUsize,
}

/// Starts the server; returns its address and its request counters.
pub async fn start() -> (SocketAddr, Arc<Served>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(Served::default());
    let counters = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let counters = counters.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| completion(counters.clone(), request));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, served)
}

/// Only what the answer needs — the model name, whether tools were offered, how many tool
/// results the conversation holds — found by scanning the bytes, not parsing them: a remote
/// server's parsing is not the client's cost, and a parse here was an eighth of the benchmark's
/// CPU. Sound for JSON, where a bare `"` only ever delimits a string, so `"role":"tool"` cannot
/// occur inside one; the client writes compact JSON.
struct Asked<'a> {
    model: &'a str,
    tools: bool,
    tool_results: usize,
}

impl<'a> Asked<'a> {
    fn scan(body: &'a [u8]) -> Self {
        let model = memchr::memmem::find(body, b"\"model\":\"")
            .map(|at| &body[at + 9..])
            .and_then(|rest| Some(&rest[..memchr::memchr(b'"', rest)?]))
            .and_then(|name| std::str::from_utf8(name).ok())
            .unwrap_or("");
        Asked {
            model,
            tools: memchr::memmem::find(body, b"\"tools\":").is_some(),
            tool_results: memchr::memmem::find_iter(body, b"\"role\":\"tool\"").count(),
        }
    }
}

async fn completion(
    served: Arc<Served>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let asked = Asked::scan(&body);
    let model = asked.model;
    let (message, finish) = match asked.tools {
        true => {
            served.agent.fetch_add(1, Ordering::Relaxed);
            agent_turn(asked.tool_results)
        }
        false => {
            served.other.fetch_add(1, Ordering::Relaxed);
            (json!({"role": "assistant", "content": echo::PLAIN}), "stop")
        }
    };
    let answer = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    });
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&answer).unwrap())))
        .unwrap())
}

/// The assistant message and finish reason of an agent turn after `done` tool results.
fn agent_turn(done: usize) -> (Value, &'static str) {
    match echo::next_call(done) {
        Some(id) => (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": id, "type": "function",
                "function": {"name": echo::TOOL, "arguments": echo::arguments(done).to_string()}}]}),
            "tool_calls",
        ),
        None => (
            json!({"role": "assistant", "content": echo::ANSWER}),
            "stop",
        ),
    }
}
