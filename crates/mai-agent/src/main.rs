//! The `mai-agent` command line: parses arguments, loads settings, wires the engine and runs one
//! command. Exit codes: 0 success, 1 the task did not complete, 2 usage or setup error.

mod app;
mod cmd_backup;
mod cmd_config;
mod cmd_mcp;
mod cmd_run;
mod cmd_serve;
mod cmd_storage;
mod cmd_task;
mod cmd_tools;
mod cmd_usage;
mod console;
mod data_dir;
mod instance;
mod preflight;
mod reload;
mod remote;
mod retention;
mod settings;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use mai_core::role::Role;

use crate::app::ModelChoice;
use crate::settings::Settings;

/// mai-agent runs background LLM sub-agent tasks for chat bots.
#[derive(Debug, Parser)]
#[command(name = "mai-agent", version, about, long_about = None)]
struct Cli {
    /// TOML config file (default: <data-dir>/config.toml if present, else built-in defaults).
    #[arg(long, global = true, env = "MAI_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// Where the database and files live (default: $XDG_DATA_HOME/mai-agent, else
    /// ~/.local/share/mai-agent).
    #[arg(long, global = true, env = "MAI_AGENT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service: HTTP API, MCP server at /mcp, chat channels, scheduler (Ctrl-C stops).
    Serve {
        /// Address to listen on (default: [server].listen, 127.0.0.1:8760).
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// Show which tools each role may call (the tool list an agent task gets every round).
    Tools {
        /// Only this role: guest, user or admin (default: the role × tool matrix).
        #[arg(long)]
        role: Option<Role>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Run one agent task in the foreground, with live progress; questions are asked here.
    Run {
        /// What the agent should do.
        #[arg(required_unless_present = "resume")]
        intent: Option<String>,
        /// Continue an existing task in the foreground instead (id, id prefix of at least 4
        /// characters, or title), e.g. after a crash.
        #[arg(long, value_name = "TASK", conflicts_with = "intent")]
        resume: Option<String>,
        /// The role the task runs with.
        #[arg(long, default_value = "user")]
        role: Role,
        /// The console chat the task belongs to (its replies and questions go there).
        #[arg(long, default_value = crate::console::CONSOLE_USER)]
        stream: String,
        /// Print `{"task_id", "status", "answer", "rounds"}` as the last stdout line.
        #[arg(long)]
        json: bool,
        /// Replay model answers from a JSONL cassette instead of calling the API.
        #[arg(long, value_name = "FILE")]
        replay: Option<PathBuf>,
    },
    /// Inspect and manage tasks in the local store; cancel, ask and inject reach a running
    /// `serve` on the same data dir.
    Task {
        #[command(subcommand)]
        command: cmd_task::TaskCommand,
        /// Machine-readable output.
        #[arg(long, global = true)]
        json: bool,
    },
    /// What the model calls cost: tokens, calls and cost from the local store (no `serve`
    /// needed), optionally grouped; a table, or `--json` with a `total` object.
    Usage(cmd_usage::UsageArgs),
    /// Serve the planner tools over MCP on stdin/stdout (for an MCP host that starts mai-agent);
    /// runs the engine until the host closes stdin. Logs go to stderr.
    Mcp,
    /// Write a consistent copy of the database to FILE (a new SQLite file, mode 0600); works
    /// while `serve` runs. Restore steps: docs/backup.md.
    Backup {
        /// Where the copy goes; must not exist yet.
        file: PathBuf,
    },
    /// Storage helpers: `storage migrate --to postgres://…` copies the SQLite store into an
    /// empty PostgreSQL database (docs/scale-out.md).
    Storage {
        #[command(subcommand)]
        command: cmd_storage::StorageCommand,
    },
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        command: cmd_config::ConfigCommand,
    },
}

/// mimalloc: the task store's writes and the model client allocate many short-lived buffers
/// across threads, where glibc's allocator spent ~15 % of the CPU in the throughput benchmark.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `mai-agent sandbox-exec …`: the built-in launcher `run_command` re-executes (hidden).
    if let Some(code) = mai_tools::shell::sandbox_exec_mode() {
        return code;
    }
    let cli = Cli::parse();
    // A service reports what it does; one-shot commands only warn.
    let default_filter = match cli.command {
        Command::Serve { .. } => {
            "warn,mai_agent=info,mai_server=info,mai_engine=info,mai_mcp=info,mai_host=info"
        }
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MAI_AGENT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    };
    // Everything that matters has finished inside `run`. What is left may be a blocking read of
    // the terminal (the console chat) that no shutdown can interrupt: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    code
}

async fn run(cli: Cli) -> Result<ExitCode> {
    if let Command::Config { command } = &cli.command {
        return cmd_config::run(command, cli.config.as_deref(), cli.data_dir.as_deref()).await;
    }
    let settings = Settings::load(cli.config.as_deref(), cli.data_dir.as_deref())?;
    if matches!(cli.command, Command::Run { .. } | Command::Mcp) {
        // The engine runs here: refuse what `serve` would refuse, say what it would warn.
        for warning in preflight::check(&settings)?.warnings {
            eprintln!("warning: {warning}");
        }
        let replayed = matches!(
            &cli.command,
            Command::Run {
                replay: Some(_),
                ..
            }
        );
        if !replayed && !preflight::has_api_key(&settings.config.llm) {
            eprintln!("{}", preflight::NO_API_KEY);
        }
    }
    match cli.command {
        Command::Serve { listen } => {
            cmd_serve::serve(settings, cmd_serve::ServeArgs { listen }).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools { role, json } => tools(&settings, role, json).await,
        Command::Run {
            intent,
            resume,
            role,
            stream,
            json,
            replay,
        } => {
            let what = match (intent, resume) {
                (_, Some(reference)) => cmd_run::RunWhat::Resume(reference),
                (Some(intent), None) => cmd_run::RunWhat::Intent(intent),
                (None, None) => anyhow::bail!("give an intent or --resume TASK"),
            };
            let args = cmd_run::RunArgs {
                what,
                role,
                stream,
                json,
            };
            run_foreground(settings, args, replay.as_deref()).await
        }
        Command::Task { command, json } => {
            let app = app::build(&settings, ModelChoice::Configured).await?;
            cmd_task::run(app.engine, &settings, command, json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Usage(args) => {
            let app = app::build(&settings, ModelChoice::Configured).await?;
            cmd_usage::run(&app.engine, args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp => {
            cmd_mcp::run(&settings).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Backup { file } => {
            cmd_backup::run(&settings, &file).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Storage { command } => {
            cmd_storage::run(&settings, &command).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config { .. } => Ok(ExitCode::SUCCESS),
    }
}

/// `mai-agent tools`: the tool list, then how each MCP server fared and which config was read.
async fn tools(settings: &Settings, role: Option<Role>, json: bool) -> Result<ExitCode> {
    let app = app::build(settings, ModelChoice::Configured).await?;
    cmd_tools::print(&app.engine, role, json)?;
    if let Some(mcp) = &app.mcp {
        for server in mcp.status() {
            let error = server.last_error.as_deref().unwrap_or("");
            eprintln!(
                "(MCP server {}: {:?}, {} tools) {error}",
                server.name, server.state, server.tool_count
            );
        }
        mcp.shutdown();
    }
    if !json {
        match &settings.config_path {
            Some(path) => eprintln!("(config: {})", path.display()),
            None => eprintln!("(config: built-in defaults; see docs/configuration.md)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `mai-agent run`: one task in the foreground, the person at the terminal holding `args.role`;
/// exit code 1 when the task did not complete.
async fn run_foreground(
    mut settings: Settings,
    args: cmd_run::RunArgs,
    replay: Option<&std::path::Path>,
) -> Result<ExitCode> {
    let _lock = instance::InstanceLock::acquire(&settings.data_dir, "run")?;
    grant_console_role(&mut settings, args.role);
    let model = match replay {
        Some(path) => ModelChoice::Replay(path),
        None => ModelChoice::Configured,
    };
    let app = app::build(&settings, model).await?;
    let completed = cmd_run::run(app, args).await?;
    Ok(if completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `run --role R` gives the person at the terminal role R through the normal permission rules,
/// so the task's role is resolved exactly like a chat user's.
fn grant_console_role(settings: &mut Settings, role: Role) {
    let me = format!("{}:{}", console::CONSOLE_PLATFORM, console::CONSOLE_USER);
    let permission = &mut settings.config.permission;
    permission.admins.retain(|p| p != &me);
    permission.users.retain(|p| p != &me);
    match role {
        Role::Admin => permission.admins.push(me),
        Role::User => permission.users.push(me),
        Role::Guest => {}
    }
}
