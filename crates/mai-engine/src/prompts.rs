//! Prompt templates: every text mai-agent sends to a model (or slips into a chat's invisible
//! context) is a minijinja template in `crates/mai-engine/prompts/*.j2`.
//!
//! Owns loading (embedded at compile time, optionally replaced file by file from an override
//! directory), validation (syntax, variables) and strict rendering. Must not hold prompt text in
//! code, and must not decide *when* a prompt is used — that belongs to the agent loop, the reply
//! path and the planner board.
//!
//! Rendering is strict: a variable the template uses but the caller did not provide is an error
//! naming it, never an empty string. Output is plain text (no HTML escaping); blocks are trimmed
//! (`trim_blocks`, `lstrip_blocks`) so templates can be laid out readably.

use std::fmt;
use std::path::{Path, PathBuf};

use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value};
use serde::Serialize;

/// The prompt templates. Each variant lists the variables its template expects; all of them must
/// be present when rendering (lists may be empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PromptName {
    /// System prompt of the agent loop. `intent`: the task; `role`: the role the task runs with
    /// (guest/user/admin); `platform`; `stream_id`: the task's chat; `now`: current time as text;
    /// `max_rounds`: the round budget.
    AgentSystem,
    /// System prompt of an in-process sub-agent (`ask_subagent`). `intent`; `max_rounds`.
    SubagentSystem,
    /// Asks for a task title of at most 8 words in the intent's language. `intent`.
    Title,
    /// Rewrites machine output into a chat reply in the bot's persona. `text`: the output;
    /// `bot_name`; `personality`; `reply_style`; `recent_messages`: list of `{sender, text}`;
    /// `jargon`: list of `{term, meaning}`; `use_jargon`: bool.
    Polish,
    /// User-role message carrying an injected instruction into a running loop. `instruction`;
    /// `source`: who sent it (e.g. "the owner", "the planner").
    Injection,
    /// Asks the model, with no tools left, for an honest final answer. `max_rounds`.
    MaxRoundsReached,
    /// Tool result of `ask_user` when nobody answered in time. `minutes`; `question`.
    AskUserTimeout,
    /// Invisible note in the stream's context: a task waits for the user. `short_id`: the
    /// 8-character id; `title`; `question`.
    NoteWaiting,
    /// Invisible note in the target stream's context explaining a cross-stream reply. `title`;
    /// `origin_stream`: where the task was started; `summary`: why it posted here.
    NoteCrossStream,
    /// Planner board, once per session: what background sub-agents can do. No variables.
    PlannerBoardIntro,
    /// Planner board: this stream's tasks waiting for the user, oldest first. `tasks`: list of
    /// `{short_id, title, question, waiting_since}`.
    PlannerBoardWaiting,
    /// Appended to a model reply that asked for more tool calls than a round runs. `total`: how
    /// many it asked for; `kept`: how many run; `dropped`: how many were dropped.
    ToolCallsDropped,
    /// Replaces a tool call's arguments that are over the size limit. `size`, `limit`: bytes.
    ArgumentsDropped,
    /// Stands for an empty final answer. No variables.
    NoAnswer,
    /// A sub-agent's answer when it used all its rounds. `max_rounds`; `last_text`: what it
    /// last wrote.
    SubagentOutOfRounds,
    /// The result of a tool call that repeats an earlier one exactly (the loop guard). `tool`;
    /// `times`: this call's count; `fail_after`: the count that fails the task (0 = never).
    RepeatedCall,
}

impl PromptName {
    /// Every template, in declaration order.
    pub const ALL: [PromptName; 16] = [
        PromptName::AgentSystem,
        PromptName::SubagentSystem,
        PromptName::Title,
        PromptName::Polish,
        PromptName::Injection,
        PromptName::MaxRoundsReached,
        PromptName::AskUserTimeout,
        PromptName::NoteWaiting,
        PromptName::NoteCrossStream,
        PromptName::PlannerBoardIntro,
        PromptName::PlannerBoardWaiting,
        PromptName::ToolCallsDropped,
        PromptName::ArgumentsDropped,
        PromptName::NoAnswer,
        PromptName::SubagentOutOfRounds,
        PromptName::RepeatedCall,
    ];

    /// The template's file name, in `prompts/` and in an override directory.
    pub fn file_name(self) -> &'static str {
        match self {
            PromptName::AgentSystem => "agent_system.j2",
            PromptName::SubagentSystem => "subagent_system.j2",
            PromptName::Title => "title.j2",
            PromptName::Polish => "polish.j2",
            PromptName::Injection => "injection.j2",
            PromptName::MaxRoundsReached => "max_rounds_reached.j2",
            PromptName::AskUserTimeout => "ask_user_timeout.j2",
            PromptName::NoteWaiting => "note_waiting.j2",
            PromptName::NoteCrossStream => "note_cross_stream.j2",
            PromptName::PlannerBoardIntro => "planner_board_intro.j2",
            PromptName::PlannerBoardWaiting => "planner_board_waiting.j2",
            PromptName::ToolCallsDropped => "tool_calls_dropped.j2",
            PromptName::ArgumentsDropped => "arguments_dropped.j2",
            PromptName::NoAnswer => "no_answer.j2",
            PromptName::SubagentOutOfRounds => "subagent_out_of_rounds.j2",
            PromptName::RepeatedCall => "repeated_call.j2",
        }
    }

    /// The top-level variables the template is rendered with.
    pub fn variables(self) -> &'static [&'static str] {
        match self {
            PromptName::AgentSystem => &[
                "intent",
                "role",
                "platform",
                "stream_id",
                "now",
                "max_rounds",
            ],
            PromptName::SubagentSystem => &["intent", "max_rounds"],
            PromptName::Title => &["intent"],
            PromptName::Polish => &[
                "text",
                "bot_name",
                "personality",
                "reply_style",
                "recent_messages",
                "jargon",
                "use_jargon",
            ],
            PromptName::Injection => &["instruction", "source"],
            PromptName::MaxRoundsReached => &["max_rounds"],
            PromptName::AskUserTimeout => &["minutes", "question"],
            PromptName::NoteWaiting => &["short_id", "title", "question"],
            PromptName::NoteCrossStream => &["title", "origin_stream", "summary"],
            PromptName::PlannerBoardIntro => &[],
            PromptName::PlannerBoardWaiting => &["tasks"],
            PromptName::ToolCallsDropped => &["total", "kept", "dropped"],
            PromptName::ArgumentsDropped => &["size", "limit"],
            PromptName::NoAnswer => &[],
            PromptName::SubagentOutOfRounds => &["max_rounds", "last_text"],
            PromptName::RepeatedCall => &["tool", "times", "fail_after"],
        }
    }

    /// The template shipped with the binary.
    fn embedded_source(self) -> &'static str {
        match self {
            PromptName::AgentSystem => include_str!("../prompts/agent_system.j2"),
            PromptName::SubagentSystem => include_str!("../prompts/subagent_system.j2"),
            PromptName::Title => include_str!("../prompts/title.j2"),
            PromptName::Polish => include_str!("../prompts/polish.j2"),
            PromptName::Injection => include_str!("../prompts/injection.j2"),
            PromptName::MaxRoundsReached => include_str!("../prompts/max_rounds_reached.j2"),
            PromptName::AskUserTimeout => include_str!("../prompts/ask_user_timeout.j2"),
            PromptName::NoteWaiting => include_str!("../prompts/note_waiting.j2"),
            PromptName::NoteCrossStream => include_str!("../prompts/note_cross_stream.j2"),
            PromptName::PlannerBoardIntro => include_str!("../prompts/planner_board_intro.j2"),
            PromptName::PlannerBoardWaiting => {
                include_str!("../prompts/planner_board_waiting.j2")
            }
            PromptName::ToolCallsDropped => include_str!("../prompts/tool_calls_dropped.j2"),
            PromptName::ArgumentsDropped => include_str!("../prompts/arguments_dropped.j2"),
            PromptName::NoAnswer => include_str!("../prompts/no_answer.j2"),
            PromptName::SubagentOutOfRounds => {
                include_str!("../prompts/subagent_out_of_rounds.j2")
            }
            PromptName::RepeatedCall => include_str!("../prompts/repeated_call.j2"),
        }
    }

    fn from_file_name(file_name: &str) -> Option<PromptName> {
        PromptName::ALL
            .into_iter()
            .find(|name| name.file_name() == file_name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for PromptName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_name())
    }
}

/// What went wrong loading or rendering a prompt. Messages name the file or variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("cannot read the prompt override directory {}: {source}", dir.display())]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the prompt override {}: {source}", file.display())]
    ReadFile {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "unknown prompt override {}: the override directory may only contain {known}",
        file.display()
    )]
    UnknownTemplate { file: PathBuf, known: String },
    #[error(
        "prompt template {} does not parse{}: {message}",
        file.display(),
        line.map(|line| format!(" (line {line})")).unwrap_or_default()
    )]
    Parse {
        file: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error(
        "prompt override {} uses the unknown variable `{variable}`; {name} is rendered with: {known}",
        file.display()
    )]
    UnknownVariable {
        file: PathBuf,
        name: PromptName,
        variable: String,
        known: String,
    },
    #[error("rendering prompt {name}: the variable `{variable}` is missing")]
    MissingVariable { name: PromptName, variable: String },
    #[error("rendering prompt {name} failed: {message}")]
    Render { name: PromptName, message: String },
}

/// The loaded prompt templates, ready to render. Cheap to share behind an `Arc`; build a new one
/// to pick up changed override files.
pub struct Prompts {
    env: Environment<'static>,
    /// Per template (by [`PromptName::index`]): the top-level variables it actually uses, which
    /// `render` checks up front so a missing one is reported by name.
    used_variables: Vec<Vec<String>>,
}

impl fmt::Debug for Prompts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prompts").finish_non_exhaustive()
    }
}

impl Prompts {
    /// The templates shipped with the binary.
    pub fn embedded() -> Prompts {
        let mut prompts = Prompts {
            env: new_environment(),
            used_variables: vec![Vec::new(); PromptName::ALL.len()],
        };
        for name in PromptName::ALL {
            // The embedded templates are parsed by this module's tests, so this cannot fail in a
            // released build; if it ever did, `render` of that template would report it as not
            // found instead of the process panicking.
            let _ = prompts.load(name, name.embedded_source().into());
        }
        prompts
    }

    /// The embedded templates, each replaced by the file of the same name in `dir` if present.
    ///
    /// Fails if the directory cannot be read, holds a file that is not a template name (hidden
    /// files such as editor swap files are ignored), or an override does not parse or uses a
    /// variable its template is not rendered with.
    pub fn with_override_dir(dir: impl AsRef<Path>) -> Result<Prompts, PromptError> {
        let dir = dir.as_ref();
        let read_dir_error = |source| PromptError::ReadDir {
            dir: dir.to_path_buf(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
            let path = entry.map_err(read_dir_error)?.path();
            let file_name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !file_name.starts_with('.') {
                files.push((file_name, path));
            }
        }
        files.sort();

        let mut prompts = Prompts::embedded();
        for (file_name, path) in files {
            let Some(name) = PromptName::from_file_name(&file_name).filter(|_| path.is_file())
            else {
                return Err(PromptError::UnknownTemplate {
                    file: path,
                    known: known_file_names(),
                });
            };
            let source =
                std::fs::read_to_string(&path).map_err(|source| PromptError::ReadFile {
                    file: path.clone(),
                    source,
                })?;
            prompts
                .load(name, source)
                .map_err(|err| PromptError::Parse {
                    file: path.clone(),
                    line: err.line(),
                    message: err.detail().unwrap_or(&err.to_string()).to_owned(),
                })?;
            if let Some(variable) = prompts.used_variables[name.index()]
                .iter()
                .find(|used| !name.variables().contains(&used.as_str()))
            {
                return Err(PromptError::UnknownVariable {
                    file: path,
                    name,
                    variable: variable.clone(),
                    known: name.variables().join(", "),
                });
            }
        }
        Ok(prompts)
    }

    /// Renders `name` with `vars` (a struct or map with the variables listed on the variant).
    /// The result is trimmed of leading and trailing whitespace.
    pub fn render(&self, name: PromptName, vars: &impl Serialize) -> Result<String, PromptError> {
        let template = self
            .env
            .get_template(name.file_name())
            .map_err(|err| render_error(name, &err))?;
        let context = Value::from(Serde(vars));
        for variable in &self.used_variables[name.index()] {
            let present = context
                .get_attr(variable)
                .is_ok_and(|value| !value.is_undefined());
            if !present {
                return Err(PromptError::MissingVariable {
                    name,
                    variable: variable.clone(),
                });
            }
        }
        let rendered = template
            .render(context)
            .map_err(|err| render_error(name, &err))?;
        Ok(rendered.trim().to_owned())
    }

    /// Compiles `source` as template `name`, replacing any previous one.
    fn load(&mut self, name: PromptName, source: String) -> Result<(), minijinja::Error> {
        self.env.add_template_owned(name.file_name(), source)?;
        let template = self.env.get_template(name.file_name())?;
        let mut used: Vec<String> = template
            .undeclared_variables(false)
            .into_iter()
            .filter(|variable| self.env.globals().all(|(global, _)| global != variable))
            .collect();
        used.sort();
        self.used_variables[name.index()] = used;
        Ok(())
    }
}

fn new_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // minijinja keeps debug info only in debug builds by default; a release build must name
    // the missing field too (an operator's overridden template is debugged from that message).
    env.set_debug(true);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build();
    // The default delimiters always build; keep minijinja's defaults should that ever change.
    if let Ok(syntax) = syntax {
        env.set_syntax(syntax);
    }
    env
}

fn known_file_names() -> String {
    PromptName::ALL.map(PromptName::file_name).join(", ")
}

fn render_error(name: PromptName, err: &minijinja::Error) -> PromptError {
    // The detail carries minijinja's description of the failing expression, e.g. "`m.sender` is
    // undefined".
    let message = match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.to_string(),
    };
    PromptError::Render {
        name,
        message: match err.line() {
            Some(line) => format!("{message} (line {line})"),
            None => message,
        },
    }
}

#[cfg(test)]
mod tests;
