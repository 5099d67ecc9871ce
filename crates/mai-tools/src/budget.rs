//! Token budget of tool schemas: how many cl100k tokens the tools cost in every request, counted
//! on the exact shape an OpenAI-compatible request carries them in.
//!
//! Owns the one cl100k tokenizer of the process (loaded once, lazily). It must not guess silently:
//! if the tokenizer cannot load, counts fall back to a bytes/4 estimate and that is logged once.

use std::sync::OnceLock;

use mai_core::model::ToolSpec;
use serde::Serialize;
use tiktoken_rs::CoreBPE;

/// The request's `tools` array entry: `{"type":"function","function":{…}}`, fields in the order
/// clients send them.
#[derive(Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a mai_core::model::ToolSchema,
}

/// cl100k tokens of `tools` serialized as a request's `tools` array (compact JSON).
pub fn schema_tokens(tools: &[ToolSpec]) -> usize {
    let wire: Vec<WireTool<'_>> = tools
        .iter()
        .map(|tool| WireTool {
            r#type: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        })
        .collect();
    match serde_json::to_string(&wire) {
        Ok(json) => text_tokens(&json),
        // Serializing borrowed strings and JSON values cannot fail; count nothing rather than
        // invent a number if it ever does.
        Err(error) => {
            tracing::warn!(%error, "could not serialize tool schemas for counting");
            0
        }
    }
}

/// cl100k tokens of plain text.
pub fn text_tokens(text: &str) -> usize {
    match tokenizer() {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        None => text.len().div_ceil(4),
    }
}

fn tokenizer() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| match tiktoken_rs::cl100k_base() {
        Ok(bpe) => Some(bpe),
        Err(error) => {
            tracing::warn!(%error, "cl100k tokenizer unavailable; token counts are estimates");
            None
        }
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(name: &str, description: &str, parameters: serde_json::Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: parameters.into(),
        }
    }

    #[test]
    fn counts_known_text() {
        assert_eq!(text_tokens("hello world"), 2);
        assert_eq!(text_tokens(""), 0);
    }

    #[test]
    fn no_tools_cost_the_empty_array() {
        assert_eq!(schema_tokens(&[]), text_tokens("[]"));
    }

    #[test]
    fn counts_the_request_shape_in_compact_json() {
        let parameters = json!({"type": "object", "properties": {}});
        let tool = spec("get_frequency", "Talk frequency.", parameters.clone());
        let expected = format!(
            r#"[{{"type":"function","function":{{"name":"get_frequency","description":"Talk frequency.","parameters":{parameters}}}}}]"#
        );
        assert_eq!(schema_tokens(&[tool]), text_tokens(&expected));
    }

    #[test]
    fn more_tools_cost_more() {
        let one = spec("a", "first", json!({"type": "object"}));
        let two = spec("b", "second tool", json!({"type": "object"}));
        let both = schema_tokens(&[one.clone(), two.clone()]);
        assert!(both > schema_tokens(std::slice::from_ref(&one)));
        // One array around both: cheaper than two separate arrays.
        assert!(both < schema_tokens(&[one]) + schema_tokens(&[two]));
    }
}
