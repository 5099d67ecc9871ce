//! The OneBot v11 JSON shapes this channel reads and writes, and nothing else: classifying an
//! incoming frame (event or action response), turning a message event into an
//! [`IncomingMessage`] (marked `anonymous` when it comes from an anonymous group member), reading
//! CQ-code strings, and building the `send_msg` action.
//!
//! Pure functions over JSON; no I/O, no connection state. Every reader is lenient about what
//! implementations differ in (ids as numbers or strings, `message` as a segment array or a
//! CQ-code string, missing optional fields) and returns `None`/an error for what it cannot read,
//! never panics.

use chrono::{DateTime, Utc};
use mai_core::host::ChatTarget;
use mai_core::ids::ANONYMOUS_USER_ID;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::ingest::IncomingMessage;

/// One frame the implementation sent, as far as the channel cares.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame {
    /// A message someone else sent to a group or private chat the bot is in.
    Message(IncomingMessage),
    /// A message event the channel does not forward (the bot's own, or without readable text);
    /// the string says why, for the debug log.
    SkippedMessage(&'static str),
    /// `meta_event` heartbeat; `interval` in milliseconds when the implementation says it.
    Heartbeat { interval_ms: Option<u64> },
    /// `meta_event` lifecycle (`connect`, `enable`, `disable`).
    Lifecycle { sub_type: String },
    /// A notice, request, other meta event or unknown post type: logged at debug only.
    OtherEvent { post_type: String, detail: String },
    /// The answer to an action this channel sent.
    Response(ActionResponse),
}

/// Why a frame could not be read.
#[derive(Debug, PartialEq)]
pub(crate) enum FrameError {
    NotJson(String),
    /// JSON, but neither an event nor an action response.
    Unrecognized,
    /// A `message` event missing what every message has (`user_id`, a message body).
    BadMessage(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::NotJson(error) => write!(f, "not JSON: {error}"),
            FrameError::Unrecognized => f.write_str("neither an event nor an action response"),
            FrameError::BadMessage(why) => write!(f, "unreadable message event: {why}"),
        }
    }
}

/// `{"status","retcode","data","echo", "msg"?, "wording"?}` — the answer to an action.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ActionResponse {
    /// The `echo` the action carried, as a string (`None` when it was absent or not a string —
    /// this channel only sends string echoes, so such an answer is not ours).
    pub echo: Option<String>,
    pub status: String,
    pub retcode: i64,
    /// `wording`, else `msg`, else `message`: what the implementation said went wrong.
    pub reason: Option<String>,
}

impl ActionResponse {
    /// `ok` (retcode 0), or `async` (retcode 1: accepted and queued by the implementation,
    /// which is all v11 ever confirms for a queued send).
    pub(crate) fn succeeded(&self) -> bool {
        matches!(self.retcode, 0 | 1) && matches!(self.status.as_str(), "ok" | "async")
    }

    /// `OneBot retcode N: reason` for a failed action.
    pub(crate) fn failure(&self) -> String {
        let reason = self.reason.as_deref().unwrap_or(&self.status);
        format!("OneBot retcode {}: {reason}", self.retcode)
    }
}

/// Reads one text frame. `platform` is what the mapped messages carry.
pub(crate) fn parse_frame(text: &str, platform: &str) -> Result<Frame, FrameError> {
    let value: Value =
        serde_json::from_str(text).map_err(|error| FrameError::NotJson(error.to_string()))?;
    let Some(object) = value.as_object() else {
        return Err(FrameError::Unrecognized);
    };
    if let Some(post_type) = object.get("post_type").and_then(Value::as_str) {
        return parse_event(post_type, &value, platform);
    }
    if object.contains_key("retcode") || object.contains_key("status") {
        return Ok(Frame::Response(parse_response(object)));
    }
    Err(FrameError::Unrecognized)
}

fn parse_response(object: &Map<String, Value>) -> ActionResponse {
    let text = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .map(str::to_owned)
    };
    ActionResponse {
        echo: object
            .get("echo")
            .and_then(Value::as_str)
            .map(str::to_owned),
        status: text("status").unwrap_or_default(),
        // A response without a readable retcode cannot be confirmed: treat it as a failure.
        retcode: object.get("retcode").and_then(id_number).unwrap_or(-1),
        reason: text("wording")
            .or_else(|| text("msg"))
            .or_else(|| text("message")),
    }
}

fn parse_event(post_type: &str, event: &Value, platform: &str) -> Result<Frame, FrameError> {
    let field = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or_default();
    match post_type {
        "message" => parse_message(event, platform),
        // go-cqhttp/NapCat report the bot's own sends (from other clients) this way.
        "message_sent" => Ok(Frame::SkippedMessage(
            "the bot's own message (message_sent)",
        )),
        "meta_event" => match field("meta_event_type") {
            "heartbeat" => Ok(Frame::Heartbeat {
                interval_ms: event.get("interval").and_then(Value::as_u64),
            }),
            "lifecycle" => Ok(Frame::Lifecycle {
                sub_type: field("sub_type").to_owned(),
            }),
            other => Ok(Frame::OtherEvent {
                post_type: post_type.to_owned(),
                detail: other.to_owned(),
            }),
        },
        "notice" | "request" => {
            let kind = if post_type == "notice" {
                "notice_type"
            } else {
                "request_type"
            };
            Ok(Frame::OtherEvent {
                post_type: post_type.to_owned(),
                detail: field(kind).to_owned(),
            })
        }
        other => Ok(Frame::OtherEvent {
            post_type: other.to_owned(),
            detail: String::new(),
        }),
    }
}

/// The parts of a `message` event the channel reads.
#[derive(Deserialize)]
struct MessageEvent {
    #[serde(default)]
    message_type: String,
    #[serde(default)]
    time: Option<i64>,
    #[serde(default)]
    self_id: Option<Value>,
    #[serde(default)]
    user_id: Option<Value>,
    #[serde(default)]
    group_id: Option<Value>,
    /// Not in v11; NapCat and Lagrange add it.
    #[serde(default)]
    group_name: Option<String>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    raw_message: Option<String>,
    #[serde(default)]
    sender: Option<Sender>,
    #[serde(default)]
    sub_type: Option<String>,
    /// `{"id", "name", "flag"}` for a message from an anonymous group member, else absent/null.
    #[serde(default)]
    anonymous: Option<Value>,
    /// The implementation's id of the message (a number in v11; some send a string).
    #[serde(default)]
    message_id: Option<Value>,
}

#[derive(Deserialize, Default)]
struct Sender {
    #[serde(default)]
    user_id: Option<Value>,
    #[serde(default)]
    nickname: Option<String>,
    #[serde(default)]
    card: Option<String>,
}

fn parse_message(event: &Value, platform: &str) -> Result<Frame, FrameError> {
    let event = MessageEvent::deserialize(event)
        .map_err(|error| FrameError::BadMessage(error.to_string()))?;
    let sender = event.sender.unwrap_or_default();
    let user_id = event
        .user_id
        .as_ref()
        .or(sender.user_id.as_ref())
        .and_then(id_string)
        .ok_or_else(|| FrameError::BadMessage("no user_id".into()))?;
    if event.self_id.as_ref().and_then(id_string).as_deref() == Some(user_id.as_str()) {
        return Ok(Frame::SkippedMessage(
            "the bot's own message (user_id = self_id)",
        ));
    }
    let group_id =
        match event.message_type.as_str() {
            "group" => Some(event.group_id.as_ref().and_then(id_string).ok_or_else(|| {
                FrameError::BadMessage("a group message without group_id".into())
            })?),
            "private" => None,
            // Guild/channel messages (go-cqhttp, NapCat extensions) map to no v11 stream.
            _ => {
                return Ok(Frame::SkippedMessage(
                    "a message_type other than group or private",
                ));
            }
        };
    let text = match (&event.message, &event.raw_message) {
        (Some(Value::Array(segments)), _) => readable_segments(segments),
        (Some(Value::String(cq)), _) => readable_cq(cq),
        (_, Some(raw)) => readable_cq(raw),
        _ => return Err(FrameError::BadMessage("no message body".into())),
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(Frame::SkippedMessage("a message without readable content"));
    }
    // Any one of the three marks a message whose user id is shared by every anonymous member.
    let anonymous = event.anonymous.as_ref().is_some_and(Value::is_object)
        || event.sub_type.as_deref() == Some("anonymous")
        || user_id == ANONYMOUS_USER_ID;
    let anonymous_name = event
        .anonymous
        .as_ref()
        .and_then(|anonymous| anonymous.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let sender_name = [anonymous_name, sender.card, sender.nickname]
        .into_iter()
        .flatten()
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_default();
    let at = event
        .time
        .and_then(|seconds| DateTime::<Utc>::from_timestamp(seconds, 0))
        .unwrap_or_else(Utc::now);
    Ok(Frame::Message(IncomingMessage {
        platform: platform.to_owned(),
        stream_id: None,
        group_id,
        group_name: event
            .group_name
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty()),
        user_id,
        sender_name,
        text: text.to_owned(),
        at,
        anonymous,
        platform_message_id: event.message_id.as_ref().and_then(id_string),
    }))
}

/// An id as OneBot sends it: a number in v11, a string in some implementations.
fn id_string(value: &Value) -> Option<String> {
    match value {
        Value::Number(number) => Some(number.to_string()),
        Value::String(text) => Some(text.trim().to_owned()).filter(|text| !text.is_empty()),
        _ => None,
    }
}

/// A segment's data field as text, untrimmed (a text segment's spaces are content).
fn data_string(value: &Value) -> Option<String> {
    match value {
        Value::Number(number) => Some(number.to_string()),
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        _ => None,
    }
}

fn id_number(value: &Value) -> Option<i64> {
    match value {
        Value::Number(number) => number.as_i64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// The readable text of a segment array: text as is, other segments as placeholders.
fn readable_segments(segments: &[Value]) -> String {
    let mut text = Readable::default();
    for segment in segments {
        let kind = segment.get("type").and_then(Value::as_str).unwrap_or("");
        let data = segment.get("data").and_then(Value::as_object);
        text.push_segment(kind, |key| {
            data.and_then(|data| data.get(key)).and_then(data_string)
        });
    }
    text.text
}

/// The readable text of a CQ-code string (`hi [CQ:at,qq=1] &#91;x&#93;`).
fn readable_cq(message: &str) -> String {
    let mut text = Readable::default();
    let mut rest = message;
    while let Some(start) = rest.find("[CQ:") {
        text.push(&unescape_cq(&rest[..start]));
        let code = &rest[start + 4..];
        let Some(end) = code.find(']') else {
            // An unterminated code is not a code: keep it as text.
            text.push(&unescape_cq(&rest[start..]));
            return text.text;
        };
        let mut parts = code[..end].split(',');
        let kind = parts.next().unwrap_or_default().trim();
        let params: Vec<(&str, String)> = parts
            .filter_map(|part| part.split_once('='))
            .map(|(key, value)| (key.trim(), unescape_cq(value)))
            .collect();
        text.push_segment(kind, |key| {
            params
                .iter()
                .find(|(name, _)| *name == key)
                .map(|(_, value)| value.clone())
                .filter(|value| !value.is_empty())
        });
        rest = &code[end + 1..];
    }
    text.push(&unescape_cq(rest));
    text.text
}

/// Builds the readable text of a message segment by segment.
#[derive(Default)]
struct Readable {
    text: String,
    /// A mention or reply marker was just written: the next piece is separated by a space
    /// unless it starts with one (QQ clients put one after a mention themselves).
    separate: bool,
}

impl Readable {
    fn push(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        if std::mem::take(&mut self.separate) && !piece.starts_with(char::is_whitespace) {
            self.text.push(' ');
        }
        self.text.push_str(piece);
    }

    /// Appends one segment's readable form; `get` reads a data field as a string.
    fn push_segment(&mut self, kind: &str, get: impl Fn(&str) -> Option<String>) {
        match kind {
            "text" => self.push(&get("text").unwrap_or_default()),
            "markdown" => self.push(&get("content").unwrap_or_default()),
            "at" => {
                let qq = get("qq").unwrap_or_default();
                let who = if qq == "all" {
                    "全体成员".to_owned()
                } else {
                    get("name").unwrap_or(qq)
                };
                self.push(&format!("@{who}"));
                self.separate = true;
            }
            "reply" => {
                self.push("[reply]");
                self.separate = true;
            }
            "face" | "mface" | "bface" | "sface" => self.push("[face]"),
            "image" => self.push("[image]"),
            "record" => self.push("[voice]"),
            "video" => self.push("[video]"),
            "file" => match get("name").or_else(|| get("file")) {
                Some(name) => self.push(&format!("[file: {name}]")),
                None => self.push("[file]"),
            },
            "forward" | "node" => self.push("[forwarded messages]"),
            "share" => match get("title") {
                Some(title) => self.push(&format!("[link: {title}]")),
                None => self.push("[link]"),
            },
            "json" | "xml" | "ark" => self.push("[card]"),
            "location" => self.push("[location]"),
            "" => {}
            other => self.push(&format!("[{other}]")),
        }
    }
}

/// Undoes CQ-code escaping in one pass (so `&amp;#91;` becomes `&#91;`, not `[`).
fn unescape_cq(text: &str) -> String {
    const ESCAPES: [(&str, char); 4] = [
        ("&amp;", '&'),
        ("&#91;", '['),
        ("&#93;", ']'),
        ("&#44;", ','),
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        match ESCAPES.iter().find(|(escape, _)| rest.starts_with(escape)) {
            Some((escape, plain)) => {
                out.push(*plain);
                rest = &rest[escape.len()..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The `send_msg` action carrying `text` to `target`, tagged with `echo`. The text travels as
/// one `text` segment, so `[CQ:…]` in it stays literal text (no CQ injection).
pub(crate) fn send_msg(target: &ChatTarget, text: &str, echo: &str) -> Value {
    send_msg_mentioning(target, None, text, echo)
}

/// [`send_msg`] with, in a group, an `at` segment for `mention` (a QQ id) before the text — the
/// mention is built from the id, never parsed from text.
pub(crate) fn send_msg_mentioning(
    target: &ChatTarget,
    mention: Option<&str>,
    text: &str,
    echo: &str,
) -> Value {
    let mut params = Map::new();
    match target {
        ChatTarget::Group { group_id } => {
            params.insert("message_type".into(), json!("group"));
            params.insert("group_id".into(), id_value(group_id));
        }
        ChatTarget::Private { user_id } => {
            params.insert("message_type".into(), json!("private"));
            params.insert("user_id".into(), id_value(user_id));
        }
    }
    let message = match (target, mention) {
        (ChatTarget::Group { .. }, Some(user_id)) => json!([
            { "type": "at", "data": { "qq": user_id } },
            { "type": "text", "data": { "text": format!(" {text}") } },
        ]),
        _ => json!([{ "type": "text", "data": { "text": text } }]),
    };
    params.insert("message".into(), message);
    json!({ "action": "send_msg", "params": params, "echo": echo })
}

/// QQ ids are numbers in v11; an id that is not one (another platform's) goes as a string.
fn id_value(id: &str) -> Value {
    match id.parse::<i64>() {
        Ok(number) => json!(number),
        Err(_) => json!(id),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn message(frame: Value) -> IncomingMessage {
        match parse_frame(&frame.to_string(), "qq").unwrap() {
            Frame::Message(message) => message,
            other => panic!("not a message: {other:?}"),
        }
    }

    #[test]
    fn unescape_is_one_pass() {
        assert_eq!(
            unescape_cq("a&amp;#91;b&#91;c&#93;&#44;&x&"),
            "a&#91;b[c],&x&"
        );
    }

    #[test]
    fn cq_codes_become_placeholders() {
        assert_eq!(
            readable_cq(
                "[CQ:reply,id=5]hi [CQ:at,qq=42,name=Bo&#44;b] look[CQ:image,file=a.jpg]&#91;CQ:x&#93;"
            ),
            "[reply] hi @Bo,b look[image][CQ:x]"
        );
        assert_eq!(
            readable_cq("[CQ:at,qq=all]broken [CQ:face"),
            "@全体成员 broken [CQ:face"
        );
    }

    #[test]
    fn segments_become_text() {
        let segments = json!([
            {"type": "at", "data": {"qq": 10001}},
            {"type": "text", "data": {"text": " hello"}},
            {"type": "face", "data": {"id": "1"}},
            {"type": "file", "data": {"name": "a.pdf"}},
            {"type": "poke"},
            {"no": "type"}
        ]);
        let Value::Array(segments) = segments else {
            unreachable!()
        };
        assert_eq!(
            readable_segments(&segments),
            "@10001 hello[face][file: a.pdf][poke]"
        );
    }

    #[test]
    fn private_message_without_card_uses_nickname_and_string_ids() {
        let got = message(json!({
            "post_type": "message", "message_type": "private", "time": 1_700_000_000,
            "self_id": "1", "user_id": "2", "message": "hi",
            "sender": {"nickname": "Ann", "card": "  "}
        }));
        assert_eq!(got.group_id, None);
        assert_eq!(got.user_id, "2");
        assert_eq!(got.sender_name, "Ann");
        assert_eq!(got.at.timestamp(), 1_700_000_000);
    }

    #[test]
    fn raw_message_is_the_fallback_body() {
        let got = message(json!({
            "post_type": "message", "message_type": "group", "group_id": 7, "user_id": 2,
            "raw_message": "x &amp; y"
        }));
        assert_eq!(got.text, "x & y");
        assert_eq!(got.group_id.as_deref(), Some("7"));
    }

    #[test]
    fn an_anonymous_group_member_is_marked_anonymous() {
        let anonymous = message(json!({
            "post_type": "message", "message_type": "group", "sub_type": "anonymous",
            "group_id": 7, "user_id": 80_000_000, "message": "/mt create x",
            "anonymous": {"id": 2_333, "name": "Masked Cat", "flag": "f"},
            "sender": {"user_id": 80_000_000, "nickname": "", "card": ""}
        }));
        assert!(anonymous.anonymous);
        assert_eq!(anonymous.user_id, "80000000");
        assert_eq!(anonymous.sender_name, "Masked Cat");
        // Each sign alone is enough (implementations differ in which they send).
        for frame in [
            json!({"post_type": "message", "message_type": "group", "group_id": 7,
                   "user_id": 80_000_000, "message": "x"}),
            json!({"post_type": "message", "message_type": "group", "group_id": 7,
                   "sub_type": "anonymous", "user_id": 5, "message": "x"}),
            json!({"post_type": "message", "message_type": "group", "group_id": 7,
                   "anonymous": {"id": 1}, "user_id": 5, "message": "x"}),
        ] {
            assert!(message(frame).anonymous);
        }
        let named = message(json!({
            "post_type": "message", "message_type": "group", "sub_type": "normal",
            "group_id": 7, "user_id": 5, "message": "x", "anonymous": null
        }));
        assert!(!named.anonymous);
    }

    #[test]
    fn bad_frames_are_errors() {
        assert!(matches!(
            parse_frame("{", "qq"),
            Err(FrameError::NotJson(_))
        ));
        assert_eq!(parse_frame("[1]", "qq"), Err(FrameError::Unrecognized));
        assert_eq!(
            parse_frame("{\"a\":1}", "qq"),
            Err(FrameError::Unrecognized)
        );
        assert!(matches!(
            parse_frame(
                r#"{"post_type":"message","message_type":"group","user_id":1,"message":"x"}"#,
                "qq"
            ),
            Err(FrameError::BadMessage(_))
        ));
        assert!(matches!(
            parse_frame(
                r#"{"post_type":"message","message_type":"guild","user_id":1,"message":"x"}"#,
                "qq"
            ),
            Ok(Frame::SkippedMessage(_))
        ));
    }

    #[test]
    fn responses_say_why_they_failed() {
        let Ok(Frame::Response(response)) = parse_frame(
            r#"{"status":"failed","retcode":1200,"msg":"m","wording":"not in group","data":null,"echo":"e1"}"#,
            "qq",
        ) else {
            panic!("not a response")
        };
        assert_eq!(response.echo.as_deref(), Some("e1"));
        assert!(!response.succeeded());
        assert_eq!(response.failure(), "OneBot retcode 1200: not in group");
        let Ok(Frame::Response(ok)) = parse_frame(
            r#"{"status":"ok","retcode":0,"data":{"message_id":1},"echo":"e2"}"#,
            "qq",
        ) else {
            panic!("not a response")
        };
        assert!(ok.succeeded());
    }

    #[test]
    fn send_msg_uses_numbers_and_a_text_segment() {
        let action = send_msg(
            &ChatTarget::Group {
                group_id: "123".into(),
            },
            "[CQ:at,qq=all]",
            "e",
        );
        assert_eq!(
            action,
            json!({"action": "send_msg", "echo": "e", "params": {
                "message_type": "group", "group_id": 123,
                "message": [{"type": "text", "data": {"text": "[CQ:at,qq=all]"}}]
            }})
        );
        let private = send_msg(
            &ChatTarget::Private {
                user_id: "abc".into(),
            },
            "t",
            "e",
        );
        assert_eq!(private["params"]["user_id"], json!("abc"));
        assert_eq!(private["params"]["message_type"], json!("private"));
    }

    #[test]
    fn a_group_reply_mentions_the_person_it_answers_with_an_at_segment() {
        let group = ChatTarget::Group {
            group_id: "123".into(),
        };
        let action = send_msg_mentioning(&group, Some("10001"), "done", "e");
        assert_eq!(
            action["params"]["message"],
            json!([
                {"type": "at", "data": {"qq": "10001"}},
                {"type": "text", "data": {"text": " done"}}
            ])
        );
        let private = ChatTarget::Private {
            user_id: "10001".into(),
        };
        let action = send_msg_mentioning(&private, Some("10001"), "done", "e");
        assert_eq!(
            action["params"]["message"],
            json!([{"type": "text", "data": {"text": "done"}}])
        );
    }
}
