//! Cross-plugin API tools: allowlist only, admin only, mai-agent's own endpoints never exposed.

use mai_core::config::Config;
use mai_core::host::PluginApi;
use mai_core::role::Role;
use mai_core::tool::{OutcomeKind, Visibility};
use mai_tools::plugin_api::{plugin_api_tools, tool_name};
use serde_json::json;

use crate::fakes::{FakeHost, HostCall, call, ctx_with, error_of, registry};

fn api(plugin: &str, name: &str) -> PluginApi {
    PluginApi {
        name: name.into(),
        description: format!("{name} of {plugin}"),
        plugin: plugin.into(),
    }
}

fn allow(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn admin_config(allowlist: &[&str]) -> Config {
    let mut config = Config::default();
    config.plugin_api.allowlist = allow(allowlist);
    config
}

#[tokio::test]
async fn only_allowlisted_apis_become_admin_tools() {
    let host = FakeHost::with_apis(vec![
        api("weather", "weather.today"),
        api("news", "news.top"),
    ]);
    let tools = plugin_api_tools(host.clone(), &allow(&["weather.today", "not.offered"]))
        .await
        .unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["call_weather_today"]);
    assert_eq!(
        (tools[0].visibility(), tools[0].min_role()),
        (Visibility::Discoverable, Role::Admin)
    );
    assert!(tools[0].description().contains("weather.today"));
    assert_eq!(
        tools[0].parameters()["properties"]["args"]["type"],
        "object"
    );

    let none = plugin_api_tools(host.clone(), &[]).await.unwrap();
    assert!(none.is_empty());
    assert_eq!(
        host.calls(),
        [HostCall::ListApis],
        "an empty allowlist does not ask the host"
    );
}

#[tokio::test]
async fn mai_agents_own_apis_never_become_tools_even_when_allowlisted() {
    let own = [
        api("mai-agent", "tasks.create"),
        api("MAI_AGENT", "status"),
        api("bridge", "mai_agent.cancel"),
        api("bridge", "mai-agent.cancel"),
        api("bridge", "subagent_create"),
        api("bridge", "planner.subagent_modify"),
    ];
    let names: Vec<&str> = own.iter().map(|a| a.name.as_str()).collect();
    let host = FakeHost::with_apis(own.to_vec());
    let tools = plugin_api_tools(host, &allow(&names)).await.unwrap();
    assert!(tools.is_empty(), "{tools:?}");
}

#[tokio::test]
async fn a_user_task_calling_call_tools_is_refused_before_the_host() {
    let host = FakeHost::with_apis(vec![api("weather", "weather.today")]);
    let registry = registry(
        plugin_api_tools(host.clone(), &allow(&["weather.today"]))
            .await
            .unwrap(),
    );
    assert!(
        !registry
            .names(Role::User)
            .iter()
            .any(|n| n.starts_with("call_"))
    );
    for role in [Role::User, Role::Guest] {
        let ctx = ctx_with(role, admin_config(&["weather.today"]));
        let outcome = call(
            &registry,
            &ctx,
            "call_weather_today",
            json!({"args": {"city": "Paris"}}),
        )
        .await;
        assert_eq!(outcome.kind, OutcomeKind::PermissionDenied, "{role}");
    }
    assert_eq!(host.calls(), [HostCall::ListApis], "call_api never ran");
}

#[tokio::test]
async fn an_admin_call_passes_args_and_stops_once_removed_from_the_allowlist() {
    let host = FakeHost::with_apis(vec![api("weather", "weather.today")]);
    let registry = registry(
        plugin_api_tools(host.clone(), &allow(&["weather.today"]))
            .await
            .unwrap(),
    );
    let admin = ctx_with(Role::Admin, admin_config(&["weather.today"]));
    let outcome = call(
        &registry,
        &admin,
        "call_weather_today",
        json!({"args": {"city": "Paris"}}),
    )
    .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.value["result"]["echo"], json!({"city": "Paris"}));
    let outcome = call(&registry, &admin, "call_weather_today", json!({})).await;
    assert!(outcome.is_ok(), "args may be left out: {outcome:?}");
    let outcome = call(
        &registry,
        &admin,
        "call_weather_today",
        json!({"city": "Paris"}),
    )
    .await;
    assert_eq!(outcome.kind, OutcomeKind::InvalidArguments);

    let reloaded = ctx_with(Role::Admin, admin_config(&[]));
    let outcome = call(
        &registry,
        &reloaded,
        "call_weather_today",
        json!({"args": {}}),
    )
    .await;
    assert!(
        error_of(&outcome).contains("no longer in [plugin_api] allowlist"),
        "{outcome:?}"
    );
    assert_eq!(
        host.calls(),
        [
            HostCall::ListApis,
            HostCall::CallApi("weather.today".into(), json!({"city": "Paris"})),
            HostCall::CallApi("weather.today".into(), json!({})),
        ]
    );
}

#[tokio::test]
async fn names_are_mapped_and_unusable_or_colliding_ones_skipped() {
    assert_eq!(tool_name("weather.today"), "call_weather_today");
    assert_eq!(tool_name("a b/c-d"), "call_a_b_c-d");
    let long = "x".repeat(70);
    let apis = vec![
        api("p", &long),
        api("p", "x.y"),
        api("p", "x_y"),
        api("p", "天气.today"),
    ];
    let names: Vec<&str> = apis.iter().map(|a| a.name.as_str()).collect();
    let host = FakeHost::with_apis(apis.clone());
    let tools = plugin_api_tools(host, &allow(&names)).await.unwrap();
    let tool_names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(tool_names, ["call_x_y", "call____today"]);
}
