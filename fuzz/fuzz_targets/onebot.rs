//! OneBot v11 frames as the channel reads them from the implementation's WebSocket, and the
//! `send_msg` it writes. Arbitrary text must give a forwarded message, another known frame, or a
//! reason — never a panic; a forwarded message always names its sender and platform. Whatever a
//! person's text contains (`[CQ:at,qq=all]`, escapes, control characters), the action carries it
//! as one literal text segment: what is sent is exactly what was given (no CQ injection).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mai_core::host::ChatTarget;
use mai_host::fuzzing::{onebot_frame, onebot_send_msg};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match onebot_frame(&text) {
        Ok(Some(message)) => {
            assert_eq!(message.platform, "qq");
            assert!(
                !message.user_id.is_empty(),
                "a message without a sender: {message:?}"
            );
        }
        Ok(None) => {}
        Err(reason) => assert!(!reason.is_empty()),
    }
    for target in [
        ChatTarget::Group {
            group_id: "42".into(),
        },
        ChatTarget::Private {
            user_id: "7".into(),
        },
    ] {
        let action = onebot_send_msg(&target, &text);
        // Through the wire and back: one text segment holding exactly the input.
        let wire = action.to_string();
        let back: serde_json::Value = serde_json::from_str(&wire).expect("the action is JSON");
        let segments = back["params"]["message"]
            .as_array()
            .expect("message is a segment array");
        assert_eq!(segments.len(), 1);
        assert_eq!(segments[0]["type"], "text");
        assert_eq!(segments[0]["data"]["text"].as_str(), Some(text.as_ref()));
    }
});
