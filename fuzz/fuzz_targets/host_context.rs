//! The host context of a planner call, as both front doors read it: an MCP request's `_meta` and
//! the HTTP API's `context` envelope (`mai_server::host_context`). Arbitrary JSON must give a
//! context or an error naming the key — never a panic. Injected into a call's arguments, the
//! identity keys (`chat_id`, `user_id`, …) are the host's or absent — never the model's — and a
//! parameter the tool's schema declares (`send_message`'s `group_id`) is never overwritten (the
//! host's value goes in as `host_group_id`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mai_server::host_context::{HOST_CONTEXT_KEYS, HostContext};
use serde_json::{Map, Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    for read in [HostContext::from_meta, HostContext::from_context] {
        let context = match read(&map) {
            Ok(context) => context,
            Err(error) => {
                assert!(HOST_CONTEXT_KEYS.contains(&error.key));
                assert!(error.to_string().contains(error.key));
                continue;
            }
        };
        let schema = json!({"properties": {"group_id": {}, "text": {}}});
        let mut args: Map<String, Value> = match json!({"chat_id": "model-chat", "group_id": "model-group",
            "user_id": "model-user", "host_group_id": "model-host-group", "text": "hi"})
        {
            Value::Object(args) => args,
            _ => unreachable!(),
        };
        context.inject(&mut args, &schema);
        // Identity keys are the host's or absent, never the model's.
        let str_of = |key: &str| args.get(key).and_then(Value::as_str);
        assert_eq!(str_of("chat_id"), context.chat_id.as_deref());
        assert_eq!(str_of("user_id"), context.user_id.as_deref());
        assert_eq!(str_of("host_group_id"), context.group_id.as_deref());
        // A parameter the schema declares stays the model's.
        assert_eq!(args["group_id"], "model-group");
        assert_eq!(args["text"], "hi");
    }
});
