use super::{PromptError, PromptName, Prompts};
use serde_json::{Value, json};
use std::fs;

/// Sample variables for every template; every string and number here must show up in the output.
fn sample_vars(name: PromptName) -> Value {
    match name {
        PromptName::AgentSystem => json!({
            "intent": "compare three cloud offers",
            "role": "user",
            "platform": "qq",
            "stream_id": "stream-42",
            "now": "2025-01-02 18:00 +08:00",
            "max_rounds": 30,
        }),
        PromptName::SubagentSystem => json!({"intent": "find the AWS price", "max_rounds": 10}),
        PromptName::Title => json!({"intent": "每天18点提醒大家喝水"}),
        PromptName::Polish => json!({
            "text": "Price: 99 CNY/month, see https://example.com/p?a=1&b=<2>",
            "bot_name": "Mai",
            "personality": "cheerful and curious",
            "reply_style": "short, casual",
            "recent_messages": [
                {"sender": "Alice", "text": "哪家云最便宜？"},
                {"sender": "Bob", "text": "我也想知道"},
            ],
            "jargon": [{"term": "白嫖", "meaning": "getting something for free"}],
            "use_jargon": true,
        }),
        PromptName::Injection => json!({"instruction": "also check Azure", "source": "the owner"}),
        PromptName::MaxRoundsReached => json!({"max_rounds": 30}),
        PromptName::AskUserTimeout => json!({"minutes": 10, "question": "Which region?"}),
        PromptName::NoteWaiting => json!({
            "short_id": "1a2b3c4d",
            "title": "Compare cloud offers",
            "question": "Which region?",
        }),
        PromptName::NoteCrossStream => json!({
            "title": "Daily reminder",
            "origin_stream": "group-7",
            "summary": "the owner asked to remind this group",
        }),
        PromptName::PlannerBoardIntro => json!({}),
        PromptName::PlannerBoardWaiting => json!({"tasks": [
            {"short_id": "1a2b3c4d", "title": "Compare offers", "question": "Which region?",
             "waiting_since": "17:55"},
            {"short_id": "5e6f7a8b", "title": "Disk check", "question": "Which server?",
             "waiting_since": "17:58"},
        ]}),
        PromptName::ToolCallsDropped => json!({"total": 40, "kept": 32, "dropped": 8}),
        PromptName::ArgumentsDropped => json!({"size": 70000, "limit": 65536}),
        PromptName::NoAnswer => json!({}),
        PromptName::SubagentOutOfRounds => json!({"max_rounds": 10, "last_text": "still looking"}),
        PromptName::RepeatedCall => json!({"tool": "search", "times": 3, "fail_after": 5}),
    }
}

/// Every scalar (string or number) inside `value`, as text.
fn scalars(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|item| scalars(item, out)),
        Value::Object(map) => map.values().for_each(|item| scalars(item, out)),
        Value::Bool(_) | Value::Null => {}
    }
}

#[test]
fn every_template_renders_with_its_variables_and_uses_them() {
    let prompts = Prompts::embedded();
    for name in PromptName::ALL {
        let vars = sample_vars(name);
        let rendered = prompts
            .render(name, &vars)
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(!rendered.trim().is_empty(), "{name} rendered empty");
        if std::env::var_os("MAI_SHOW_PROMPTS").is_some() {
            println!("===== {name}\n{rendered}");
        }
        assert!(
            !rendered.contains("{{") && !rendered.contains("{%"),
            "{name}: {rendered}"
        );
        let mut values = Vec::new();
        scalars(&vars, &mut values);
        for value in values {
            assert!(
                rendered.contains(&value),
                "{name} does not show {value:?}:\n{rendered}"
            );
        }
    }
}

#[test]
fn embedded_templates_use_exactly_their_documented_variables() {
    let prompts = Prompts::embedded();
    for name in PromptName::ALL {
        let mut documented: Vec<&str> = name.variables().to_vec();
        documented.sort_unstable();
        assert_eq!(prompts.used_variables[name.index()], documented, "{name}");
    }
}

#[test]
fn every_file_in_the_prompts_dir_is_a_known_template() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/prompts");
    let mut files: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut known: Vec<&str> = PromptName::ALL.map(PromptName::file_name).to_vec();
    known.sort_unstable();
    assert_eq!(files, known);
}

#[test]
fn a_missing_variable_is_an_error_naming_it() {
    let mut vars = sample_vars(PromptName::AgentSystem);
    if let Some(map) = vars.as_object_mut() {
        map.remove("now");
    }
    let err = Prompts::embedded()
        .render(PromptName::AgentSystem, &vars)
        .err();
    assert!(
        matches!(&err, Some(PromptError::MissingVariable { name: PromptName::AgentSystem, variable }) if variable == "now"),
        "{err:?}"
    );
    let message = err.map(|err| err.to_string()).unwrap_or_default();
    assert!(
        message.contains("`now`") && message.contains("agent_system.j2"),
        "{message}"
    );
}

#[test]
fn a_missing_field_inside_a_list_is_an_error_naming_it() {
    let mut vars = sample_vars(PromptName::Polish);
    vars["recent_messages"] = json!([{"text": "hi"}]);
    let err = Prompts::embedded().render(PromptName::Polish, &vars).err();
    let message = err.map(|err| err.to_string()).unwrap_or_default();
    assert!(message.contains("sender"), "{message}");
}

#[test]
fn vars_can_be_a_typed_struct() {
    #[derive(serde::Serialize)]
    struct TitleVars<'a> {
        intent: &'a str,
    }
    let rendered = Prompts::embedded().render(
        PromptName::Title,
        &TitleVars {
            intent: "check disks",
        },
    );
    assert!(rendered.is_ok_and(|text| text.ends_with("Task: check disks")));
}

#[test]
fn output_is_plain_text_without_html_escaping() {
    let vars = sample_vars(PromptName::Polish);
    let rendered = Prompts::embedded()
        .render(PromptName::Polish, &vars)
        .unwrap_or_default();
    assert!(
        rendered.contains("https://example.com/p?a=1&b=<2>"),
        "{rendered}"
    );
}

#[test]
fn polish_leaves_out_jargon_when_disabled_and_messages_when_there_are_none() {
    let mut vars = sample_vars(PromptName::Polish);
    vars["use_jargon"] = json!(false);
    vars["recent_messages"] = json!([]);
    let rendered = Prompts::embedded()
        .render(PromptName::Polish, &vars)
        .unwrap_or_default();
    assert!(
        !rendered.contains("白嫖") && !rendered.contains("Recent messages"),
        "{rendered}"
    );
    assert!(rendered.contains("language"), "{rendered}");
}

#[test]
fn the_waiting_board_says_so_when_nothing_waits() {
    let rendered = Prompts::embedded()
        .render(PromptName::PlannerBoardWaiting, &json!({"tasks": []}))
        .unwrap_or_default();
    assert_eq!(rendered, "No background task is waiting for the user.");
}

#[test]
fn an_override_replaces_only_its_template() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    fs::write(dir.path().join("title.j2"), "Title for: {{ intent }}")?;
    fs::write(dir.path().join(".title.j2.swp"), "editor junk {{")?;
    let prompts = Prompts::with_override_dir(dir.path())?;
    let vars = json!({"intent": "check disks"});
    assert_eq!(
        prompts.render(PromptName::Title, &vars)?,
        "Title for: check disks"
    );
    let embedded = Prompts::embedded();
    let vars = sample_vars(PromptName::AgentSystem);
    assert_eq!(
        prompts.render(PromptName::AgentSystem, &vars)?,
        embedded.render(PromptName::AgentSystem, &vars)?
    );
    Ok(())
}

#[test]
fn an_override_that_does_not_parse_is_reported_with_file_and_line()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    fs::write(
        dir.path().join("polish.j2"),
        "line one\nline two\n{% if text %}\nno endif\n",
    )?;
    let err = Prompts::with_override_dir(dir.path()).err();
    let message = err.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(matches!(err, Some(PromptError::Parse { .. })), "{message}");
    assert!(
        message.contains("polish.j2") && message.contains("line "),
        "{message}"
    );

    fs::write(dir.path().join("polish.j2"), "ok\n{{ text | }}\n")?;
    let err = Prompts::with_override_dir(dir.path()).err();
    assert!(
        matches!(&err, Some(PromptError::Parse { file, line: Some(2), .. }) if file.ends_with("polish.j2")),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn an_unknown_file_in_the_override_dir_is_an_error_listing_the_known_names()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    fs::write(dir.path().join("polsh.j2"), "typo")?;
    let message = Prompts::with_override_dir(dir.path())
        .err()
        .map(|err| err.to_string())
        .unwrap_or_default();
    assert!(message.contains("polsh.j2"), "{message}");
    assert!(
        message.contains("polish.j2") && message.contains("planner_board_waiting.j2"),
        "{message}"
    );
    Ok(())
}

#[test]
fn an_override_using_an_unknown_variable_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    fs::write(dir.path().join("title.j2"), "{{ intent }} {{ user_name }}")?;
    let message = Prompts::with_override_dir(dir.path())
        .err()
        .map(|err| err.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("title.j2")
            && message.contains("`user_name`")
            && message.contains("intent"),
        "{message}"
    );
    Ok(())
}

#[test]
fn a_missing_override_dir_is_an_error_naming_it() {
    let message = Prompts::with_override_dir("/nonexistent/mai-prompts")
        .err()
        .map(|err| err.to_string())
        .unwrap_or_default();
    assert!(message.contains("/nonexistent/mai-prompts"), "{message}");
}
