//! send_text and channels, jargon, context notes, persona, frequency and plugin APIs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::{RecordingChannel, at, group_msg, host, host_with, private_msg};
use mai_core::host::{Delivery, Host, Jargon, MemoryMode, MemoryQuery, Persona};
use mai_core::ids::StreamId;
use mai_host::EmbeddedConfig;

fn sid(id: &str) -> StreamId {
    StreamId::new(id).unwrap()
}

on_both_backends! {
async fn send_text_without_a_channel_is_rejected_and_not_stored() {
    let t = host().await;
    t.host
        .ingest_message(&private_msg("1", "A", "hi", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap();
    let other = RecordingChannel::new(Delivery::Sent);
    t.host.register_channel("telegram", other.clone());
    let delivery = t.host.send_text(&sid("qq:1"), "hello").await.unwrap();
    assert_eq!(
        delivery,
        Delivery::Rejected("no channel connected for platform qq".into())
    );
    assert!(
        other.sent().is_empty(),
        "another platform's channel is not used"
    );
    assert_eq!(
        t.host
            .recent_messages(&sid("qq:1"), 10)
            .await
            .unwrap()
            .len(),
        1
    );

    let err = t.host.send_text(&sid("qq:404"), "hello").await.unwrap_err();
    assert!(err.to_string().contains("no such stream"), "{err}");
}

async fn send_text_through_a_channel_stores_the_bot_message() {
    let t = host_with(EmbeddedConfig {
        persona: Persona {
            bot_name: "麦麦".into(),
            ..Persona::default()
        },
        ..EmbeddedConfig::default()
    })
    .await;
    t.host
        .ingest_message(&group_msg("42", "1", "A", "hi", at(2024, 5, 1, 9, 0)))
        .await
        .unwrap();
    let channel = RecordingChannel::new(Delivery::Sent);
    t.host.register_channel("qq", channel.clone());
    let delivery = t.host.send_text(&sid("qq:group:42"), "你好").await.unwrap();
    assert_eq!(delivery, Delivery::Sent);
    assert_eq!(
        channel.sent(),
        [("qq:group:42".to_owned(), "你好".to_owned())]
    );
    let recent = t
        .host
        .recent_messages(&sid("qq:group:42"), 10)
        .await
        .unwrap();
    let last = recent.last().unwrap();
    assert_eq!((last.sender.as_str(), last.text.as_str()), ("麦麦", "你好"));
    assert_eq!(last.at, at(2024, 6, 1, 12, 0), "stamped by the host clock");

    let counted = t
        .host
        .search_memory(&MemoryQuery {
            query: "你好".into(),
            mode: MemoryMode::Aggregate,
            limit: 5,
            ..MemoryQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        counted["by_person"],
        serde_json::json!([{"name": "麦麦", "count": 1, "is_bot": true}])
    );

    // A channel that answers but does not deliver: nothing enters the history.
    let refusing = RecordingChannel::new(Delivery::Rejected("muted".into()));
    t.host.register_channel("qq", refusing.clone());
    let delivery = t
        .host
        .send_text(&sid("qq:group:42"), "again")
        .await
        .unwrap();
    assert_eq!(delivery, Delivery::Rejected("muted".into()));
    assert_eq!(refusing.sent().len(), 1);
    assert_eq!(
        t.host
            .recent_messages(&sid("qq:group:42"), 10)
            .await
            .unwrap()
            .len(),
        2
    );

    assert!(t.host.unregister_channel("qq"));
    assert!(matches!(
        t.host.send_text(&sid("qq:group:42"), "x").await.unwrap(),
        Delivery::Rejected(_)
    ));
}

async fn jargon_of_the_stream_and_global_terms_that_occur_in_the_text() {
    let t = host().await;
    let g42 = sid("qq:group:42");
    let g43 = sid("qq:group:43");
    t.host.add_jargon(None, "yyds", "永远的神").await.unwrap();
    t.host.add_jargon(None, "上分", "提升段位").await.unwrap();
    t.host
        .add_jargon(Some(&g42), "上分", "考试提分")
        .await
        .unwrap();
    t.host
        .add_jargon(Some(&g42), "摸鱼", "上班偷懒")
        .await
        .unwrap();

    let found = t.host.jargon(&g42, "今天摸鱼上分，YYDS").await.unwrap();
    let mut found: Vec<(String, String)> = found
        .into_iter()
        .map(|Jargon { term, meaning }| (term, meaning))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("yyds".to_owned(), "永远的神".to_owned()),
            ("上分".to_owned(), "考试提分".to_owned()),
            ("摸鱼".to_owned(), "上班偷懒".to_owned()),
        ],
        "the stream's meaning wins; matching ignores ASCII case"
    );
    let elsewhere = t.host.jargon(&g43, "摸鱼上分").await.unwrap();
    assert_eq!(
        elsewhere,
        [Jargon {
            term: "上分".into(),
            meaning: "提升段位".into()
        }]
    );
    assert!(
        t.host
            .jargon(&g42, "nothing here")
            .await
            .unwrap()
            .is_empty()
    );
    t.host.add_jargon(Some(&g42), "摸鱼", "划水").await.unwrap();
    assert_eq!(
        t.host.jargon(&g42, "摸鱼").await.unwrap()[0].meaning,
        "划水"
    );
}

async fn append_context_is_stored_per_stream_and_listed() {
    let t = host().await;
    let g42 = sid("qq:group:42");
    for note in [
        "task a waits for a reply",
        "task b finished",
        "task c started",
    ] {
        t.host.append_context(&g42, note).await.unwrap();
    }
    t.host
        .append_context(&sid("qq:9"), "elsewhere")
        .await
        .unwrap();
    let latest = t.host.context_notes(&g42, 2).await.unwrap();
    let notes: Vec<&str> = latest.iter().map(|n| n.note.as_str()).collect();
    assert_eq!(
        notes,
        ["task b finished", "task c started"],
        "latest, oldest first"
    );
    assert_eq!(latest[0].at, at(2024, 6, 1, 12, 0));
    assert_eq!(t.host.context_notes(&g42, 10).await.unwrap().len(), 3);
    assert!(
        t.host
            .context_notes(&sid("qq:8"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        t.host.recent_messages(&g42, 10).await.unwrap().is_empty(),
        "context notes are not messages"
    );
}

async fn persona_comes_from_the_config() {
    assert_eq!(host().await.host.persona().await, Persona::default());
    let persona = Persona {
        bot_name: "麦麦".into(),
        personality: "curious".into(),
        reply_style: "one line".into(),
    };
    let t = host_with(EmbeddedConfig {
        persona: persona.clone(),
        ..EmbeddedConfig::default()
    })
    .await;
    assert_eq!(t.host.persona().await, persona);
}

async fn talk_frequency_and_the_absent_plugin_apis() {
    let t = host().await;
    let g42 = sid("qq:group:42");
    assert_eq!(t.host.talk_frequency(&g42).await.unwrap(), None);
    t.host.set_frequency(&g42, 0.5).await.unwrap();
    assert_eq!(t.host.talk_frequency(&g42).await.unwrap(), Some(0.5));
    t.host.set_frequency(&g42, 1.25).await.unwrap();
    assert_eq!(t.host.talk_frequency(&g42).await.unwrap(), Some(1.25));
    assert!(t.host.set_frequency(&g42, -1.0).await.is_err());
    assert!(t.host.set_frequency(&g42, f64::NAN).await.is_err());
    assert!(t.host.list_apis().await.unwrap().is_empty());
    assert!(
        t.host
            .call_api("weather.today", serde_json::json!({}))
            .await
            .is_err()
    );
}
}
