//! The host context of a planner call: the conversation (and platform, person, group) the host's
//! planner is acting in — read from an MCP `tools/call` request's `_meta` or from the HTTP API's
//! `context` envelope — and how it reaches the planner tools: as the host-injected keys in the
//! arguments, the `chat_id` that stream isolation checks (`mai_engine::planner`; docs/design.md,
//! "The planner"). One place for both front doors, so a planner gets the same treatment over
//! either.
//!
//! Must not: let anything the model wrote in the arguments win over what the host sent in
//! `_meta`, or overwrite a parameter a tool's schema gives the model (`send_message`'s
//! `group_id`/`platform` choose its target there; they are not context).

use serde_json::{Map, Value};

/// The `_meta` keys a host may send with a `tools/call` (none of them in any tool's schema).
pub const HOST_CONTEXT_KEYS: [&str; 4] = ["chat_id", "platform", "user_id", "group_id"];

/// What the host said about the conversation a call is made from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostContext {
    /// The current stream (conversation); the `subagent_*` tools refuse any other `stream_id`.
    pub chat_id: Option<String>,
    pub platform: Option<String>,
    /// The person the planner is talking to: a created task's requester, whose reply in the
    /// stream answers its questions.
    pub user_id: Option<String>,
    pub group_id: Option<String>,
}

/// A host-context key whose value is neither a string nor a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{origin}.{key} must be a string or a number (the host's current {what}), got {got}; \
     send it as a string or leave it out"
)]
pub struct HostContextError {
    /// Where the context came from: `request _meta` (MCP) or `context` (HTTP).
    pub origin: &'static str,
    pub key: &'static str,
    pub what: &'static str,
    pub got: String,
}

impl HostContext {
    /// Reads the host context from a request's `_meta` map. Missing, `null` and blank values
    /// mean "not sent"; numbers are accepted because chat platforms' ids often are numbers
    /// (QQ group and user ids).
    pub fn from_meta(meta: &Map<String, Value>) -> Result<HostContext, HostContextError> {
        Self::read(meta, "request _meta")
    }

    /// Reads the HTTP API's `context` object, by the same rules as [`HostContext::from_meta`].
    pub fn from_context(context: &Map<String, Value>) -> Result<HostContext, HostContextError> {
        Self::read(context, "context")
    }

    fn read(
        meta: &Map<String, Value>,
        source: &'static str,
    ) -> Result<HostContext, HostContextError> {
        let read = |key: &'static str, what: &'static str| -> Result<_, HostContextError> {
            match meta.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => Ok(non_blank(text)),
                Some(Value::Number(number)) => Ok(Some(number.to_string())),
                Some(other) => Err(HostContextError {
                    origin: source,
                    key,
                    what,
                    got: json_kind(other).to_owned(),
                }),
            }
        };
        Ok(HostContext {
            chat_id: read("chat_id", "conversation (stream id)")?,
            platform: read("platform", "platform")?,
            user_id: read("user_id", "user id")?,
            group_id: read("group_id", "group id")?,
        })
    }

    /// Whether the host sent anything at all.
    pub fn is_empty(&self) -> bool {
        self == &HostContext::default()
    }

    /// Puts the context into a call's arguments the way the planner tools read it.
    ///
    /// `chat_id` always replaces whatever the model put there: it is in no schema, so only the
    /// host can mean it. `platform`, `group_id` and `user_id` are context under their own names
    /// for tools whose schema does not declare them (the `subagent_*` tools); where a schema
    /// declares them (`send_message`'s target) they are the model's own parameters and stay
    /// untouched, and the context goes in as `host_platform`, `host_group_id`, `host_user_id`.
    /// A context key the model wrote and the host did not send is removed: the speaker
    /// (`user_id`) decides a call's role, so only the host may name one.
    pub fn inject(&self, args: &mut Map<String, Value>, schema: &Value) {
        match &self.chat_id {
            Some(chat_id) => {
                args.insert("chat_id".into(), chat_id.clone().into());
            }
            None => {
                args.remove("chat_id");
            }
        }
        let context = [
            ("platform", &self.platform),
            ("group_id", &self.group_id),
            ("user_id", &self.user_id),
        ];
        for (key, value) in context {
            let key = mai_engine::host_context_key(key, schema);
            match value {
                Some(value) => args.insert(key, value.clone().into()),
                None => args.remove(&key),
            };
        }
    }
}

fn non_blank(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// "a string", "an object", …: what a JSON value is, for error messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn reads_strings_and_numbers_and_ignores_blanks() {
        let meta = object(json!({
            "chat_id": " s1 ", "platform": "qq", "user_id": 12345, "group_id": "",
            "progressToken": 7
        }));
        let host = HostContext::from_meta(&meta).unwrap();
        assert_eq!(host.chat_id.as_deref(), Some("s1"));
        assert_eq!(host.platform.as_deref(), Some("qq"));
        assert_eq!(host.user_id.as_deref(), Some("12345"));
        assert_eq!(host.group_id, None);
        assert!(HostContext::from_meta(&Map::new()).unwrap().is_empty());
    }

    #[test]
    fn a_malformed_value_is_a_clear_error() {
        let error = HostContext::from_meta(&object(json!({"chat_id": {"id": 1}}))).unwrap_err();
        assert_eq!(error.key, "chat_id");
        assert!(error.to_string().contains("_meta.chat_id must be a string"));
        assert!(error.to_string().contains("got an object"));
    }

    #[test]
    fn the_host_chat_id_wins_over_the_model() {
        let host = HostContext {
            chat_id: Some("a".into()),
            ..HostContext::default()
        };
        let mut args = object(json!({"stream_id": "b", "chat_id": "b"}));
        host.inject(
            &mut args,
            &json!({"type": "object", "properties": {"stream_id": {}}}),
        );
        assert_eq!(args["chat_id"], "a");
        assert_eq!(args["stream_id"], "b");
    }

    #[test]
    fn declared_parameters_are_the_models_not_context() {
        let host = HostContext {
            chat_id: Some("a".into()),
            platform: Some("qq".into()),
            user_id: Some("u1".into()),
            group_id: Some("g1".into()),
        };
        // send_message: group_id and platform pick the target.
        let send_schema = json!({"type": "object", "properties": {
            "text": {}, "group_id": {}, "user_id": {}, "platform": {}}});
        let mut args = object(json!({"text": "hi", "user_id": "u9"}));
        host.inject(&mut args, &send_schema);
        assert_eq!(
            Value::Object(args),
            json!({"text": "hi", "user_id": "u9", "chat_id": "a", "host_platform": "qq",
                   "host_user_id": "u1", "host_group_id": "g1"})
        );
        // subagent_create: they are context.
        let create_schema =
            json!({"type": "object", "properties": {"intent": {}, "stream_id": {}}});
        let mut args = object(json!({"intent": "x", "stream_id": "a", "platform": "forged"}));
        host.inject(&mut args, &create_schema);
        assert_eq!(args["platform"], "qq");
        assert_eq!(args["group_id"], "g1");
        assert_eq!(args["user_id"], "u1");
    }

    #[test]
    fn a_speaker_or_conversation_the_model_wrote_is_removed_when_the_host_sent_none() {
        let host = HostContext::default();
        let create_schema =
            json!({"type": "object", "properties": {"intent": {}, "stream_id": {}}});
        let mut args = object(json!({"intent": "x", "stream_id": "a", "user_id": "10001",
            "platform": "qq", "group_id": "9", "chat_id": "a"}));
        host.inject(&mut args, &create_schema);
        assert_eq!(
            Value::Object(args),
            json!({"intent": "x", "stream_id": "a"})
        );
        let send_schema = json!({"type": "object", "properties": {
            "text": {}, "group_id": {}, "user_id": {}, "platform": {}}});
        let mut args = object(json!({"text": "hi", "user_id": "u9", "host_user_id": "10001"}));
        host.inject(&mut args, &send_schema);
        assert_eq!(Value::Object(args), json!({"text": "hi", "user_id": "u9"}));
    }
}
