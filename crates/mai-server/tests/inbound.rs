//! The inbound pipeline: commands answered raw through the channel, the facade refusing a
//! guest, and replies waking exactly the right waiting task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Service, ask, message};
use mai_core::ids::{PersonId, StreamId};
use mai_core::model::ChatResponse;
use mai_core::role::Role;
use mai_core::store::TaskFilter;
use mai_core::task::TaskStatus;
use mai_engine::TaskEvent;
use mai_engine::{Caller, CreateTask};
use mai_llm::ScriptedModel;
use mai_server::{Inbound, InboundError, deliver};

fn admin() -> Caller {
    Caller::person(
        PersonId::new("qq", "admin").unwrap(),
        Role::Admin,
        StreamId::new("qq:admin").unwrap(),
        None,
    )
}

fn user_in_group(user: &str, group: &str) -> Caller {
    Caller::person(
        PersonId::new("qq", user).unwrap(),
        Role::User,
        StreamId::new(format!("qq:group:{group}")).unwrap(),
        Some(group.into()),
    )
}

#[tokio::test]
async fn a_users_command_is_answered_raw_in_its_stream() {
    let mut service = Service::start(ScriptedModel::default()).await;
    let outcome = service.say("user", None, "/mt list").await;
    let Inbound::Command {
        stream_id,
        reply,
        delivered,
    } = outcome
    else {
        panic!("expected a command, got {outcome:?}");
    };
    assert_eq!(stream_id.as_str(), "qq:user");
    assert_eq!(reply, "no tasks");
    assert!(delivered);
    // Raw: exactly the command's reply, no model involved.
    assert_eq!(
        service.next_sent().await,
        ("qq:user".to_owned(), "no tasks".to_owned())
    );
    assert!(service.model.requests().is_empty());
    // The message itself was stored in the host.
    let lines = mai_core::host::Host::recent_messages(&*service.state.host, &stream_id, 10)
        .await
        .unwrap();
    assert!(lines.iter().any(|l| l.text == "/mt list"), "{lines:?}");
}

#[tokio::test]
async fn a_guest_is_refused_by_the_facade() {
    let mut service = Service::start(ScriptedModel::default()).await;
    let outcome = service
        .say("stranger", Some("7"), "/maitask create buy milk")
        .await;
    let Inbound::Command { reply, .. } = outcome else {
        panic!("expected a command, got {outcome:?}");
    };
    assert!(reply.contains("guests cannot create tasks"), "{reply}");
    assert_eq!(service.next_sent().await.1, reply);
    let tasks = service
        .state
        .engine
        .list(&admin(), TaskFilter::default())
        .await
        .unwrap();
    assert!(tasks.is_empty(), "{tasks:?}");
}

#[tokio::test]
async fn a_reply_wakes_exactly_one_waiting_task_and_others_wake_nothing() {
    let model = ScriptedModel::from_responses([
        ask("which colour?"),
        ask("which size?"),
        ChatResponse::text("ordered"),
    ]);
    let mut service = Service::start(model).await;
    // The stream must exist for questions to be delivered.
    service.say("user", Some("42"), "hello").await;
    let engine = service.state.engine.clone();
    let caller = user_in_group("user", "42");
    let mut ids = Vec::new();
    for title in ["first", "second"] {
        let request = CreateTask {
            title: Some(title.into()),
            ..CreateTask::agent(format!("{title} task"))
        };
        ids.push(engine.create(&caller, request).await.unwrap().id);
        // One at a time, so "oldest waiting" is well defined.
        let id = *ids.last().unwrap();
        service
            .wait_for(
                "question",
                |e| matches!(e, TaskEvent::Question { task_id, .. } if *task_id == id),
            )
            .await;
    }
    // Another person in the same group, and the same person elsewhere: nothing wakes.
    let other = service.say("other", Some("42"), "red").await;
    assert!(matches!(other, Inbound::Stored { .. }), "{other:?}");
    let elsewhere = service.say("user", None, "red").await;
    assert!(matches!(elsewhere, Inbound::Stored { .. }), "{elsewhere:?}");
    for id in &ids {
        let task = engine.get(&admin(), *id).await.unwrap();
        assert_eq!(task.status, TaskStatus::WaitingInput);
    }
    // The owner in the stream: the oldest waiting task wakes, and only it.
    let answer = service.say("user", Some("42"), "red").await;
    let Inbound::Answered { task_id, stream_id } = answer else {
        panic!("expected an answer, got {answer:?}");
    };
    assert_eq!(task_id, ids[0]);
    assert_eq!(stream_id.as_str(), "qq:group:42");
    service.wait_status(ids[0], TaskStatus::Completed).await;
    let second = engine.get(&admin(), ids[1]).await.unwrap();
    assert_eq!(second.status, TaskStatus::WaitingInput);
}

#[tokio::test]
async fn malformed_senders_are_refused_before_anything_is_stored() {
    let service = Service::start(ScriptedModel::default()).await;
    for (user, group, text, why) in [
        ("a:b", None, "hi", "user_id"),
        ("user", Some("4:2"), "hi", "group_id"),
        ("user", None, "   ", "text is empty"),
    ] {
        let error = deliver(&service.state, message(user, group, text))
            .await
            .unwrap_err();
        assert!(matches!(error, InboundError::Invalid(_)), "{error:?}");
        assert!(error.to_string().contains(why), "{error}");
    }
}

/// QQ's one user id for every anonymous group member.
const ANONYMOUS: &str = "80000000";

fn anonymous(group: &str, text: &str) -> mai_host::IncomingMessage {
    mai_host::IncomingMessage {
        anonymous: true,
        ..message(ANONYMOUS, Some(group), text)
    }
}

/// A service where the anonymous id is (wrongly) listed as an admin and everyone in group 7 may
/// create tasks: being anonymous must win over both.
async fn with_anonymous_listed_as_admin(model: ScriptedModel) -> Service {
    let mut config = common::test_config();
    config.permission.admins.push(format!("qq:{ANONYMOUS}"));
    config.permission.user_groups.push("qq:group:7".into());
    Service::start_with(
        model,
        common::ServiceOptions {
            config,
            ..common::ServiceOptions::default()
        },
    )
    .await
}

#[tokio::test]
async fn an_anonymous_member_never_answers_a_waiting_task() {
    let model = ScriptedModel::from_responses([ask("which colour?"), ask("which size?")]);
    let mut service = with_anonymous_listed_as_admin(model).await;
    service.say("user", Some("42"), "hello").await;
    let engine = service.state.engine.clone();
    // One task for the person whose id anonymous members share, one for a named person.
    let mut ids = Vec::new();
    for (who, role) in [(ANONYMOUS, Role::Admin), ("user", Role::User)] {
        let caller = Caller {
            role,
            ..user_in_group(who, "42")
        };
        // A title, so the model is not asked for one.
        let request = CreateTask {
            title: Some(format!("for {who}")),
            ..CreateTask::agent(format!("a task for {who}"))
        };
        let id = engine.create(&caller, request).await.unwrap().id;
        service
            .wait_for(
                "question",
                |e| matches!(e, TaskEvent::Question { task_id, .. } if *task_id == id),
            )
            .await;
        ids.push(id);
    }
    let outcome = deliver(&service.state, anonymous("42", "red"))
        .await
        .unwrap();
    assert!(matches!(outcome, Inbound::Stored { .. }), "{outcome:?}");
    for id in &ids {
        let task = engine.get(&admin(), *id).await.unwrap();
        assert_eq!(task.status, TaskStatus::WaitingInput, "{id}");
    }
    // Still stored, so memory and the planner see what was said.
    let lines =
        mai_core::host::Host::recent_messages(&*service.state.host, outcome.stream_id(), 10)
            .await
            .unwrap();
    assert!(lines.iter().any(|l| l.text == "red"), "{lines:?}");
}

#[tokio::test]
async fn an_anonymous_members_task_command_is_refused_and_creates_nothing() {
    let mut service = with_anonymous_listed_as_admin(ScriptedModel::default()).await;
    for text in [
        "/mt create x",
        "/MaiTask list -all",
        "  /mt cancel deadbeef",
    ] {
        let outcome = deliver(&service.state, anonymous("7", text)).await.unwrap();
        let Inbound::Command {
            stream_id,
            reply,
            delivered,
        } = outcome
        else {
            panic!("expected a refused command, got {outcome:?}");
        };
        assert_eq!(stream_id.as_str(), "qq:group:7");
        assert!(
            reply.contains("anonymous members cannot use task commands"),
            "{text}: {reply}"
        );
        assert!(delivered);
        // Raw, in the group, and nothing else.
        assert_eq!(service.next_sent().await, ("qq:group:7".to_owned(), reply));
    }
    let tasks = service
        .state
        .engine
        .list(&admin(), TaskFilter::default())
        .await
        .unwrap();
    assert!(tasks.is_empty(), "{tasks:?}");
    assert!(service.model.requests().is_empty());
}
