//! Turns an MCP `tools/call` result into the JSON the model reads.
//!
//! Owns the shape `{"success": !isError, "text", "images", "resources", "resource_links",
//! "structured_content"}` and the size cap. Works on the JSON form of the result so every protocol
//! version's content blocks are handled alike (unknown block types are named, not dropped).
//! Binary payloads (image/audio data, blob resources) are never passed to the model: they cost
//! tokens and the model cannot read base64; their type and size are reported instead.

use serde_json::{Map, Value, json};

/// Default cap on the characters of text (text blocks, embedded text resources and structured
/// content together) handed to the model.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 20_000;

/// Shapes `result` (a serialized `CallToolResult`) for the model, keeping at most `max_chars`
/// characters of text and saying so when it cut.
pub fn shape_result(result: &Value, max_chars: usize) -> Value {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut budget = Budget::new(max_chars);
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let content = Content::shape(blocks, &mut budget);

    let mut out = Map::new();
    out.insert("success".into(), Value::Bool(!is_error));
    let text = content.texts.join("\n");
    // A failed call reads like every other tool failure: the message under "error".
    out.insert(
        if is_error { "error" } else { "text" }.into(),
        Value::String(text),
    );
    for (key, list) in [
        ("images", content.images),
        ("resources", content.resources),
        ("resource_links", content.links),
    ] {
        if !list.is_empty() {
            out.insert(key.into(), Value::Array(list));
        }
    }
    if let Some(structured) = result.get("structuredContent") {
        out.insert(
            "structured_content".into(),
            shape_structured(structured, &mut budget),
        );
    }
    if budget.cut > 0 {
        out.insert(
            "note".into(),
            Value::String(format!(
                "result truncated: {} characters were cut to stay within {max_chars}",
                budget.cut
            )),
        );
    }
    Value::Object(out)
}

/// A result's content blocks, sorted by kind and shaped for the model.
#[derive(Default)]
struct Content {
    texts: Vec<String>,
    images: Vec<Value>,
    resources: Vec<Value>,
    links: Vec<Value>,
}

impl Content {
    /// Text (within `budget`; unknown block types named), images and audio (type and size),
    /// embedded resources and resource links.
    fn shape(blocks: &[Value], budget: &mut Budget) -> Content {
        let mut content = Content::default();
        for block in blocks {
            let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
            match kind {
                "text" => {
                    let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                    content.texts.push(budget.take(text));
                }
                "image" | "audio" => content.images.push(json!({
                    "type": kind,
                    "mime_type": block.get("mimeType").cloned().unwrap_or(Value::Null),
                    "base64_chars": block.get("data").and_then(Value::as_str).map_or(0, str::len),
                })),
                "resource_link" => content
                    .links
                    .push(pick(block, &["uri", "name", "title", "mimeType"])),
                "resource" => content.resources.push(shape_resource(block, budget)),
                other => content
                    .texts
                    .push(format!("[unsupported content block of type `{other}`]")),
            }
        }
        content
    }
}

/// An embedded resource: its uri and type, and its text (within `budget`) or its blob's size.
fn shape_resource(block: &Value, budget: &mut Budget) -> Value {
    let inner = block.get("resource").cloned().unwrap_or(Value::Null);
    let mut shaped = pick(&inner, &["uri", "mimeType"]);
    if let (Some(text), Some(obj)) = (
        inner.get("text").and_then(Value::as_str),
        shaped.as_object_mut(),
    ) {
        obj.insert("text".into(), Value::String(budget.take(text)));
    } else if let (Some(blob), Some(obj)) = (
        inner.get("blob").and_then(Value::as_str),
        shaped.as_object_mut(),
    ) {
        obj.insert("base64_chars".into(), json!(blob.len()));
    }
    shaped
}

/// Structured content as it is when it fits what is left of `budget`; else its JSON text, cut.
fn shape_structured(structured: &Value, budget: &mut Budget) -> Value {
    let rendered = structured.to_string();
    if rendered.chars().count() <= budget.remaining {
        budget.remaining -= rendered.chars().count();
        structured.clone()
    } else {
        Value::String(budget.take(&rendered))
    }
}

fn pick(value: &Value, keys: &[&str]) -> Value {
    let mut out = Map::new();
    for key in keys {
        if let Some(v) = value.get(*key) {
            out.insert(snake(key), v.clone());
        }
    }
    Value::Object(out)
}

fn snake(key: &str) -> String {
    if key == "mimeType" {
        "mime_type".into()
    } else {
        key.into()
    }
}

/// Characters still allowed, and how many were cut so far.
struct Budget {
    remaining: usize,
    cut: usize,
}

impl Budget {
    fn new(max: usize) -> Self {
        Budget {
            remaining: max,
            cut: 0,
        }
    }

    fn take(&mut self, text: &str) -> String {
        let total = text.chars().count();
        if total <= self.remaining {
            self.remaining -= total;
            return text.to_owned();
        }
        let kept: String = text.chars().take(self.remaining).collect();
        self.cut += total - self.remaining;
        self.remaining = 0;
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_links_and_structured_content() {
        let result = json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///x", "name": "x"},
                {"type": "resource", "resource": {"uri": "file:///y", "text": "inside"}}
            ],
            "structuredContent": {"n": 1}
        });
        let shaped = shape_result(&result, 1000);
        assert_eq!(shaped["success"], true);
        assert_eq!(shaped["text"], "hello");
        assert_eq!(shaped["images"][0]["mime_type"], "image/png");
        assert_eq!(shaped["images"][0]["base64_chars"], 4);
        assert_eq!(shaped["resource_links"][0]["uri"], "file:///x");
        assert_eq!(shaped["resources"][0]["text"], "inside");
        assert_eq!(shaped["structured_content"]["n"], 1);
        assert!(shaped.get("note").is_none());
    }

    #[test]
    fn is_error_becomes_failure_with_error_text() {
        let shaped = shape_result(
            &json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
            100,
        );
        assert_eq!(shaped["success"], false);
        assert_eq!(shaped["error"], "boom");
    }

    #[test]
    fn long_text_is_truncated_with_a_note() {
        let long = "é".repeat(50);
        let shaped = shape_result(&json!({"content": [{"type": "text", "text": long}]}), 10);
        assert_eq!(shaped["text"].as_str().map(|s| s.chars().count()), Some(10));
        assert!(
            shaped["note"]
                .as_str()
                .is_some_and(|n| n.contains("40 characters"))
        );
    }
}
