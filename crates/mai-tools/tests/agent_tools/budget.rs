//! What the tools cost in every request. Prints each tool's schema tokens (run with
//! `--nocapture`) and keeps each under a ceiling so descriptions stay short.

use std::sync::Arc;

use mai_core::host::PluginApi;
use mai_core::tool::ToolDefinition;
use mai_tools::budget::schema_tokens;
use mai_tools::info::info_tools;
use mai_tools::plugin_api::plugin_api_tools;
use mai_tools::send_message::send_message_tool;
use mai_tools::tasks::task_tools;

use crate::fakes::{FakeControl, FakeHost, FakeMessenger};

/// No tool of these modules may cost more than this many cl100k tokens.
const CEILING: usize = 250;

async fn all_tools() -> Vec<ToolDefinition> {
    let host = FakeHost::with_apis(vec![PluginApi {
        name: "weather.today".into(),
        description: "Today's weather for a city.".into(),
        plugin: "weather".into(),
    }]);
    let mut tools = task_tools(Arc::new(FakeControl::default())).unwrap();
    tools.extend(info_tools(host.clone()).unwrap());
    tools.push(send_message_tool(host.clone(), Arc::new(FakeMessenger::default())).unwrap());
    tools.extend(
        plugin_api_tools(host, &["weather.today".to_owned()])
            .await
            .unwrap(),
    );
    tools
}

#[tokio::test]
async fn every_tool_stays_under_the_token_ceiling() {
    let tools = all_tools().await;
    let mut total = 0;
    for tool in &tools {
        let tokens = schema_tokens(&[tool.spec()]);
        println!("{:>4}  {}  {}", tokens, tool.name(), tool.parameters());
        assert!(tokens <= CEILING, "{} costs {tokens} tokens", tool.name());
        total += tokens;
    }
    let together = schema_tokens(&tools.iter().map(ToolDefinition::spec).collect::<Vec<_>>());
    println!(
        "{together:>4}  all {} together (sum alone {total})",
        tools.len()
    );
    assert!(together <= total);
}
