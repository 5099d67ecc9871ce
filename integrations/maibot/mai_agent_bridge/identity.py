"""Who a planner tool call speaks for, and how mai-agent's planner tools look to MaiBot.

Owns: turning mai-agent's tool definitions into MaiBot tool schemas, turning the keyword
arguments MaiBot hands a tool into mai-agent `arguments` plus a host `context`, and the guard
that refuses a call whose conversation id the model wrote itself.

Why this is needed: MaiBot merges the model's tool arguments OVER the identity it injects
(`stream_id`, `chat_id`, `group_id`, `user_id`, `platform`), in one dict. So:
- the conversation comes from `stream_id`, which must equal `chat_id` (MaiBot injects both with
  the same session id; a model that writes only one of them is refused), and the planner's raw
  output (seen in the `maisaka.planner.after_response` hook, whose session id MaiBot sets) is
  checked for a written `stream_id`/`chat_id`/`session_id` that differs from its own session
  ([`CallGuard`]): such a call is refused;
- `platform`, `group_id` and `user_id` are never read from the keyword arguments: they come
  from MaiBot's own record of the session ([`StreamIdentity`]);
- target parameters of mai-agent tools that collide with those names (`send_message`'s
  `stream_id`/`group_id`/`user_id`/`platform`, `search_users`'s `platform`) are offered to the
  model as `target_<name>` and renamed back.

Must not: import MaiBot or do I/O (pure and unit-tested); send anything to mai-agent the model
wrote as an identity key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

TOOL_PREFIX = "mai_"
"""MaiBot tool name = prefix + mai-agent planner tool name (MaiBot has its own `subagent`)."""

IDENTITY_KEYS = ("stream_id", "chat_id", "session_id", "user_id", "group_id", "platform")
"""Keyword arguments that name the conversation or the speaker; MaiBot injects them."""

SESSION_KEYS = ("stream_id", "chat_id", "session_id")
"""The identity keys that name the conversation itself."""

TARGET_PREFIX = "target_"


@dataclass(frozen=True)
class StreamIdentity:
    """What MaiBot knows about a session: the only source of platform, group and speaker."""

    session_id: str
    platform: str = ""
    group_id: str = ""
    user_id: str = ""
    is_group: bool = False

    @classmethod
    def from_stream(cls, stream: dict[str, Any]) -> "StreamIdentity":
        """From a MaiBot stream record (`ctx.chat.get_all_streams` items)."""
        is_group = bool(stream.get("is_group_session")) or bool(stream.get("group_id"))
        return cls(
            session_id=str(stream.get("session_id") or stream.get("stream_id") or ""),
            platform=str(stream.get("platform") or ""),
            group_id=str(stream.get("group_id") or "") if is_group else "",
            user_id="" if is_group else str(stream.get("user_id") or ""),
            is_group=is_group,
        )

    def context(self) -> dict[str, str]:
        """The `context` of `POST /v1/planner/tools/{name}`. In a private chat the speaker is the
        other side of the chat; in a group MaiBot does not say who the planner answers, so the
        plugin's `SpeakerTracker` fills it in when one person alone wrote since the planner's
        last turn — else there is no `user_id` and mai-agent's default role applies."""
        ctx = {"chat_id": self.session_id}
        if self.platform:
            ctx["platform"] = self.platform
        if self.group_id:
            ctx["group_id"] = self.group_id
        if self.user_id:
            ctx["user_id"] = self.user_id
        return ctx


@dataclass(frozen=True)
class PlannerTool:
    """One mai-agent planner tool as MaiBot sees it."""

    name: str
    description: str
    visibility: str
    parameters: dict[str, Any]
    """The MaiBot schema: without the current-conversation `stream_id`, targets renamed."""
    takes_stream_id: bool
    """Whether mai-agent's schema requires `stream_id` = the current conversation."""
    renames: dict[str, str] = field(default_factory=dict)
    """MaiBot parameter name -> mai-agent parameter name."""

    @property
    def maibot_name(self) -> str:
        return TOOL_PREFIX + self.name


def planner_tool(definition: dict[str, Any]) -> PlannerTool:
    """Builds the MaiBot view of one entry of `GET /v1/planner/tools`."""
    schema = dict(definition.get("parameters") or {})
    properties = dict(schema.get("properties") or {})
    required = [str(r) for r in schema.get("required") or []]
    takes_stream_id = "stream_id" in required
    renames: dict[str, str] = {}
    out_props: dict[str, Any] = {}
    for key, prop in properties.items():
        if key == "stream_id" and takes_stream_id:
            continue
        if key in IDENTITY_KEYS:
            renamed = TARGET_PREFIX + key
            prop = dict(prop)
            note = f"(mai-agent's `{key}`: a target, not this conversation)"
            prop["description"] = f"{prop.get('description', '')} {note}".strip()
            renames[renamed] = key
            out_props[renamed] = prop
        else:
            out_props[key] = prop
    out_required = [
        (TARGET_PREFIX + r if r in IDENTITY_KEYS else r)
        for r in required
        if not (r == "stream_id" and takes_stream_id)
    ]
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": out_props,
        "additionalProperties": False,
    }
    if out_required:
        parameters["required"] = out_required
    return PlannerTool(
        name=str(definition["name"]),
        description=str(definition.get("description") or ""),
        visibility=str(definition.get("visibility") or "deferred"),
        parameters=parameters,
        takes_stream_id=takes_stream_id,
        renames=renames,
    )


class IdentityRefused(Exception):
    """A call whose conversation is not the one MaiBot names; the message is for the model."""


def session_of(kwargs: dict[str, Any]) -> str:
    """The MaiBot session a tool call runs in, from the injected `stream_id`/`chat_id`."""
    stream_id = str(kwargs.get("stream_id") or "").strip()
    chat_id = str(kwargs.get("chat_id") or "").strip()
    if not stream_id:
        raise IdentityRefused(
            "MaiBot named no conversation for this call; mai-agent's tools work only inside a chat."
        )
    if chat_id and chat_id != stream_id:
        raise IdentityRefused(
            "this call names two different conversations (stream_id and chat_id); do not pass "
            "either — the tool always acts in the current conversation."
        )
    return stream_id


def tool_arguments(tool: PlannerTool, kwargs: dict[str, Any], session_id: str) -> dict[str, Any]:
    """mai-agent `arguments` from MaiBot's keyword arguments: only the tool's own parameters,
    targets renamed back, identity keys dropped, `stream_id` set to the session when the tool
    takes the current conversation."""
    declared = set((tool.parameters.get("properties") or {}).keys())
    arguments: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in IDENTITY_KEYS or key not in declared:
            continue
        arguments[tool.renames.get(key, key)] = value
    if tool.takes_stream_id:
        arguments["stream_id"] = session_id
    return arguments


@dataclass
class _Marker:
    tool: str
    written: dict[str, str]
    session_id: str
    expires: float


class CallGuard:
    """Remembers planner outputs in which the model wrote a conversation id for a `mai_*` tool
    that is not its own session, and refuses the matching call when MaiBot runs it.

    Fed by `maisaka.planner.after_response` (MaiBot names the session there; the hook runs
    before the tool calls of that response are executed). A marker matches a call of the same
    tool whose keyword arguments carry the written values; it is used up by the match and
    expires after `ttl` seconds."""

    def __init__(self, ttl: float = 300.0, clock: Any = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._markers: list[_Marker] = []

    def observe(self, session_id: str, output_items: Any) -> int:
        """Records markers from a planner response; returns how many were recorded."""
        now = self._clock()
        self._markers = [m for m in self._markers if m.expires > now]
        count = 0
        for item in output_items if isinstance(output_items, list) else []:
            call = item.get("tool_call") if isinstance(item, dict) else None
            if not isinstance(call, dict):
                continue
            name = str(call.get("func_name") or "")
            args = call.get("args")
            if not name.startswith(TOOL_PREFIX) or not isinstance(args, dict):
                continue
            written = {
                k: str(args[k]).strip()
                for k in SESSION_KEYS
                if k in args and str(args[k] or "").strip()
            }
            if any(v != session_id for v in written.values()):
                self._markers.append(_Marker(name, written, session_id, now + self._ttl))
                count += 1
        return count

    def check(self, maibot_name: str, kwargs: dict[str, Any]) -> None:
        """Raises [`IdentityRefused`] when this call matches a recorded marker."""
        now = self._clock()
        for marker in list(self._markers):
            if marker.expires <= now or marker.tool != maibot_name:
                continue
            if all(str(kwargs.get(k) or "").strip() == v for k, v in marker.written.items()):
                self._markers.remove(marker)
                raise IdentityRefused(
                    "the call named another conversation ("
                    + ", ".join(sorted(marker.written))
                    + "); mai-agent's tools act only in the current conversation. Call again "
                    "without these keys."
                )


def identity_for(session_id: str, known: Optional[StreamIdentity]) -> StreamIdentity:
    """The identity of a session: MaiBot's record when there is one, else the session id only
    (no platform, no speaker: mai-agent then applies its default role)."""
    if known is not None and known.session_id == session_id:
        return known
    return StreamIdentity(session_id=session_id)


class SpeakerTracker:
    """Who the planner of a group session answers: MaiBot injects no `user_id` in groups, so the
    plugin watches the messages between two planner requests of a session. When they all come
    from one person, that person is the speaker of the tool calls the next request makes (and of
    later requests with no new message in between); when several people wrote, nobody is — the
    plugin does not guess, and mai-agent then applies its default role."""

    def __init__(self) -> None:
        self._new: dict[str, set[str]] = {}
        self._speaker: dict[str, str] = {}

    def heard(self, session_id: str, user_id: str) -> None:
        """A message of `user_id` arrived in `session_id`."""
        if session_id and user_id:
            self._new.setdefault(session_id, set()).add(user_id)

    def planner_requested(self, session_id: str) -> None:
        """The planner of `session_id` is about to think: fix its speaker from what it heard."""
        senders = self._new.pop(session_id, set())
        if len(senders) == 1:
            self._speaker[session_id] = next(iter(senders))
        elif senders:
            self._speaker.pop(session_id, None)

    def speaker(self, session_id: str) -> str:
        """The current speaker of `session_id`, or "" when it is not known for sure."""
        return self._speaker.get(session_id, "")
