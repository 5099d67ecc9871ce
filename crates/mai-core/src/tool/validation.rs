//! Argument checking before a handler runs: the arguments must be a JSON object that matches the
//! tool's schema. Messages name the field and say what was expected, because the reader is a
//! model that has to fix its next call.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

/// At most this many schema violations are reported in one message.
const MAX_REPORTED: usize = 4;

/// Largest accepted arguments of one tool call, as compact JSON. Above `[files]
/// max_write_bytes` (default 1 MiB) plus escaping, so `write` keeps its own, clearer limit; far
/// above anything a model writes on purpose (a whole reply is rarely over 100 KiB). What is
/// larger is a runaway or hostile reply, and refusing it before schema validation keeps the
/// cost of one call bounded.
pub const MAX_ARGUMENT_BYTES: usize = 2 * 1024 * 1024;

/// Deepest accepted nesting of arrays and objects in one tool call's arguments. Real tool
/// schemas are a few levels deep; validation and handlers recurse over the value, so a bound
/// far below any stack limit keeps hostile nesting (`[[[[…]]]]`) from costing more than an error.
/// (serde_json already refuses to parse text nested deeper than 128; this also covers values
/// built in-process, e.g. by an MCP bridge.)
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Returns the arguments as the handler will get them, or a message for the model.
///
/// `null` counts as `{}` (models send nothing for tools without parameters). A string is what a
/// provider leaves when the model's arguments were not valid JSON.
pub(crate) fn check_arguments(
    tool: &str,
    validator: &jsonschema::Validator,
    args: Value,
) -> Result<Value, String> {
    check_limits(tool, &args)?;
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        Value::Object(_) => args,
        Value::String(raw) => {
            // Say why it is not JSON (e.g. nested too deeply), not only that it is not.
            let reason = serde_json::from_str::<Value>(&raw)
                .err()
                .map_or_else(String::new, |e| format!(" ({e})"));
            return Err(format!(
                "invalid arguments for `{tool}`: arguments must be a JSON object, got text that \
                 is not valid JSON{reason}: {}",
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

/// Refuses arguments over [`MAX_ARGUMENT_BYTES`] or deeper than [`MAX_ARGUMENT_DEPTH`], before
/// any work proportional to their shape.
fn check_limits(tool: &str, args: &Value) -> Result<(), String> {
    if let Some(size) = oversized(args) {
        return Err(format!(
            "invalid arguments for `{tool}`: the arguments are {size} bytes of JSON; the limit \
             is {MAX_ARGUMENT_BYTES} bytes per call (split the work into smaller calls)"
        ));
    }
    if exceeds_depth(args, MAX_ARGUMENT_DEPTH) {
        return Err(format!(
            "invalid arguments for `{tool}`: the arguments are nested more than \
             {MAX_ARGUMENT_DEPTH} levels deep"
        ));
    }
    Ok(())
}

/// The serialized size of `value` if it is over [`MAX_ARGUMENT_BYTES`]; counting stops soon
/// after the limit, so a huge value costs no more than the limit.
fn oversized(value: &Value) -> Option<usize> {
    if let Value::String(raw) = value {
        return (raw.len() > MAX_ARGUMENT_BYTES).then_some(raw.len());
    }
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            if self.0 > MAX_ARGUMENT_BYTES {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => None,
        Err(_) => Some(counter.0),
    }
}

/// Whether `value` has more than `max` arrays/objects nested in each other (`1` and `{}` have
/// 0 and 1, `{"a": [1]}` has 2). Iterative, so the check itself cannot overflow the stack.
pub(crate) fn exceeds_depth(value: &Value, max: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if above + 1 > max {
            return true;
        }
        stack.extend(children.map(|child| (child, above + 1)));
    }
    false
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
    // Field names come from the model's arguments and may be huge: every name in a message is
    // cut to a preview, so a refusal stays short whatever was sent.
    let field = shorten(&field_name(pointer));
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
            let property = shorten(&property);
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
            const MAX_NAMES: usize = 5;
            let mut names = unexpected
                .iter()
                .take(MAX_NAMES)
                .map(|n| format!("`{}`", shorten(n)))
                .collect::<Vec<_>>()
                .join(", ");
            if unexpected.len() > MAX_NAMES {
                names.push_str(&format!(" and {} more", unexpected.len() - MAX_NAMES));
            }
            format!("{}: unknown field(s) {names}", at(&field))
        }
        ValidationErrorKind::Enum { options } => {
            format!(
                "{}: must be one of {}, got {}",
                at(&field),
                shorten(&options.to_string()),
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
    format!("`{}`", cut(text, 80))
}

/// A name or path from the arguments, cut so that a message stays readable.
fn shorten(text: &str) -> String {
    cut(text, 120)
}

fn cut(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
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

    #[test]
    fn oversized_and_deep_arguments_are_refused_with_the_limit() {
        let big = "x".repeat(MAX_ARGUMENT_BYTES + 1);
        let err = check(json!({"query": big})).unwrap_err();
        assert!(err.contains("bytes per call"), "{err}");
        assert!(err.len() < 300, "{err}");
        let err = check(Value::String(big)).unwrap_err();
        assert!(err.contains("bytes per call"), "{err}");

        let mut deep = json!("leaf");
        // The root object is one level and `items` holds 63 arrays: 64 in all, the limit.
        for _ in 0..MAX_ARGUMENT_DEPTH - 1 {
            deep = json!([deep]);
        }
        // Exactly at the limit: only the schema decides (`items` is not an array of objects).
        let at_limit = json!({"query": "x", "items": deep});
        assert!(!check(at_limit.clone()).unwrap_err().contains("nested"));
        let over = json!({"query": "x", "items": [deep]});
        let err = check(over).unwrap_err();
        assert!(err.contains("nested more than 64 levels"), "{err}");
        assert!(!exceeds_depth(&json!({"a": [1, {"b": 2}]}), 3));
        assert!(exceeds_depth(&json!({"a": [1, {"b": 2}]}), 2));
        assert!(!exceeds_depth(&json!("scalar"), 0));
        assert!(exceeds_depth(&json!({}), 0));
    }

    #[test]
    fn text_nested_too_deeply_says_why_it_is_not_json() {
        let raw = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let err = check(Value::String(raw)).unwrap_err();
        assert!(err.contains("recursion limit exceeded"), "{err}");
        assert!(err.len() < 400, "{err}");
    }

    #[test]
    fn huge_field_names_are_cut_in_messages() {
        let name = "k".repeat(10_000);
        let mut args = serde_json::Map::new();
        args.insert("query".into(), json!("x"));
        for i in 0..50 {
            args.insert(format!("{name}{i}"), json!(1));
        }
        let err = check(Value::Object(args)).unwrap_err();
        assert!(err.contains("unknown field(s)"), "{err}");
        assert!(err.contains("and 45 more"), "{err}");
        assert!(err.chars().count() < 1_000, "{} chars", err.chars().count());
    }
}
