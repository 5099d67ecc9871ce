//! A raw MCP client over streamable HTTP, so a test controls every byte of `_meta` (what a host
//! says about the conversation and the speaker).

use serde_json::{Value, json};

use super::Served;

pub struct Mcp<'a> {
    served: &'a Served,
    session: String,
    next: u64,
}

fn mcp_request(served: &Served, session: Option<&str>) -> reqwest::RequestBuilder {
    let mut request = served
        .post("/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request
}

/// The JSON-RPC message in a response body (SSE `data:` lines or plain JSON).
fn rpc_of(body: &str) -> Value {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
        .or_else(|| serde_json::from_str(body).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {body}"))
}

impl<'a> Mcp<'a> {
    pub async fn open(served: &'a Served) -> Mcp<'a> {
        let response = mcp_request(served, None)
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "security", "version": "1"}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        response.text().await.unwrap();
        let status = mcp_request(served, Some(&session))
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "{status}");
        Mcp {
            served,
            session,
            next: 1,
        }
    }

    pub async fn rpc(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let response = mcp_request(self.served, Some(&self.session))
            .json(&json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        rpc_of(&response.text().await.unwrap())
    }

    /// `tools/call`; the tool's JSON outcome and `isError`.
    pub async fn call(&mut self, name: &str, arguments: Value, meta: Value) -> (Value, bool) {
        let answer = self
            .rpc(
                "tools/call",
                json!({"name": name, "arguments": arguments, "_meta": meta}),
            )
            .await;
        let result = &answer["result"];
        assert!(result.is_object(), "{answer}");
        let text = result["content"][0]["text"].as_str().unwrap();
        (
            serde_json::from_str(text).unwrap(),
            result["isError"] == true,
        )
    }
}
