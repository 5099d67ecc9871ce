"""The host methods of the bridge protocol, answered from MaiBot's plugin capabilities.

Owns: mapping each method (`send_text`, `recent_messages`, `stream_info`, …) to `ctx.*` calls and
MaiBot's answers to the protocol's shapes; the once-only sending of a part (`part_id`).

Must not: decide anything for mai-agent (no filtering beyond what a method asks), make up data
(a method MaiBot cannot serve raises `unsupported`), or send a part twice.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any, Optional

from .bridge import HostError, PartIdMemory
from .identity import StreamIdentity

ALL_PLATFORMS = "all_platforms"


def _str(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _seconds(timestamp: Any) -> float:
    try:
        return float(timestamp)
    except (TypeError, ValueError):
        return 0.0


def _rfc3339(timestamp: Any) -> str:
    try:
        return datetime.fromtimestamp(float(timestamp), tz=timezone.utc).isoformat()
    except (TypeError, ValueError):
        return _str(timestamp)


def stream_info(stream: dict[str, Any]) -> dict[str, Any]:
    """A MaiBot stream record as the protocol's `stream_info`."""
    identity = StreamIdentity.from_stream(stream)
    if identity.is_group:
        target: dict[str, Any] = {"kind": "group", "group_id": identity.group_id}
        name = _str(stream.get("group_name")) or identity.group_id
    else:
        target = {"kind": "private", "user_id": _str(stream.get("user_id"))}
        name = _str(stream.get("user_cardname")) or _str(stream.get("user_nickname"))
    return {"stream_id": identity.session_id, "platform": identity.platform, "target": target, "name": name}


def _require(params: dict[str, Any], key: str) -> str:
    value = _str(params.get(key))
    if not value:
        raise HostError("invalid", f"missing `{key}`")
    return value


def _person(params: dict[str, Any]) -> tuple[str, str]:
    person = _require(params, "person")
    platform, sep, user_id = person.partition(":")
    if not sep or not platform or not user_id:
        raise HostError("invalid", f"`person` must be \"platform:user_id\", got {person!r}")
    return platform, user_id


class MaiBotHost:
    """Answers bridge requests with MaiBot's capabilities (`ctx` is the plugin's context)."""

    def __init__(self, ctx: Any, parts: PartIdMemory) -> None:
        self._ctx = ctx
        self._parts = parts
        self._send_lock = asyncio.Lock()
        self._methods = {
            "send_text": self.send_text,
            "append_context": self.append_context,
            "recent_messages": self.recent_messages,
            "jargon": self.jargon,
            "persona": self.persona,
            "stream_info": self.stream_info,
            "open_stream": self.open_stream,
            "list_streams": self.list_streams,
            "find_person": self.find_person,
            "search_users": self.search_users,
            "search_memory": self.search_memory,
            "talk_frequency": self.talk_frequency,
            "is_member": self.is_member,
            "display_name": self.display_name,
            "list_apis": self.list_apis,
            "call_api": self.call_api,
        }

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        handler = self._methods.get(method)
        if handler is None:
            raise HostError("unsupported", f"the MaiBot plugin does not serve `{method}`")
        return await handler(params)

    async def streams(self) -> list[dict[str, Any]]:
        result = await self._ctx.chat.get_all_streams(platform=ALL_PLATFORMS)
        return [s for s in result if isinstance(s, dict)] if isinstance(result, list) else []

    async def find_stream(self, stream_id: str) -> Optional[dict[str, Any]]:
        for stream in await self.streams():
            if _str(stream.get("session_id") or stream.get("stream_id")) == stream_id:
                return stream
        return None

    async def send_text(self, params: dict[str, Any]) -> Any:
        stream_id = _require(params, "stream_id")
        text = _require(params, "text")
        part_id = _str(params.get("part_id"))
        async with self._send_lock:
            if part_id and part_id in self._parts:
                return {"sent": True, "duplicate": True}
            sent = await self._ctx.send.text(text, stream_id, sync_to_maisaka_history=True)
            if not sent:
                raise HostError("failed", f"MaiBot could not send to stream {stream_id} (is the adapter connected?)")
            if part_id:
                self._parts.add(part_id)
        return {"sent": True}

    async def append_context(self, params: dict[str, Any]) -> Any:
        stream_id = _require(params, "stream_id")
        note = _require(params, "note")
        result = await self._ctx.maisaka.context.append(
            stream_id, [{"type": "text", "data": note}], visible_text=note, source_kind="mai_agent"
        )
        if isinstance(result, dict) and result.get("success") is False:
            raise HostError("failed", f"MaiBot refused the context note: {result.get('error')}")
        return None

    async def recent_messages(self, params: dict[str, Any]) -> Any:
        stream_id = _require(params, "stream_id")
        limit = int(params.get("limit") or 20)
        messages = await self._ctx.message.get_recent(chat_id=stream_id, limit=limit)
        if isinstance(messages, dict) and messages.get("success") is False:
            raise HostError("failed", f"MaiBot could not read messages: {messages.get('error')}")
        rows = [m for m in (messages if isinstance(messages, list) else []) if isinstance(m, dict)]
        rows.sort(key=lambda m: _seconds(m.get("timestamp")))
        out = []
        for m in rows:
            user = (m.get("message_info") or {}).get("user_info") or {}
            sender = _str(user.get("user_cardname")) or _str(user.get("user_nickname")) or _str(user.get("user_id"))
            out.append({"sender": sender, "text": _str(m.get("processed_plain_text")), "at": _rfc3339(m.get("timestamp"))})
        return out[-limit:]

    async def jargon(self, params: dict[str, Any]) -> Any:
        stream_id = _require(params, "stream_id")
        text = _str(params.get("text"))
        rows = await self._ctx.db.query("Jargon", filters={"is_jargon": True}, limit=2000)
        found = []
        for row in rows if isinstance(rows, list) else []:
            term = _str(row.get("content"))
            if not term or term not in text:
                continue
            if not row.get("is_global") and stream_id not in _str(row.get("session_id_dict")):
                continue
            found.append({"term": term, "meaning": _str(row.get("meaning"))})
        return found

    async def persona(self, params: dict[str, Any]) -> Any:
        del params
        return {
            "bot_name": _str(await self._ctx.config.get("bot.nickname", "")),
            "personality": _str(await self._ctx.config.get("personality.personality", "")),
            "reply_style": _str(await self._ctx.config.get("personality.reply_style", "")),
        }

    async def stream_info(self, params: dict[str, Any]) -> Any:
        stream = await self.find_stream(_require(params, "stream_id"))
        return None if stream is None else stream_info(stream)

    async def open_stream(self, params: dict[str, Any]) -> Any:
        platform = _require(params, "platform")
        target = params.get("target") if isinstance(params.get("target"), dict) else {}
        kind = _str(target.get("kind"))
        if kind == "group":
            result = await self._ctx.chat.open_session(platform, "group", group_id=_str(target.get("group_id")))
        elif kind == "private":
            result = await self._ctx.chat.open_session(platform, "private", user_id=_str(target.get("user_id")))
        else:
            raise HostError("invalid", "`target.kind` must be \"group\" or \"private\"")
        if not isinstance(result, dict) or result.get("success") is False or not result.get("session_id"):
            error = result.get("error") if isinstance(result, dict) else result
            raise HostError("failed", f"MaiBot could not open the stream: {error}")
        return {"stream_id": _str(result.get("session_id"))}

    async def list_streams(self, params: dict[str, Any]) -> Any:
        limit = int(params.get("limit") or 50)
        return [stream_info(s) for s in await self.streams()][:limit]

    async def find_person(self, params: dict[str, Any]) -> Any:
        name = _require(params, "name")
        person_id = _str(await self._ctx.person.get_id_by_name(name))
        if not person_id:
            return None
        values = {}
        for field in ("person_name", "user_nickname", "platform", "user_id", "memory_points", "is_known"):
            values[field] = await self._ctx.person.get_value(person_id, field)
        if not values.get("is_known") and not values.get("user_id"):
            return None
        aliases = [a for a in {_str(values.get("user_nickname"))} if a and a != name]
        accounts = [[_str(values.get("platform")), _str(values.get("user_id"))]] if values.get("user_id") else []
        return {
            "name": _str(values.get("person_name")) or name,
            "aliases": aliases,
            "accounts": accounts,
            "notes": _str(values.get("memory_points")),
        }

    async def search_users(self, params: dict[str, Any]) -> Any:
        keywords = [k.lower() for k in _str(params.get("keywords")).split() if k]
        chat_type = _str(params.get("chat_type"))
        platform = _str(params.get("platform"))
        limit = int(params.get("limit") or 20)
        hits = []
        for stream in await self.streams():
            info = stream_info(stream)
            if chat_type and info["target"]["kind"] != chat_type:
                continue
            if platform and info["platform"] != platform:
                continue
            fields = [_str(stream.get(k)) for k in ("group_name", "group_id", "user_nickname", "user_cardname", "user_id")]
            matched = [f for f in fields if f and any(k in f.lower() for k in keywords)]
            if matched or not keywords:
                hits.append({"stream": info, "matched": matched[0] if matched else ""})
        return hits[:limit]

    async def search_memory(self, params: dict[str, Any]) -> Any:
        query = _require(params, "query")
        args: dict[str, Any] = {"query": query, "limit": int(params.get("limit") or 5)}
        for key, target in (("mode", "mode"), ("stream_id", "chat_id"), ("time_start", "time_start"), ("time_end", "time_end")):
            if params.get(key) not in (None, ""):
                args[target] = params[key]
        person_name = _str(params.get("person_name"))
        if person_name:
            person_id = _str(await self._ctx.person.get_id_by_name(person_name))
            if person_id:
                args["person_id"] = person_id
        result = await self._ctx.call_capability("knowledge.search", **args)
        if isinstance(result, dict) and result.get("success") is False:
            raise HostError("failed", f"MaiBot memory search failed: {result.get('error')}")
        return result

    async def talk_frequency(self, params: dict[str, Any]) -> Any:
        value = await self._ctx.frequency.get_current_talk_value(_require(params, "stream_id"))
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    async def is_member(self, params: dict[str, Any]) -> Any:
        platform, user_id = _person(params)
        stream = await self.find_stream(_require(params, "stream_id"))
        if stream is None or _str(stream.get("platform")) != platform:
            return False
        if not StreamIdentity.from_stream(stream).is_group:
            return _str(stream.get("user_id")) == user_id
        count = await self._ctx.db.query(
            "Messages", "count", filters={"session_id": _str(stream.get("session_id")), "user_id": user_id}
        )
        return isinstance(count, int) and count > 0

    async def display_name(self, params: dict[str, Any]) -> Any:
        platform, user_id = _person(params)
        person_id = _str(await self._ctx.person.get_id(platform, user_id))
        if not person_id:
            return None
        for field in ("person_name", "user_nickname"):
            value = _str(await self._ctx.person.get_value(person_id, field))
            if value:
                return value
        return None

    async def list_apis(self, params: dict[str, Any]) -> Any:
        del params
        apis = await self._ctx.api.list()
        return [
            {"name": _str(a.get("full_name") or a.get("name")), "description": _str(a.get("description")), "plugin": _str(a.get("plugin_id"))}
            for a in (apis if isinstance(apis, list) else [])
            if isinstance(a, dict)
        ]

    async def call_api(self, params: dict[str, Any]) -> Any:
        name = _require(params, "name")
        args = params.get("args") if isinstance(params.get("args"), dict) else {}
        result = await self._ctx.call_capability("api.call", api_name=name, version="", args=args)
        if isinstance(result, dict) and result.get("success") is False:
            raise HostError("failed", f"MaiBot API `{name}` failed: {result.get('error')}")
        return result
