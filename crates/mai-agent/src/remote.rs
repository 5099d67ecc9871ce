//! Where the CLI's task changes (`task ask|cancel|inject`) go. With no engine running on the
//! data directory they act on the store, as they always did. With a `serve` running they are
//! sent to its HTTP API — the address its lock file names, the bearer token of `[server]
//! auth_token` — because that engine owns its live tasks: it holds the waiting questions, the
//! running rounds and the schedule in memory, so a change written to the store behind its back
//! would be overwritten or never seen (docs/design.md, "One service per data directory"). With
//! `run` or `mcp` running (no HTTP API) a change is refused, naming the process, never silently
//! dropped.
//!
//! Must not: change a task through the store while an engine runs on it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result};
use mai_core::task::TaskRecord;
use serde_json::{Value, json};

use crate::cmd_task::TaskCommand;
use crate::instance::{self, Holder};
use crate::settings::Settings;

/// How long one request to the running service may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Where a task change goes.
pub enum Target {
    /// No engine runs on the data directory: change the store.
    Store,
    /// A `serve` runs: send the change to its API.
    Serve(Remote),
}

/// Decides where a change of a task goes; refuses when an engine without an API (`run`,
/// `mcp`) owns the data directory.
pub fn target(settings: &Settings) -> Result<Target> {
    let Some(holder) = instance::holder(&settings.data_dir)? else {
        return Ok(Target::Store);
    };
    match holder.api {
        Some(api) => Ok(Target::Serve(Remote::new(settings, holder.clone(), api)?)),
        None => anyhow::bail!(
            "{} runs the engine on {} and has no HTTP API to send this change to: answer or \
             stop the task there, or stop it and run this command again",
            holder.describe(),
            settings.data_dir.display()
        ),
    }
}

/// Where `command` goes: reads always to the store (they run beside any engine), changes by
/// [`target`].
pub fn target_of(settings: &Settings, command: &TaskCommand) -> Result<Target> {
    match command {
        TaskCommand::Cancel { .. } | TaskCommand::Ask { .. } | TaskCommand::Inject { .. } => {
            target(settings)
        }
        TaskCommand::List { .. } | TaskCommand::Status { .. } | TaskCommand::History { .. } => {
            Ok(Target::Store)
        }
    }
}

/// A running `serve`, reached through its HTTP API.
pub struct Remote {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
    holder: Holder,
}

/// What the service did with a change.
pub struct Changed {
    pub task: TaskRecord,
    /// `cancel`: the task was running and stops at its next step. `inject`: it was waiting,
    /// and the instruction answered its question.
    pub flag: bool,
}

impl Remote {
    fn new(settings: &Settings, holder: Holder, api: SocketAddr) -> Result<Remote> {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .no_proxy()
            .build()
            .context("cannot set up the HTTP client")?;
        Ok(Remote {
            client,
            base: format!("http://{}", reachable(api)),
            token: settings
                .config
                .server
                .auth_token
                .clone()
                .filter(|token| !token.is_empty()),
            holder,
        })
    }

    /// Who receives the change ("`mai-agent serve` (pid 1234)").
    pub fn describe(&self) -> String {
        format!("{} at {}", self.holder.describe(), self.base)
    }

    pub async fn cancel(&self, reference: &str) -> Result<Changed> {
        let body = self.post(reference, "cancel", json!({})).await?;
        changed(&body, "stopping")
    }

    pub async fn answer(&self, reference: &str, text: &str) -> Result<Changed> {
        let body = self
            .post(reference, "answer", json!({"text": text}))
            .await?;
        changed(&body, "")
    }

    pub async fn inject(&self, reference: &str, instruction: &str) -> Result<Changed> {
        let body = self
            .post(reference, "inject", json!({"instruction": instruction}))
            .await?;
        changed(&body, "answered")
    }

    /// `POST /v1/tasks/{reference}/{action}`; an error answer becomes an error naming the service.
    async fn post(&self, reference: &str, action: &str, body: Value) -> Result<Value> {
        let mut url = reqwest::Url::parse(&self.base)
            .with_context(|| format!("the lock file names a bad address {}", self.base))?;
        url.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("{} cannot take a path", self.base))?
            .extend(["v1", "tasks", reference, action]);
        let mut request = self.client.post(url).json(&body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.with_context(|| {
            format!(
                "cannot reach the running {}: is it still up? (the change was not made)",
                self.describe()
            )
        })?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        let message = body["error"].as_str().unwrap_or("no reason given");
        let hint = if status == reqwest::StatusCode::UNAUTHORIZED {
            " (this command read [server] auth_token from its own config: give it the same \
             --config as the service)"
        } else {
            ""
        };
        anyhow::bail!(
            "the running {} refused ({status}): {message}{hint}",
            self.describe()
        )
    }
}

fn changed(body: &Value, flag: &str) -> Result<Changed> {
    let mut view = body["task"].clone();
    if let Value::Object(fields) = &mut view {
        fields.remove("short_id");
    }
    let task: TaskRecord = serde_json::from_value(view)
        .context("the running service answered with a task this build cannot read")?;
    Ok(Changed {
        task,
        flag: body[flag].as_bool().unwrap_or(false),
    })
}

/// The address to connect to: a service listening on every interface is reached on loopback.
fn reachable(api: SocketAddr) -> SocketAddr {
    match api.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), api.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), api.port())
        }
        _ => api,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_service_on_every_interface_is_reached_on_loopback() {
        let any: SocketAddr = "0.0.0.0:8760".parse().unwrap();
        assert_eq!(reachable(any), "127.0.0.1:8760".parse().unwrap());
        let any6: SocketAddr = "[::]:8760".parse().unwrap();
        assert_eq!(reachable(any6), "[::1]:8760".parse().unwrap());
        let one: SocketAddr = "192.168.1.5:8760".parse().unwrap();
        assert_eq!(reachable(one), one);
    }
}
