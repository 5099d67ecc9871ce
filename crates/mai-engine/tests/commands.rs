//! Chat commands (`/maitask`, `/mt`): parsing, the role checks of docs/design.md
//! ("Roles and the permission model") through the facade, 8-character id prefixes, `ask` waking a
//! waiting task, and `list -all` for admins only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use mai_core::ids::{Owner, StreamId};
use mai_core::model::{ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::task::{TaskId, TaskRecord, TaskStatus, Trigger};
use mai_engine::handle_command;
use mai_engine::{Caller, CreateTask, Door};
use serde_json::json;

fn config() -> mai_core::config::Config {
    let mut config = test_config();
    config.permission.users.push("qq:carol".into());
    config
}

async fn harness() -> Harness {
    Harness::start(config(), RuleModel::new(|_| Ok(ChatResponse::text("done")))).await
}

fn user() -> Caller {
    caller("user", Role::User, "s")
}
fn carol() -> Caller {
    caller("carol", Role::User, "s")
}
fn guest() -> Caller {
    caller("stranger", Role::Guest, "s")
}
fn admin() -> Caller {
    caller("admin", Role::Admin, "s")
}

async fn reply(harness: &Harness, caller: &Caller, text: &str) -> String {
    handle_command(&harness.engine, caller, text)
        .await
        .unwrap_or_else(|| panic!("`{text}` is a command"))
}

/// A task of `caller` that stays scheduled for an hour.
async fn later(harness: &Harness, caller: &Caller, intent: &str) -> TaskRecord {
    harness
        .engine
        .create(
            caller,
            CreateTask {
                trigger: Trigger::Delay { seconds: 3600 },
                title: Some(intent.into()),
                ..CreateTask::agent(intent)
            },
        )
        .await
        .unwrap()
}

fn created_id(reply: &str) -> String {
    assert!(reply.starts_with("created "), "{reply}");
    reply.split_whitespace().nth(1).unwrap().to_owned()
}

#[tokio::test]
async fn aliases_spaces_and_quotes_parse_and_anything_else_gets_help() {
    let harness = harness().await;
    assert_eq!(
        handle_command(&harness.engine, &user(), "hello there").await,
        None
    );
    assert_eq!(
        handle_command(&harness.engine, &user(), "/maitaskx list").await,
        None
    );

    let created = reply(&harness, &user(), "  /MT   create   \"buy   milk\"  ").await;
    let short = created_id(&created);
    assert_eq!(short.len(), 8);
    let task = harness.engine.resolve(&user(), &short).await.unwrap();
    assert_eq!(task.intent, "buy   milk");
    let created = reply(&harness, &user(), "/maitask create water the plants").await;
    let task = harness
        .engine
        .resolve(&user(), &created_id(&created))
        .await
        .unwrap();
    assert_eq!(task.intent, "water the plants");

    let help = reply(&harness, &user(), "/mt").await;
    assert!(help.starts_with("/maitask (alias /mt)"), "{help}");
    assert_eq!(reply(&harness, &user(), "/maitask help").await, help);
    let unknown = reply(&harness, &user(), "/mt frobnicate 12").await;
    assert!(
        unknown.starts_with("unknown subcommand `frobnicate`\n"),
        "{unknown}"
    );
    assert!(unknown.ends_with(&help));
    let missing = reply(&harness, &user(), "/mt status").await;
    assert!(
        missing.starts_with("usage: /maitask status <id>\n"),
        "{missing}"
    );
    let missing = reply(&harness, &user(), "/mt create   ").await;
    assert!(
        missing.starts_with("usage: /maitask create <intent>"),
        "{missing}"
    );
    let missing = reply(&harness, &user(), "/mt ask 1234abcd").await;
    assert!(
        missing.starts_with("usage: /maitask ask <id> <text>"),
        "{missing}"
    );
}

#[tokio::test]
async fn guests_only_read_users_manage_their_own_and_admins_any() {
    let harness = harness().await;
    let denied = reply(&harness, &guest(), "/mt create spy on everyone").await;
    assert!(denied.starts_with("permission denied"), "{denied}");
    assert!(
        reply(&harness, &guest(), "/mt list")
            .await
            .contains("no tasks")
    );

    let mine = later(&harness, &user(), "user's job").await;
    let short = mine.id.short();
    // A guest and another user cannot see it, let alone cancel it.
    for other in [guest(), carol()] {
        let status = reply(&harness, &other, &format!("/mt status {short}")).await;
        assert!(status.starts_with("no task of yours"), "{status}");
        let cancel = reply(&harness, &other, &format!("/mt cancel {short}")).await;
        assert!(
            cancel.starts_with("no task of yours") || cancel.starts_with("permission denied"),
            "{cancel}"
        );
    }
    assert_eq!(
        record(&harness.engine, mine.id).await.status,
        TaskStatus::Scheduled
    );
    // A guest may stop only tasks made for it (by a planner); it has none here.
    let guest_cancel = reply(&harness, &guest(), "/mt cancel whatever").await;
    assert!(
        guest_cancel.starts_with("no task of yours"),
        "{guest_cancel}"
    );

    // The owner and an admin can.
    let theirs = later(&harness, &carol(), "carol's job").await;
    let cancelled = reply(&harness, &user(), &format!("/mt cancel {short}")).await;
    assert_eq!(cancelled, format!("cancelled {short} user's job"));
    let by_admin = reply(
        &harness,
        &admin(),
        &format!("/mt cancel {}", theirs.id.short()),
    )
    .await;
    assert!(by_admin.starts_with("cancelled "), "{by_admin}");
    assert_eq!(
        record(&harness.engine, theirs.id).await.status,
        TaskStatus::Cancelled
    );
}

#[tokio::test]
async fn ids_accept_the_short_prefix_and_the_full_id() {
    let harness = harness().await;
    let task = later(&harness, &user(), "report").await;
    let by_short = reply(
        &harness,
        &user(),
        &format!("/mt status {}", task.id.short()),
    )
    .await;
    let first_line = by_short.lines().next().unwrap();
    assert_eq!(first_line, format!("{} scheduled report", task.id.short()));
    assert!(by_short.contains("\nintent: report"), "{by_short}");
    assert!(by_short.contains("\nnext run: "), "{by_short}");
    let by_full = reply(&harness, &user(), &format!("/mt status '{}'", task.id)).await;
    assert_eq!(by_full, by_short);
    let history = reply(
        &harness,
        &user(),
        &format!("/mt history {}", task.id.short()),
    )
    .await;
    assert!(history.contains(" scheduled — "), "{history}");
    assert!(history.ends_with("0 agent steps"), "{history}");
    let unknown = reply(&harness, &user(), "/mt status 00000000").await;
    assert!(
        unknown.starts_with("no task of yours matches `00000000`"),
        "{unknown}"
    );
}

#[tokio::test]
async fn ask_answers_a_waiting_task_and_wakes_it() {
    let model = RuleModel::new(|req| {
        let last = req.messages.last().unwrap();
        if last.role == MessageRole::Tool {
            return Ok(ChatResponse::text(format!("ok, using {}", last.content)));
        }
        Ok(ChatResponse::tool_calls(
            "",
            vec![ToolCall::new(
                "q",
                "ask_user",
                json!({"question": "Which region?"}),
            )],
        ))
    });
    let mut harness = Harness::start(config(), model).await;
    let created = reply(&harness, &user(), "/mt create weather report").await;
    let short = created_id(&created);
    let id: TaskId = harness.engine.resolve(&user(), &short).await.unwrap().id;
    harness.wait_status(id, TaskStatus::WaitingInput).await;
    let status = reply(&harness, &user(), &format!("/mt status {short}")).await;
    assert!(status.contains("\nwaiting for: Which region?"), "{status}");
    // Another user cannot answer it.
    let other = reply(&harness, &carol(), &format!("/mt ask {short} Asia")).await;
    assert!(other.starts_with("no task of yours"), "{other}");
    let answered = reply(
        &harness,
        &user(),
        &format!("/mt ask {short}   \"Europe, please\""),
    )
    .await;
    assert!(
        answered.starts_with(&format!("answered {short}")),
        "{answered}"
    );
    harness.wait_status(id, TaskStatus::Completed).await;
    let answer = record(&harness.engine, id).await.metadata.answer.unwrap();
    assert!(answer.contains("Europe, please"), "{answer}");
    let again = reply(&harness, &user(), &format!("/mt ask {short} again")).await;
    assert!(
        again.contains("only a task waiting for an answer"),
        "{again}"
    );
}

#[tokio::test]
async fn list_all_is_admin_only_and_status_filters() {
    let harness = harness().await;
    let mine = later(&harness, &user(), "mine").await;
    let hers = later(&harness, &carol(), "hers").await;
    let admins = later(&harness, &admin(), "admin's").await;
    let line = |t: &TaskRecord| format!("{} scheduled {}", t.id.short(), t.title);

    let user_all = reply(&harness, &user(), "/mt list -all").await;
    assert_eq!(
        user_all,
        format!("-all is for admins; showing your tasks\n{}", line(&mine))
    );
    assert_eq!(reply(&harness, &user(), "/mt list").await, line(&mine));
    let admin_own = reply(&harness, &admin(), "/mt list").await;
    assert_eq!(admin_own, line(&admins));
    let admin_all = reply(&harness, &admin(), "/mt  list  -all  scheduled").await;
    for task in [&mine, &hers, &admins] {
        assert!(admin_all.contains(&line(task)), "{admin_all}");
    }
    assert_eq!(admin_all.lines().count(), 3);
    assert_eq!(
        reply(&harness, &admin(), "/mt list -all running").await,
        "no tasks"
    );
    let bad = reply(&harness, &user(), "/mt list sleeping").await;
    assert!(bad.starts_with("unknown task status `sleeping`"), "{bad}");
}

#[tokio::test]
async fn list_shows_the_tasks_acting_for_the_caller_whoever_owns_them() {
    let harness = harness().await;
    let mine = later(&harness, &user(), "mine").await;
    // A planner's task made for the user (and one for the admin): owned by the planner of the
    // chat, acting for them.
    let planner_for = |who: &Caller| Caller {
        owner: Owner::planner(StreamId::new("s").unwrap()),
        door: Door::Planner,
        ..who.clone()
    };
    let planned = later(&harness, &planner_for(&user()), "planned for me").await;
    let for_admin = later(&harness, &planner_for(&admin()), "planned for the admin").await;
    assert_eq!(planned.requester(), user().requester.as_ref());
    let line = |t: &TaskRecord| format!("{} scheduled {}", t.id.short(), t.title);

    let listed = reply(&harness, &user(), "/mt list").await;
    assert!(listed.contains(&line(&mine)), "{listed}");
    assert!(listed.contains(&line(&planned)), "{listed}");
    assert_eq!(listed.lines().count(), 2, "{listed}");
    let admin_own = reply(&harness, &admin(), "/mt list").await;
    assert_eq!(admin_own, line(&for_admin));
}
