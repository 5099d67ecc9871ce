"""mai-agent bridge: a MaiBot plugin that connects MaiBot to a running `mai-agent serve`.

Owns the MaiBot side only: the plugin's config, registering mai-agent's 11 planner tools as
MaiBot tools `mai_<name>`, the hooks (planner board, planner output guard, inbound messages) and
the lifecycle of the bridge WebSocket (and, optionally, of a local `mai-agent serve`).

Must not: hold task logic (it all lives in mai-agent), take a chat identity from the model
(see `identity`), or block MaiBot when mai-agent is down (every hook continues on failure).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Optional

from maibot_sdk import Field, HookHandler, MaiBotPlugin, PluginConfigBase, Tool
from maibot_sdk.types import ErrorPolicy, HookMode

from .api import ApiError, MaiAgentApi
from .bridge import BridgeClient, PartIdMemory
from .host import MaiBotHost
from .identity import (
    CallGuard,
    IdentityRefused,
    PlannerTool,
    SpeakerTracker,
    StreamIdentity,
    identity_for,
    planner_tool,
    session_of,
    tool_arguments,
)
from .supervisor import Supervisor

PLUGIN_VERSION = "0.1.0"
TOOLS_FILE = Path(__file__).with_name("planner_tools.json")


def load_planner_tools(path: Path = TOOLS_FILE) -> list[PlannerTool]:
    """The shipped planner tool definitions (generated from mai-agent's `GET /v1/planner/tools`;
    `check_tools.py` compares them with a running mai-agent)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [planner_tool(d) for d in data["tools"]]


class PluginSection(PluginConfigBase):
    __ui_label__: ClassVar[str] = "Plugin"
    config_version: str = Field(default="1.0.0", description="Config version")
    enabled: bool = Field(default=True, description="Enable the mai-agent bridge")


class ConnectionSection(PluginConfigBase):
    __ui_label__: ClassVar[str] = "mai-agent"
    endpoint: str = Field(
        default="http://127.0.0.1:8760",
        description="mai-agent serve address (env MAI_AGENT_URL overrides)",
    )
    token: str = Field(default="", description="[server] auth_token of mai-agent (env MAI_AGENT_TOKEN overrides)")
    binary: str = Field(
        default="",
        description="Optional path to the mai-agent binary: the plugin then starts and restarts `mai-agent serve`",
    )
    binary_args: list[str] = Field(
        default_factory=list, description="Extra arguments before `serve`, e.g. [\"--config\", \"/path/config.toml\"]"
    )


class BridgeConfig(PluginConfigBase):
    plugin: PluginSection = Field(default_factory=PluginSection, description="Plugin")
    mai_agent: ConnectionSection = Field(default_factory=ConnectionSection, description="mai-agent connection")


def _board_item(board: str) -> dict[str, Any]:
    """A context item carrying the board, appended after the planner's history."""
    return {
        "item_type": "UserMessageItem",
        "meta": {
            "item_id": f"mai-agent-board-{uuid.uuid4().hex}",
            "logical_turn_id": None,
            "timestamp": datetime.now().isoformat(),
        },
        "parts": [{"type": "text", "text": f"<system-reminder>\n{board}\n</system-reminder>"}],
    }


def message_body(message: dict[str, Any]) -> Optional[dict[str, Any]]:
    """`POST /v1/messages` body from MaiBot's serialized inbound message; None to skip."""
    session_id = str(message.get("session_id") or "").strip()
    info = message.get("message_info") or {}
    user = info.get("user_info") or {}
    group = info.get("group_info") or {}
    text = str(message.get("processed_plain_text") or "").strip()
    user_id = str(user.get("user_id") or "").strip()
    if not session_id or not user_id or not text or message.get("is_notify"):
        return None
    body: dict[str, Any] = {
        "platform": str(message.get("platform") or ""),
        "stream_id": session_id,
        "user_id": user_id,
        "sender_name": str(user.get("user_cardname") or user.get("user_nickname") or user_id),
        "text": text,
    }
    if group.get("group_id"):
        body["group_id"] = str(group["group_id"])
        if group.get("group_name"):
            body["group_name"] = str(group["group_name"])
    # The platform's id of the message: several mai-agent instances on one database process a
    # message they all receive once.
    message_id = str(message.get("message_id") or "").strip()
    if message_id:
        body["message_id"] = message_id
    extra = info.get("additional_config") or {}
    if isinstance(extra, dict) and extra.get("anonymous"):
        body["anonymous"] = True
    return body


class MaiAgentBridgePlugin(MaiBotPlugin):
    config_model = BridgeConfig

    def __init__(self) -> None:
        super().__init__()
        self._api = MaiAgentApi(self.settings)
        self._guard = CallGuard()
        self._speakers = SpeakerTracker()
        self._identities: dict[str, StreamIdentity] = {}
        self._bridge: Optional[BridgeClient] = None
        self._host: Optional[MaiBotHost] = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._supervisor: Optional[Supervisor] = None
        self._last_warning = 0.0

    # ── configuration ─────────────────────────────────────────────

    def _section(self) -> ConnectionSection:
        try:
            return self.config.mai_agent  # type: ignore[attr-defined]
        except RuntimeError:
            return ConnectionSection()

    def settings(self) -> tuple[str, str]:
        """(endpoint, token): env `MAI_AGENT_URL` / `MAI_AGENT_TOKEN` over the plugin config."""
        section = self._section()
        endpoint = os.environ.get("MAI_AGENT_URL") or section.endpoint or "http://127.0.0.1:8760"
        token = os.environ.get("MAI_AGENT_TOKEN") or section.token
        return endpoint, token

    def _warn(self, message: str, *args: Any) -> None:
        """Logs a mai-agent outage at most once a minute (hooks run on every message)."""
        now = time.monotonic()
        if now - self._last_warning >= 60:
            self._last_warning = now
            self.ctx.logger.warning(message, *args)

    # ── lifecycle ─────────────────────────────────────────────────

    async def on_load(self) -> None:
        parts = PartIdMemory(Path(self.ctx.paths.data_dir) / "sent_part_ids.txt")
        self._host = MaiBotHost(self.ctx, parts)
        section = self._section()
        if section.binary:
            self._supervisor = Supervisor(section.binary, section.binary_args, self.ctx.logger)
            self._tasks.append(asyncio.ensure_future(self._supervisor.run()))
        self._bridge = BridgeClient(
            self.settings,
            self._host.handle,
            {"plugin_version": PLUGIN_VERSION, "maibot_version": _maibot_version()},
            self.ctx.logger,
        )
        self._tasks.append(asyncio.ensure_future(self._bridge.run()))
        self.ctx.logger.info("mai-agent bridge plugin loaded; mai-agent at %s", self.settings()[0])

    async def on_unload(self) -> None:
        if self._bridge is not None:
            self._bridge.stop()
        if self._supervisor is not None:
            await self._supervisor.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self._api.close()

    async def on_config_update(self, scope: str, config_data: dict[str, Any], version: str) -> None:
        # Settings are read at each use, so a new endpoint/token applies at the next request and
        # the next bridge reconnect.
        del config_data, version
        if scope == "self":
            self.ctx.logger.info("mai-agent bridge config updated; endpoint %s", self.settings()[0])

    # ── identity ──────────────────────────────────────────────────

    async def _identity(self, session_id: str) -> StreamIdentity:
        known = self._identities.get(session_id)
        if known is None and self._host is not None:
            try:
                stream = await self._host.find_stream(session_id)
            except Exception as exc:  # noqa: BLE001 - fall back to the session id alone
                self.ctx.logger.warning("could not read MaiBot stream %s: %s", session_id, exc)
                stream = None
            if stream is not None:
                known = StreamIdentity.from_stream(stream)
                self._identities[session_id] = known
        return identity_for(session_id, known)

    # ── planner tools ─────────────────────────────────────────────

    async def run_planner_tool(self, tool: PlannerTool, kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            session_id = session_of(kwargs)
            self._guard.check(tool.maibot_name, kwargs)
        except IdentityRefused as exc:
            return {"success": False, "error": str(exc), "content": str(exc)}
        identity = await self._identity(session_id)
        if identity.is_group:
            # The speaker of a group turn: the one person the planner heard since its last turn.
            identity = dataclasses.replace(identity, user_id=self._speakers.speaker(session_id))
        arguments = tool_arguments(tool, kwargs, session_id)
        try:
            status, body = await self._api.call_tool(tool.name, arguments, identity.context())
        except ApiError as exc:
            return {"success": False, "error": str(exc), "content": str(exc)}
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        if status != 200:
            error = f"mai-agent answered {status}: {text}"
            return {"success": False, "error": error, "content": error}
        if isinstance(body, dict) and body.get("success") is False:
            return {"success": False, "error": str(body.get("error") or text), "content": text}
        return {"success": True, "content": text}

    # ── hooks ─────────────────────────────────────────────────────

    @HookHandler(
        "maisaka.planner.before_request",
        name="mai_agent_board",
        description="Adds mai-agent's planner board (introduction, tasks waiting for the user)",
        mode=HookMode.BLOCKING,
        timeout_ms=5000,
        error_policy=ErrorPolicy.SKIP,
    )
    async def on_planner_request(self, **kwargs: Any) -> dict[str, Any]:
        session_id = str(kwargs.get("session_id") or "").strip()
        items = kwargs.get("items")
        if session_id:
            self._speakers.planner_requested(session_id)
        if not session_id or not isinstance(items, list):
            return {"action": "continue"}
        try:
            board = await self._api.board(session_id, session_id)
        except ApiError as exc:
            self._warn("no planner board from mai-agent: %s", exc)
            return {"action": "continue"}
        if board is None:
            return {"action": "continue"}
        # MaiBot replaces all hook kwargs with `modified_kwargs`: pass every one of them on.
        return {"action": "continue", "modified_kwargs": {**kwargs, "items": [*items, _board_item(board)]}}

    @HookHandler(
        "maisaka.planner.after_response",
        name="mai_agent_call_guard",
        description="Remembers mai_* tool calls in which the model named another conversation",
        mode=HookMode.BLOCKING,
        timeout_ms=2000,
        error_policy=ErrorPolicy.SKIP,
    )
    async def on_planner_response(self, **kwargs: Any) -> dict[str, Any]:
        session_id = str(kwargs.get("session_id") or "").strip()
        if session_id and self._guard.observe(session_id, kwargs.get("output_items")):
            self.ctx.logger.warning("planner of %s named another conversation in a mai_* call; it will be refused", session_id)
        return {"action": "continue"}

    @HookHandler(
        "chat.receive.after_process",
        name="mai_agent_inbound",
        description="Forwards each inbound message to mai-agent; stops MaiBot on /maitask commands",
        mode=HookMode.BLOCKING,
        timeout_ms=12000,
        error_policy=ErrorPolicy.SKIP,
    )
    async def on_message(self, **kwargs: Any) -> dict[str, Any]:
        message = kwargs.get("message")
        body = message_body(message) if isinstance(message, dict) else None
        if body is None:
            return {"action": "continue"}
        if not body.get("anonymous"):
            self._speakers.heard(body["stream_id"], body["user_id"])
        self._identities.setdefault(
            body["stream_id"],
            StreamIdentity(
                session_id=body["stream_id"],
                platform=body["platform"],
                group_id=body.get("group_id", ""),
                user_id="" if body.get("group_id") else body["user_id"],
                is_group=bool(body.get("group_id")),
            ),
        )
        try:
            answer = await self._api.message(body)
        except ApiError as exc:
            self._warn("message not forwarded to mai-agent: %s", exc)
            return {"action": "continue"}
        if answer.get("outcome") == "command":
            return {"action": "abort"}
        return {"action": "continue"}


def _maibot_version() -> str:
    try:
        from importlib.metadata import version

        return version("maibot")
    except Exception:  # noqa: BLE001 - informational only
        return "unknown"


def _make_tool_handler(tool: PlannerTool) -> Any:
    async def handler(self: MaiAgentBridgePlugin, **kwargs: Any) -> dict[str, Any]:
        return await self.run_planner_tool(tool, kwargs)

    handler.__name__ = f"tool_{tool.name}"
    return Tool(
        tool.maibot_name,
        description=tool.description,
        parameters=tool.parameters,
        visibility=tool.visibility,
    )(handler)


PLANNER_TOOLS = load_planner_tools()
for _tool in PLANNER_TOOLS:
    setattr(MaiAgentBridgePlugin, f"tool_{_tool.name}", _make_tool_handler(_tool))


def create_plugin() -> MaiAgentBridgePlugin:
    return MaiAgentBridgePlugin()
