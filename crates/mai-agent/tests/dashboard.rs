//! The web dashboard in a real browser: a headless Chromium (Debian's, installed by
//! `testing/browser/setup.sh`) driven over WebDriver against a real `mai-agent serve` on loopback
//! with the fake model. It logs in with the token, sees a task created through the API appear
//! live, pauses and resumes a scheduled task, pages through 205 tasks, answers a question from
//! the waiting page (the task resumes, the status log names the dashboard) — an answer being
//! typed keeps its text and focus while the list updates — re-reads its list after `serve`
//! restarts, throttles live reloads, cancels from the detail page, shows an intent full of HTML
//! as inert text, works on an emulated phone in the dark theme by keyboard, and its role × tool
//! matrix is what `mai-agent tools` prints. Each page is saved as a screenshot
//! (`<target>/tmp/dashboard-screenshots/`; `MAI_UPDATE_DOC_SCREENSHOTS=1` refreshes `docs/img/`).
//!
//! Without Chromium each test prints SKIP; under `CI=true` it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../testing/browser.rs"]
mod browser;
mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::collections::BTreeMap;

use browser::Browser;
use common::{Served, answer, events, fake_model, paced_fake_model, serve_command, tool_call};
use fantoccini::Locator;
use fantoccini::key::Key;
use serde_json::{Value, json};
use sse::SseReader;
use wiremock::MockServer;

const TOKEN: &str = "dashboard-test-token";

/// A served instance with a token, and an API client that sends it.
struct Instance {
    _dir: tempfile::TempDir,
    served: Served,
    api: reqwest::Client,
    _model: MockServer,
}

/// `serve` with the token and a model that looks at its tasks, asks "Which colour?", then
/// paints in the answer's colour.
async fn instance() -> Instance {
    let (model, _calls) = fake_model(|results, body| {
        if results == 0 {
            tool_call("t1", "list_my_tasks", json!({}))
        } else if results == 1 {
            tool_call("q1", "ask_user", json!({"question": "Which colour?"}))
        } else {
            let said = common::last_tool_result(body);
            let colour: Value = serde_json::from_str(&said).unwrap_or(Value::Null);
            answer(&format!(
                "painted it {}",
                colour["answer"].as_str().unwrap_or("grey")
            ))
        }
    })
    .await;
    instance_with(model)
}

/// `serve` with the token and `model`.
fn instance_with(model: MockServer) -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let mut command = serve_command(dir.path(), &model, None);
    command
        .env("MAI_AGENT__SERVER__AUTH_TOKEN", TOKEN)
        .env("MAI_AGENT__TASK__MAX_ROUNDS", "200")
        .env("MAI_AGENT__TASK__REPEAT_FAIL_AFTER", "200");
    let served = Served::start(command);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse().unwrap(),
    );
    let api = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    Instance {
        _dir: dir,
        served,
        api,
        _model: model,
    }
}

impl Instance {
    fn url(&self, hash: &str) -> String {
        format!("{}/{hash}", self.served.base)
    }

    /// Creates a task in the console chat; returns its record.
    async fn create(&self, fields: Value) -> Value {
        let mut fields = fields;
        fields["stream_id"] = json!("console:local");
        fields["platform"] = json!("console");
        let response = self
            .api
            .post(format!("{}/v1/tasks", self.served.base))
            .json(&fields)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        response.json().await.unwrap()
    }

    async fn task(&self, id: &str) -> Value {
        common::task_record(&self.api, &self.served.base, id).await
    }
}

/// Opens the dashboard at `hash` and logs in (the token goes into the login form).
async fn logged_in(browser: &Browser, instance: &Instance, hash: &str) {
    browser.client.goto(&instance.url(hash)).await.unwrap();
    let token = browser.find("#token").await;
    token.send_keys(TOKEN).await.unwrap();
    browser.find("#login").await.click().await.unwrap();
    browser.find("#nav a[aria-current=page]").await;
}

#[tokio::test]
async fn a_person_logs_in_with_the_token_and_sees_a_task_created_through_the_api_appear_live() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    browser.client.goto(&instance.url("")).await.unwrap();
    let token = browser.find("#token").await;
    browser.screenshot("login").await;
    token.send_keys("not-the-token").await.unwrap();
    browser.find("#login").await.click().await.unwrap();
    browser.wait_text("main", "refused").await;
    // The wrong token was not kept in the tab's storage.
    let kept = browser
        .client
        .execute("return sessionStorage.getItem('mai-agent.token')", vec![])
        .await
        .unwrap();
    assert_eq!(kept, Value::Null);
    // The page holds no token in its address.
    assert!(
        !browser
            .client
            .current_url()
            .await
            .unwrap()
            .as_str()
            .contains("token")
    );
    token.clear().await.unwrap();
    token.send_keys(TOKEN).await.unwrap();
    browser.find("#login").await.click().await.unwrap();
    browser.wait_text("#live", "live").await;
    browser.wait_text("#task-rows", "No task").await;

    instance
        .create(
            json!({"intent": "water the plants every evening", "title": "water the plants",
                       "cron_expr": "0 18 * * *", "level": "instant"}),
        )
        .await;
    let weekly = instance
        .create(
            json!({"intent": "summarise the week", "title": "weekly summary",
                       "delay_seconds": 3600}),
        )
        .await;
    let weekly = weekly["id"].as_str().unwrap();
    // Without a reload: the list follows the event stream.
    let rows = browser.wait_text("#task-rows", "weekly summary").await;
    assert!(rows.contains("water the plants"), "{rows}");
    assert!(rows.contains("cron 0 18 * * *"), "{rows}");
    // The counts are read beside the rows (two store reads): the refresh that follows the
    // second creation's event shows both, whatever the first read caught.
    browser.wait_text(".counts", "scheduled\n2").await;
    browser.screenshot("tasks").await;

    a_scheduled_task_pauses_and_resumes_on_the_schedules_page(&browser, &instance, weekly).await;
    // Cancel asks first there too; the second press cancels.
    // A live update may redraw the button between two steps (it stays armed): found anew each
    // time.
    let cancel = format!("#cancel-{weekly}");
    browser.find(&cancel).await.click().await.unwrap();
    browser.wait_text(&cancel, "Really cancel?").await;
    assert_eq!(instance.task(weekly).await["status"], "scheduled");
    browser.find(&cancel).await.click().await.unwrap();
    browser.wait_text("main", "cancel done").await;
    assert_eq!(instance.task(weekly).await["status"], "cancelled");
    browser.close().await;
}

/// On the Schedules page (its cron task `water the plants` listed), task `weekly`, waiting for
/// its time, pauses (its timer stops) and resumes to that time.
async fn a_scheduled_task_pauses_and_resumes_on_the_schedules_page(
    browser: &Browser,
    instance: &Instance,
    weekly: &str,
) {
    browser
        .client
        .goto(&instance.url("#/schedules"))
        .await
        .unwrap();
    browser
        .wait_text("#schedule-rows", "water the plants")
        .await;
    browser.screenshot("schedules").await;

    // A task waiting for its time pauses from here (its timer stops) and resumes to that time.
    let pause = browser.find(&format!("#pause-{weekly}")).await;
    pause.click().await.unwrap();
    browser.wait_text("#schedule-rows", "paused").await;
    assert_eq!(instance.task(weekly).await["status"], "paused");
    browser
        .find(&format!("#resume-{weekly}"))
        .await
        .click()
        .await
        .unwrap();
    browser.wait_text("main", "resume done").await;
    let resumed = instance.task(weekly).await;
    assert_eq!(resumed["status"], "scheduled", "{resumed}");
}

#[tokio::test]
async fn a_question_answered_on_the_waiting_page_resumes_the_task_and_the_log_names_the_dashboard()
{
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let mut stream = SseReader::new(events(&instance.api, &instance.served.base).await);
    let task = instance
        .create(json!({"intent": "paint the fence", "title": "paint the fence"}))
        .await;
    let id = task["id"].as_str().unwrap().to_owned();
    stream
        .wait_status(&id, "waiting_input", "the question")
        .await;

    logged_in(&browser, &instance, "#/waiting").await;
    let card = browser.wait_text("#waiting-list", "Which colour?").await;
    assert!(card.contains("paint the fence"), "{card}");
    browser.wait_text("#waiting-count", "1").await;
    browser.screenshot("waiting").await;
    let text = browser.find("#waiting-list textarea").await;
    text.send_keys("blue").await.unwrap();
    browser
        .find("#waiting-list button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    stream.wait_status(&id, "completed", "the answer").await;

    let record = instance.task(&id).await;
    assert_eq!(record["metadata"]["answer"], "painted it blue");
    let resumed = record["status_log"]
        .as_array()
        .unwrap()
        .iter()
        .find(|line| line["reason"] == "resumed with the answer")
        .expect("a resume line")
        .clone();
    assert_eq!(resumed["actor"], "dashboard:operator", "{resumed}");
    browser.wait_text("#waiting-list", "Nobody").await;

    browser
        .client
        .goto(&instance.url(&format!("#/task/{id}")))
        .await
        .unwrap();
    let timeline = browser.wait_text("#timeline", "painted it blue").await;
    assert!(timeline.contains("Which colour?"), "{timeline}");
    assert!(timeline.contains("list_my_tasks"), "{timeline}");
    assert!(timeline.contains("dashboard:operator"), "{timeline}");
    // Usage and cost, as GET /v1/tasks/{id} records them.
    let usage = browser.wait_text("#usage", "calls").await;
    assert!(usage.contains("prompt tokens"), "{usage}");
    let replies = browser.wait_text("#replies", "painted it blue").await;
    assert!(replies.contains("of 1 part(s) sent"), "{replies}");
    // Tall enough for the timeline in the picture.
    browser.client.set_window_size(1280, 1900).await.unwrap();
    browser.screenshot("detail").await;

    // After a task ran, the health page has model calls to show.
    browser.client.set_window_size(1280, 860).await.unwrap();
    browser
        .client
        .goto(&instance.url("#/health"))
        .await
        .unwrap();
    browser.wait_text("#main", "last call").await;
    browser.find("#charts figure").await;
    browser.screenshot("health").await;
    browser.close().await;
}

#[tokio::test]
async fn the_tasks_page_shows_every_task_a_page_at_a_time() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    // 205 tasks, over five chats (each chat holds at most 50 active tasks).
    for n in 0..205 {
        let response = instance
            .api
            .post(format!("{}/v1/tasks", instance.served.base))
            .json(&json!({"intent": "later", "title": format!("errand {n}"),
                          "delay_seconds": 3600, "platform": "test",
                          "stream_id": format!("test:chat{}", n % 5)}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    }
    logged_in(&browser, &instance, "").await;
    browser.wait_text("#task-summary", "200 of 205 shown").await;
    let more = browser.find("#more-tasks").await;
    assert_eq!(more.text().await.unwrap(), "Show 5 more");
    more.click().await.unwrap();
    browser.wait_text("#task-summary", "205 of 205 shown").await;
    let shown = browser
        .client
        .execute(
            "return {rows: document.querySelectorAll('#task-rows tr').length,
                     oldest: document.querySelector('#task-rows tr:last-child').innerText,
                     more: document.getElementById('more-tasks') !== null}",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(shown["rows"], 205, "{shown}");
    assert!(
        shown["oldest"].as_str().unwrap().contains("errand 0"),
        "{shown}"
    );
    assert_eq!(shown["more"], false, "{shown}");
    browser.close().await;
}

#[tokio::test]
async fn cancelling_on_the_detail_page_cancels_the_task() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let task = instance
        .create(json!({"intent": "tidy the archive", "title": "tidy", "delay_seconds": 3600}))
        .await;
    let id = task["id"].as_str().unwrap();
    logged_in(&browser, &instance, &format!("#/task/{id}")).await;
    browser.wait_text("#task-title", "scheduled").await;
    let cancel = browser.find("#cancel").await;
    cancel.click().await.unwrap();
    // The first press only asks.
    assert_eq!(cancel.text().await.unwrap(), "Really cancel?");
    assert_eq!(instance.task(id).await["status"], "scheduled");
    cancel.click().await.unwrap();
    browser.wait_text("#task-title", "cancelled").await;
    let record = instance.task(id).await;
    assert_eq!(record["status"], "cancelled");
    let last = record["status_log"].as_array().unwrap().last().unwrap();
    assert_eq!(last["actor"], "dashboard:operator", "{last}");
    browser.close().await;
}

#[tokio::test]
async fn an_intent_containing_html_is_shown_as_text_and_runs_nothing() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let intent = r#"<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>"#;
    let title = r#"<b>bold</b><img src=x onerror=alert(1)>"#;
    let task = instance
        .create(json!({"intent": intent, "title": title, "delay_seconds": 3600}))
        .await;
    let id = task["id"].as_str().unwrap();
    logged_in(&browser, &instance, "").await;
    let rows = browser.wait_text("#task-rows", "<b>bold</b>").await;
    assert!(rows.contains(title), "{rows}");
    browser
        .client
        .goto(&instance.url(&format!("#/task/{id}")))
        .await
        .unwrap();
    let shown = browser.wait_text("#task-intent", "onerror").await;
    assert_eq!(shown, intent);
    let page = browser
        .client
        .execute(
            "return {images: document.querySelectorAll('main img, main script, main b').length,
                     pwned: window.pwned === undefined ? null : window.pwned,
                     title: document.getElementById('task-title').textContent}",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(page["images"], 0, "{page}");
    assert_eq!(page["pwned"], Value::Null, "{page}");
    assert!(page["title"].as_str().unwrap().starts_with(title), "{page}");
    browser.close().await;
}

/// `tool → roles` from the dashboard's matrix table.
async fn matrix_on_the_page(browser: &Browser) -> BTreeMap<String, Vec<String>> {
    browser.find("#matrix tbody tr").await;
    let rows = browser
        .client
        .execute(
            "const roles = [...document.querySelectorAll('#matrix thead th')].map(th => th.textContent);
             return [...document.querySelectorAll('#matrix tbody tr')].map(tr => {
               const cells = [...tr.children];
               return [cells[0].textContent,
                       cells.map((c, i) => c.classList.contains('yes') ? roles[i] : null).filter(Boolean)];
             });",
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value::<Vec<(String, Vec<String>)>>(rows)
        .unwrap()
        .into_iter()
        .collect()
}

/// `mai-agent tools ARGS` on the instance's data directory, as JSON.
fn tools_json(instance: &Instance, args: &[&str]) -> Value {
    let out = std::process::Command::new(common::binary())
        .arg("--data-dir")
        .arg(instance._dir.path())
        .env_remove("MAI_AGENT_CONFIG")
        .arg("tools")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn mai_agent_tools_json_prints_exactly_what_get_v1_tools_answers() {
    let instance = instance().await;
    for (query, args) in [
        ("", vec!["--json"]),
        ("?role=user", vec!["--role", "user", "--json"]),
        ("?role=guest", vec!["--role", "guest", "--json"]),
    ] {
        let answer: Value = instance
            .api
            .get(format!("{}/v1/tools{query}", instance.served.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let printed = tools_json(&instance, &args);
        assert_eq!(
            printed, answer,
            "mai-agent tools {args:?} and GET /v1/tools{query}"
        );
        let first = &printed["tools"][0];
        assert!(first["description"].is_string(), "{first}");
        assert!(first["schema_tokens"].as_u64().unwrap() > 0, "{first}");
    }
}

#[tokio::test]
async fn the_role_tool_matrix_is_what_mai_agent_tools_prints() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 1000, false).await else {
        return;
    };
    logged_in(&browser, &instance, "#/tools").await;
    let shown = matrix_on_the_page(&browser).await;
    browser.screenshot("tools").await;

    let printed = tools_json(&instance, &["--json"]);
    let printed: BTreeMap<String, Vec<String>> = printed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let roles = t["roles"].as_array().unwrap();
            let roles = roles.iter().map(|r| r.as_str().unwrap().to_owned());
            (t["name"].as_str().unwrap().to_owned(), roles.collect())
        })
        .collect();
    assert!(printed.len() > 5, "{printed:?}");
    assert_eq!(shown, printed);
    // Not every role sees every tool: the matrix has something to show.
    assert!(printed.values().any(|roles| roles.len() < 3), "{printed:?}");

    browser
        .client
        .goto(&instance.url("#/health"))
        .await
        .unwrap();
    browser.wait_text("#instance", "Version").await;
    browser.find("#charts figure").await;
    browser.close().await;
}

/// What a phone shows of the page: its viewport width, how far the page sticks out sideways, and
/// how light (0 black … 1 white) the page's background and text and a table cell's text are.
async fn phone_view(browser: &Browser) -> Value {
    browser
        .client
        .execute(
            "const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
             const light = (c) => { const [r, g, b] = rgb(c); return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255; };
             const body = getComputedStyle(document.body);
             const cell = document.querySelector('main td');
             return {width: innerWidth,
                     sideways: document.documentElement.scrollWidth - innerWidth,
                     background: light(body.backgroundColor), text: light(body.color),
                     cell: cell ? light(getComputedStyle(cell).color) : null};",
            vec![],
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn the_pages_work_by_keyboard_on_a_phone_in_the_dark_theme() {
    let instance = instance().await;
    let Some(browser) = Browser::start_phone(true).await else {
        return;
    };
    instance
        .create(
            json!({"intent": "remind everyone to stretch", "title": "stretch",
                       "cron_expr": "0 10 * * 1-5", "level": "instant"}),
        )
        .await;
    logged_in(&browser, &instance, "").await;
    browser.wait_text("#task-rows", "stretch").await;
    // A phone's 390 px, nothing scrolling sideways, and really dark: light text on a dark page.
    let view = phone_view(&browser).await;
    assert_eq!(view["width"], 390, "{view}");
    assert!(view["sideways"].as_f64().unwrap() <= 0.0, "{view}");
    assert!(view["background"].as_f64().unwrap() < 0.2, "{view}");
    assert!(view["text"].as_f64().unwrap() > 0.7, "{view}");
    assert!(view["cell"].as_f64().unwrap() > 0.5, "{view}");
    browser.screenshot("phone-dark").await;

    // The skip link moves the keyboard focus to the content, and stays on the page.
    browser
        .client
        .execute("document.querySelector('.skip').focus()", vec![])
        .await
        .unwrap();
    let skip = browser.client.active_element().await.unwrap();
    skip.send_keys(&Key::Enter.to_string()).await.unwrap();
    let after = browser
        .client
        .execute(
            "return {focused: document.activeElement.id, hash: location.hash}",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(after["focused"], "main", "{after}");
    assert_ne!(after["hash"], "#main", "{after}");
    browser.wait_text("#task-rows", "stretch").await;

    // From the skip link at the top, Tab walks the pages' links in order and Enter opens one.
    browser
        .client
        .execute("document.querySelector('.skip').focus()", vec![])
        .await
        .unwrap();
    let mut focused = Vec::new();
    while !focused
        .last()
        .is_some_and(|t: &String| t.contains("Schedules"))
    {
        assert!(
            focused.len() < 8,
            "Tab never reached Schedules: {focused:?}"
        );
        let active = browser.client.active_element().await.unwrap();
        active.send_keys(&Key::Tab.to_string()).await.unwrap();
        let active = browser.client.active_element().await.unwrap();
        focused.push(active.text().await.unwrap());
    }
    assert!(focused[0].contains("mai-agent"), "{focused:?}");
    assert!(focused.iter().any(|t| t.contains("Waiting")), "{focused:?}");
    let active = browser.client.active_element().await.unwrap();
    active.send_keys(&Key::Enter.to_string()).await.unwrap();
    browser.wait_text("#schedule-rows", "stretch").await;
    let current = browser
        .client
        .find(Locator::Css("#nav a[aria-current=page]"))
        .await
        .unwrap();
    assert_eq!(current.text().await.unwrap(), "Schedules");
    let view = phone_view(&browser).await;
    assert!(
        view["sideways"].as_f64().unwrap() <= 0.0,
        "schedules: {view}"
    );
    browser.close().await;
}

/// How many chat reads (`GET /v1/streams/…/messages`) the page has finished, once at least
/// `least` have (the browser reports each finished request to a `PerformanceObserver`).
async fn chat_reads(browser: &Browser, least: usize) -> usize {
    let script = "const [least, done] = arguments;
        const count = () => performance.getEntriesByType('resource')
          .filter((e) => e.name.includes('/messages')).length;
        if (count() >= least) { done(count()); return; }
        const observer = new PerformanceObserver(() => {
          if (count() >= least) { observer.disconnect(); done(count()); }
        });
        observer.observe({ type: 'resource' });";
    let reads = browser
        .client
        .execute_async(script, vec![json!(least)])
        .await
        .unwrap();
    usize::try_from(reads.as_u64().unwrap()).unwrap()
}

/// Creates a task titled `title` (the model asks it "Which colour?") and waits on `stream` until
/// it waits for the answer; its id.
async fn asking(instance: &Instance, stream: &mut SseReader, title: &str) -> String {
    let task = instance
        .create(json!({"intent": title, "title": title}))
        .await;
    let id = task["id"].as_str().unwrap().to_owned();
    stream.wait_status(&id, "waiting_input", title).await;
    id
}

#[tokio::test]
async fn an_answer_being_typed_keeps_its_text_and_focus_while_the_list_updates_live() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let mut stream = SseReader::new(events(&instance.api, &instance.served.base).await);
    let first = asking(&instance, &mut stream, "paint the fence").await;
    logged_in(&browser, &instance, "#/waiting").await;
    browser.wait_text("#waiting-list", "paint the fence").await;
    // The person opens the task's chat: it is read once.
    browser
        .find(&format!("#chat-{first} summary"))
        .await
        .click()
        .await
        .unwrap();
    assert_eq!(chat_reads(&browser, 1).await, 1);
    let field = browser.find(&format!("#answer-{first}")).await;
    field.send_keys("dark gre").await.unwrap();

    // Another task starts waiting: the list is read and drawn again under the person's hands.
    asking(&instance, &mut stream, "paint the shed").await;
    browser.wait_text("#waiting-list", "paint the shed").await;
    let kept = browser
        .client
        .execute(
            "const field = document.getElementById(arguments[0]);
             return {text: field.value, focused: document.activeElement === field,
                     caret: field.selectionStart};",
            vec![json!(format!("answer-{first}"))],
        )
        .await
        .unwrap();
    assert_eq!(
        kept,
        json!({"text": "dark gre", "focused": true, "caret": 8}),
        "the typed answer and the focus survive the update"
    );
    // The chat stayed open, and the update read no chat again.
    let open = browser
        .client
        .execute(
            "return document.getElementById(arguments[0]).open",
            vec![json!(format!("chat-{first}"))],
        )
        .await
        .unwrap();
    assert_eq!(open, true);
    assert_eq!(chat_reads(&browser, 1).await, 1);
    // Typing goes on where it stopped, and the answer sent is the whole of it.
    browser
        .client
        .active_element()
        .await
        .unwrap()
        .send_keys("en")
        .await
        .unwrap();
    browser
        .find(&format!("#send-{first}"))
        .await
        .click()
        .await
        .unwrap();
    stream.wait_status(&first, "completed", "the answer").await;
    let record = instance.task(&first).await;
    assert_eq!(record["metadata"]["answer"], "painted it dark green");
    browser.close().await;
}

#[tokio::test]
async fn live_updates_are_throttled_to_one_refresh_per_pause_with_the_last_call_kept() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    logged_in(&browser, &instance, "").await;
    // dom.js's throttle, as every page uses it for event-driven reloads: the first call runs at
    // once, a burst during the pause folds into one trailing run, and a call right after that
    // run waits for the next pause instead of running again at once.
    let runs = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             import('/ui/dom.js').then(({ throttle }) => {
               const seen = [];
               let runs = 0;
               const refresh = throttle(() => {
                 runs += 1;
                 if (runs === 2) { refresh(); seen.push(runs); }
                 if (runs === 3) { seen.push(runs); done(seen); }
               }, 200);
               refresh();
               seen.push(runs);
               for (let i = 0; i < 20; i += 1) refresh();
               seen.push(runs);
             });",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(runs, json!([1, 1, 2, 3]));
    browser.close().await;
}

#[tokio::test]
async fn after_the_event_stream_reconnects_the_page_reads_its_tasks_again() {
    let mut instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let task = instance
        .create(json!({"intent": "tidy the archive", "title": "tidy", "delay_seconds": 3600}))
        .await;
    let id = task["id"].as_str().unwrap().to_owned();
    logged_in(&browser, &instance, "").await;
    browser.wait_text("#task-rows", "tidy").await;
    browser.wait_text("#live", "live").await;

    // `serve` stops; meanwhile the task is cancelled from the command line, straight in the
    // store — no event will ever tell the page.
    instance.served.terminate();
    browser.wait_text("#live", "reconnecting").await;
    let out = common::mai(instance._dir.path(), &instance._model)
        .args(["task", "cancel", &id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Back on the same address: the page reconnects and reads its list again.
    let address = instance
        .served
        .base
        .trim_start_matches("http://")
        .to_owned();
    let mut command = common::mai(instance._dir.path(), &instance._model);
    command
        .env("MAI_AGENT__SERVER__AUTH_TOKEN", TOKEN)
        .args(["serve", "--listen", &address]);
    instance.served = Served::start(command);
    browser.wait_text("#live", "live").await;
    let rows = browser.wait_text("#task-rows", "cancelled").await;
    assert!(rows.contains("tidy"), "{rows}");
    browser.close().await;
}

/// The highest round number the detail page's timeline shows.
async fn last_round_shown(browser: &Browser) -> u64 {
    let rounds = browser
        .client
        .execute(
            "return Math.max(0, ...[...document.querySelectorAll('#timeline h3')]
               .map(h => Number((h.textContent.match(/Round (\\d+)/) || [0, 0])[1])));",
            vec![],
        )
        .await
        .unwrap();
    rounds.as_u64().unwrap()
}

#[tokio::test]
async fn an_armed_cancel_and_the_opened_parts_of_the_timeline_survive_live_updates_of_a_running_task()
 {
    // A model that thinks a quarter of a second and always looks at its tasks again: the task
    // runs on, and each round's events redraw its page.
    let (model, _calls) = paced_fake_model(std::time::Duration::from_millis(250), |results, _| {
        tool_call(&format!("t{results}"), "list_my_tasks", json!({}))
    })
    .await;
    let instance = instance_with(model);
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let task = instance
        .create(json!({"intent": "keep looking", "title": "busy"}))
        .await;
    let id = task["id"].as_str().unwrap();
    logged_in(&browser, &instance, &format!("#/task/{id}")).await;
    browser.wait_text("#task-title", "running").await;
    browser.wait_text("#timeline", "Round 2").await;
    // The person opens the system prompt and closes the first tool call.
    let folds = browser
        .client
        .execute(
            "const prompt = [...document.querySelectorAll('#timeline details')]
               .find(d => d.querySelector('summary').textContent === 'System prompt');
             const call = document.querySelector('#timeline details.call');
             prompt.open = true;
             call.open = false;
             return [prompt.id, call.id];",
            vec![],
        )
        .await
        .unwrap();
    // The page redraws its controls several times a second, so the test presses the button
    // that is there at the moment, in the page itself (a WebDriver handle would go stale).
    let press = "const cancel = document.getElementById('cancel');
                 cancel.click();
                 return document.getElementById('cancel').textContent;";
    let shown = browser.client.execute(press, vec![]).await.unwrap();
    assert_eq!(shown, "Really cancel?");

    // Two more rounds arrive and are drawn while the cancel is armed.
    let seen = last_round_shown(&browser).await;
    browser
        .wait_text("#timeline", &format!("Round {}", seen + 2))
        .await;
    let state = browser
        .client
        .execute(
            "return {cancel: document.getElementById('cancel').textContent,
                     prompt: document.getElementById(arguments[0]).open,
                     call: document.getElementById(arguments[1]).open};",
            vec![folds[0].clone(), folds[1].clone()],
        )
        .await
        .unwrap();
    assert_eq!(
        state,
        json!({"cancel": "Really cancel?", "prompt": true, "call": false}),
        "the redraw kept the armed cancel and what was opened and closed"
    );
    assert_eq!(instance.task(id).await["status"], "running");
    // The second press cancels.
    browser.client.execute(press, vec![]).await.unwrap();
    browser.wait_text("#task-title", "cancelled").await;
    assert_eq!(instance.task(id).await["status"], "cancelled");
    browser.close().await;
}

#[tokio::test]
async fn a_focused_task_link_keeps_the_focus_when_a_new_task_arrives_live() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let first = instance
        .create(json!({"intent": "later", "title": "first errand", "delay_seconds": 3600}))
        .await;
    let first = first["id"].as_str().unwrap();
    logged_in(&browser, &instance, "").await;
    browser.wait_text("#task-rows", "first errand").await;
    let link = format!("link-{first}");
    browser
        .client
        .execute(
            "document.getElementById(arguments[0]).focus()",
            vec![json!(link)],
        )
        .await
        .unwrap();
    instance
        .create(json!({"intent": "later", "title": "second errand", "delay_seconds": 3600}))
        .await;
    browser.wait_text("#task-rows", "second errand").await;
    let focused = browser
        .client
        .execute("return document.activeElement.id", vec![])
        .await
        .unwrap();
    assert_eq!(focused, json!(link), "the focus stayed on the link");
    browser.close().await;
}

#[tokio::test]
async fn a_focused_chat_summary_keeps_the_focus_when_the_waiting_list_updates_live() {
    let instance = instance().await;
    let Some(browser) = Browser::start(1280, 860, false).await else {
        return;
    };
    let mut stream = SseReader::new(events(&instance.api, &instance.served.base).await);
    let first = asking(&instance, &mut stream, "sweep the porch").await;
    logged_in(&browser, &instance, "#/waiting").await;
    browser.wait_text("#waiting-list", "sweep the porch").await;
    // A keyboard user on the fold of the task's chat (a summary has no id of its own).
    browser
        .client
        .execute(
            "document.querySelector(`#chat-${arguments[0]} > summary`).focus()",
            vec![json!(first)],
        )
        .await
        .unwrap();
    asking(&instance, &mut stream, "sweep the yard").await;
    browser.wait_text("#waiting-list", "sweep the yard").await;
    let focused = browser
        .client
        .execute(
            "const a = document.activeElement;
             return a.tagName + ' in ' + (a.parentElement ? a.parentElement.id : '');",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        focused,
        json!(format!("SUMMARY in chat-{first}")),
        "the focus stayed on the chat's fold"
    );
    browser.close().await;
}
