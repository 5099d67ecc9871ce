//! Argument checking before a handler runs: the arguments must be a JSON object that matches the
//! tool's schema. Messages name the field and say what was expected, because the reader is a
//! model that has to fix its next call.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

/// At most this many schema violations are reported in one message.
const MAX_REPORTED: usize = 4;

/// Returns the arguments as the handler will get them, or a message for the model.
///
/// `null` counts as `{}` (models send nothing for tools without parameters). A string is what a
/// provider leaves when the model's arguments were not valid JSON.
pub(crate) fn check_arguments(
    tool: &str,
    validator: &jsonschema::Validator,
    args: Value,
) -> Result<Value, String> {
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        Value::Object(_) => args,
        Value::String(raw) => {
            return Err(format!(
                "invalid arguments for `{tool}`: arguments must be a JSON object, got text that \
                 is not valid JSON: {}",
                preview(&raw)
            ));
        }
        other => {
            return Err(format!(
                "invalid arguments for `{tool}`: arguments must be a JSON object, got {}",
                json_type(&other)
            ));
        }
    };
    let problems: Vec<String> = validator
        .iter_errors(&args)
        .take(MAX_REPORTED)
        .map(|error| {
            describe(
                error.instance_path().as_str(),
                error.kind(),
                error.instance(),
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(args)
    } else {
        Err(format!(
            "invalid arguments for `{tool}`: {}",
            problems.join("; ")
        ))
    }
}

/// `/items/0/name` → `items[0].name`; the root is "arguments".
fn field_name(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&segment);
        }
    }
    out
}

fn describe(pointer: &str, kind: &ValidationErrorKind, instance: &Value) -> String {
    let field = field_name(pointer);
    let at = |name: &str| {
        if name.is_empty() {
            "arguments".to_owned()
        } else {
            format!("field `{name}`")
        }
    };
    match kind {
        ValidationErrorKind::Required { property } => {
            let property = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            let full = if field.is_empty() {
                property
            } else {
                format!("{field}.{property}")
            };
            format!("missing required field `{full}`")
        }
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => t.to_string(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            format!(
                "{}: expected {expected}, got {}",
                at(&field),
                json_type(instance)
            )
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let names = unexpected
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{}: unknown field(s) {names}", at(&field))
        }
        ValidationErrorKind::Enum { options } => {
            format!(
                "{}: must be one of {options}, got {}",
                at(&field),
                preview_value(instance)
            )
        }
        _ => format!(
            "{}: violates `{}` (value {})",
            at(&field),
            kind.keyword(),
            preview_value(instance)
        ),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn preview(text: &str) -> String {
    const MAX: usize = 80;
    if text.chars().count() <= MAX {
        format!("`{text}`")
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("`{head}…`")
    }
}

fn preview_value(value: &Value) -> String {
    preview(&value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validator() -> jsonschema::Validator {
        jsonschema::validator_for(&json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1},
                "mode": {"enum": ["search", "time"]},
                "items": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"]
                }}
            },
            "required": ["query"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    fn check(args: Value) -> Result<Value, String> {
        check_arguments("search", &validator(), args)
    }

    #[test]
    fn messages_name_the_field_and_the_expected_type() {
        assert_eq!(
            check(json!({})).unwrap_err(),
            "invalid arguments for `search`: missing required field `query`"
        );
        assert_eq!(
            check(json!({"query": "x", "limit": "5"})).unwrap_err(),
            "invalid arguments for `search`: field `limit`: expected integer, got string"
        );
        let err = check(json!({"query": "x", "mode": "fast"})).unwrap_err();
        assert!(err.contains("field `mode`: must be one of"), "{err}");
        let err = check(json!({"query": "x", "extra": 1})).unwrap_err();
        assert!(err.contains("unknown field(s) `extra`"), "{err}");
        let err = check(json!({"query": "x", "items": [{"name": 3}]})).unwrap_err();
        assert!(
            err.contains("field `items[0].name`: expected string, got integer"),
            "{err}"
        );
        let err = check(json!({"query": "x", "items": [{}]})).unwrap_err();
        assert!(
            err.contains("missing required field `items[0].name`"),
            "{err}"
        );
        let err = check(json!({"query": "x", "limit": 0})).unwrap_err();
        assert!(err.contains("field `limit`: violates `minimum`"), "{err}");
    }

    #[test]
    fn non_objects_are_refused_with_what_was_given() {
        assert!(
            check(json!([1]))
                .unwrap_err()
                .contains("must be a JSON object, got array")
        );
        assert!(check(json!(3)).unwrap_err().contains("got integer"));
        let err = check(json!("{\"query\": ")).unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        // null is an empty object, which then fails on the required field
        assert!(
            check(Value::Null)
                .unwrap_err()
                .contains("missing required field `query`")
        );
        assert_eq!(
            check(json!({"query": "ok"})).unwrap(),
            json!({"query": "ok"})
        );
    }
}
