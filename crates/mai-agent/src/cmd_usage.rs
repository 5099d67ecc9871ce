//! `mai-agent usage [--by owner|requester|stream|model|purpose|day|task] [--since T] [--until T]
//! [--json]`: what the model calls cost, summed from the local store as the machine's admin —
//! no running `serve` needed (docs/usage.md). `--json` always has a `total` object.

use anyhow::Result;
use mai_core::usage::{UsageGroup, UsageQuery, UsageTotals};
use mai_engine::{Engine, usage_json};
use serde_json::json;

use crate::cmd_task::operator;

/// The arguments of `mai-agent usage`.
#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// One row per owner, requester, stream, model, purpose, day or task.
    #[arg(long, value_name = "GROUP")]
    by: Option<String>,
    /// From this time on: RFC 3339, a date (the start of that day in [task] timezone) or
    /// `today`. Default: all time.
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Before this time (same forms).
    #[arg(long, value_name = "T")]
    until: Option<String>,
    /// One JSON object: `groups` and `total`.
    #[arg(long)]
    json: bool,
}

pub async fn run(engine: &Engine, args: UsageArgs) -> Result<()> {
    let group_by = args
        .by
        .as_deref()
        .map(UsageGroup::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--by: {e}"))?;
    let time = |flag: &str, value: Option<&str>| {
        value
            .map(|v| engine.parse_usage_time(v))
            .transpose()
            .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
    };
    let query = UsageQuery {
        since: time("--since", args.since.as_deref())?,
        until: time("--until", args.until.as_deref())?,
        group_by,
        ..UsageQuery::default()
    };
    let (groups, total) = engine.usage(&operator()?, query.clone()).await?;
    let currency = engine.currency();
    if args.json {
        let value = json!({
            "group_by": group_by.map(UsageGroup::as_str),
            "since": query.since,
            "until": query.until,
            "groups": groups.iter().map(|g| usage_json(g, &currency)).collect::<Vec<_>>(),
            "total": usage_json(&total, &currency),
        });
        println!("{value}");
        return Ok(());
    }
    let heading = group_by.map_or("", UsageGroup::as_str);
    println!(
        "{heading:<32} {:>12} {:>12} {:>12} {:>7} {:>12}",
        "prompt",
        "cached",
        "completion",
        "calls",
        format!("cost {currency}")
    );
    for group in &groups {
        print_row(group.key.as_deref().unwrap_or("(none)"), group);
    }
    print_row("total", &total);
    if total.estimated_calls > 0 {
        println!(
            "({} call(s) estimated: the provider sent no usage for them)",
            total.estimated_calls
        );
    }
    Ok(())
}

fn print_row(key: &str, totals: &UsageTotals) {
    println!(
        "{key:<32} {:>12} {:>12} {:>12} {:>7} {:>12.4}",
        totals.prompt_tokens,
        totals.cached_tokens,
        totals.completion_tokens,
        totals.calls,
        totals.cost
    );
}
