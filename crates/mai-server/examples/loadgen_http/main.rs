//! Load generator for the HTTP API and the MCP server (BENCHMARKS.md, "front doors under load").
//!
//! `cargo run --release -p mai-server --example loadgen_http -- [requests] [concurrency]`
//! (default 10 000 requests, concurrency 64; `--by-kind` adds latency per kind of request). Starts the real router with the MCP router nested
//! at `/mcp` over a real engine (SQLite file), the embedded host and a model that answers at
//! once, on 127.0.0.1:0, and sends the mix of `mix.rs`: one request in five malformed (bad JSON,
//! wrong types, unknown fields, bodies over the limit, unknown ids, a foreign Host, no token,
//! JSON nested 10 000 deep, 10 000 keys, bad planner arguments, unknown MCP sessions and tools)
//! among valid ones (task list/get/history/create, planner tools, board, messages and chat
//! commands, MCP `tools/list` and `tools/call` in a session per worker). Prints statuses and
//! latencies; exits 1 when any answer was a 5xx, a request got no answer, or an answer was not
//! of the expected class (2xx for valid, 4xx for malformed).

mod mix;

use std::process::ExitCode;

fn arg(n: usize, default: usize) -> Result<usize, String> {
    match std::env::args().filter(|a| !a.starts_with("--")).nth(n) {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| format!("argument {n} must be a whole number, got `{text}`")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("loadgen_http: {error}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool, mix::BoxError> {
    let requests = arg(1, 10_000)?;
    let concurrency = arg(2, 64)?.max(1);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{cores} cores, load {}; {requests} requests at concurrency {concurrency}, \
         20 % malformed",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let target = mix::Target::start().await?;
    let report = mix::run(&target, requests, concurrency).await?;
    report.print();
    if std::env::args().any(|a| a == "--by-kind") {
        report.print_by_kind();
    }
    let wrong: usize = report.unexpected.values().sum();
    let ok = report.server_errors() == 0 && report.transport_errors == 0 && wrong == 0;
    if !ok {
        println!("FAIL: every answer must be 2xx (valid) or 4xx (malformed), never 5xx");
    }
    Ok(ok)
}
