//! What a tool does beyond answering the model: its effects, set where the tool is built, so
//! filters (which tools a sub-agent gets, which tools a config switch governs, what the planner
//! may expose) decide by what a tool does instead of by lists of names.
//!
//! Owns the effect vocabulary and the set type. Must not decide any filter itself: each filter
//! names the effects it refuses where it is applied. A set is one machine word, so reading it
//! every round costs nothing.

use std::fmt;

/// One thing a tool can do to the world outside the model's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    /// Reaches a person: sends a message or asks a question (`send_message`, `ask_user`).
    ContactsPeople,
    /// Lists, creates, steers or cancels tasks (`list_my_tasks`, `create_subtask`, …).
    ManagesTasks,
    /// Runs further agents inside the call (`ask_subagent`, `ask_subagents`).
    NestsAgents,
    /// Runs a shell command on the machine (`run_command`).
    RunsCommands,
    /// Calls a host plugin's API with admin rights (`call_*`).
    CallsPluginApis,
    /// Calls a tool of an external MCP server (`mcp_*`, the planner's MCP proxy tools).
    CallsMcp,
    /// Reads the chats, memory and people the host knows (`search_memory`, `search_users`, …).
    ReadsChats,
    /// Reads files (`read`).
    ReadsFiles,
    /// Writes files (`write`).
    WritesFiles,
    /// Fetches pages from the web (`fetch`).
    FetchesWeb,
}

impl Effect {
    /// Every effect, in declaration order.
    pub const ALL: [Effect; 10] = [
        Effect::ContactsPeople,
        Effect::ManagesTasks,
        Effect::NestsAgents,
        Effect::RunsCommands,
        Effect::CallsPluginApis,
        Effect::CallsMcp,
        Effect::ReadsChats,
        Effect::ReadsFiles,
        Effect::WritesFiles,
        Effect::FetchesWeb,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Effect::ContactsPeople => "contacts_people",
            Effect::ManagesTasks => "manages_tasks",
            Effect::NestsAgents => "nests_agents",
            Effect::RunsCommands => "runs_commands",
            Effect::CallsPluginApis => "calls_plugin_apis",
            Effect::CallsMcp => "calls_mcp",
            Effect::ReadsChats => "reads_chats",
            Effect::ReadsFiles => "reads_files",
            Effect::WritesFiles => "writes_files",
            Effect::FetchesWeb => "fetches_web",
        }
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`Effect`]s (a bitset: `Copy`, compared in one instruction).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Effects(u16);

impl Effects {
    /// No effect: the tool only reads what the model gave it or answers from the engine.
    pub const NONE: Effects = Effects(0);

    /// The set of `effects`; usable in constants.
    pub const fn of(effects: &[Effect]) -> Effects {
        let mut bits = 0;
        let mut i = 0;
        while i < effects.len() {
            bits |= effects[i].bit();
            i += 1;
        }
        Effects(bits)
    }

    pub const fn contains(self, effect: Effect) -> bool {
        self.0 & effect.bit() != 0
    }

    /// Whether the two sets share an effect.
    pub const fn intersects(self, other: Effects) -> bool {
        self.0 & other.0 != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The effects in the set, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Effect> {
        Effect::ALL.into_iter().filter(move |e| self.contains(*e))
    }
}

impl From<Effect> for Effects {
    fn from(effect: Effect) -> Self {
        Effects(effect.bit())
    }
}

impl fmt::Debug for Effects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_holds_exactly_the_effects_it_was_made_of() {
        let set = Effects::of(&[Effect::ContactsPeople, Effect::FetchesWeb]);
        for effect in Effect::ALL {
            let expected = matches!(effect, Effect::ContactsPeople | Effect::FetchesWeb);
            assert_eq!(set.contains(effect), expected, "{effect}");
        }
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Effect::ContactsPeople, Effect::FetchesWeb]
        );
        assert!(Effects::NONE.is_empty() && !set.is_empty());
    }

    #[test]
    fn sets_intersect_only_when_they_share_an_effect() {
        let refused = Effects::of(&[Effect::RunsCommands, Effect::NestsAgents]);
        assert!(refused.intersects(Effect::NestsAgents.into()));
        assert!(!refused.intersects(Effects::of(&[Effect::ReadsFiles, Effect::CallsMcp])));
        assert!(!refused.intersects(Effects::NONE));
    }

    #[test]
    fn every_effect_has_its_own_bit() {
        let all = Effects::of(&Effect::ALL);
        assert_eq!(all.iter().count(), Effect::ALL.len());
    }
}
