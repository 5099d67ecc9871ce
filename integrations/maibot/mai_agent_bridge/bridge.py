"""The bridge: the WebSocket the plugin keeps open to mai-agent's `GET /v1/bridge`.

Owns: connecting (Bearer token), reconnecting with backoff (1 s doubling to 30 s, reset once a
`hello` was answered), the JSON frames (`{"id", "method", "params"}` requests, `{"id",
"result"}` / `{"id", "error": {"code", "message"}}` answers), `ping`, and the memory of sent
part ids that makes `send_text` idempotent across restarts ([`PartIdMemory`]).

Must not: know MaiBot (host methods are answered by the `handler` it is given) or hold state
about chats; answer a request twice or leave one unanswered.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

import aiohttp


class HostError(Exception):
    """An error answer for mai-agent: code is `unsupported`, `invalid` or `failed`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]


def bridge_url(endpoint: str) -> str:
    """`http://host:port` -> `ws://host:port/v1/bridge` (https -> wss)."""
    base = endpoint.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    return base + "/v1/bridge"


class PartIdMemory:
    """The last `capacity` part ids sent, kept in an append-only file (one id a line) that is
    rewritten when it grows past twice the capacity."""

    def __init__(self, path: Path, capacity: int = 10_000) -> None:
        self._path = path
        self._capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lines = 0
        self._load()

    def _load(self) -> None:
        try:
            lines = self._path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            line = line.strip()
            if line:
                self._ids[line] = None
                self._ids.move_to_end(line)
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)
        self._lines = len(lines)

    def __contains__(self, part_id: str) -> bool:
        return part_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, part_id: str) -> None:
        """Remembers a sent part id (durably: flushed before returning)."""
        part_id = part_id.strip().replace("\n", " ")
        if not part_id or part_id in self._ids:
            return
        self._ids[part_id] = None
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        if self._lines + 1 > 2 * self._capacity:
            tmp = self._path.with_suffix(".tmp")
            tmp.write_text("".join(f"{i}\n" for i in self._ids), encoding="utf-8")
            os.replace(tmp, self._path)
            self._lines = len(self._ids)
            return
        with self._path.open("a", encoding="utf-8") as f:
            f.write(part_id + "\n")
            f.flush()
        self._lines += 1


class BridgeClient:
    """Keeps one bridge open and answers mai-agent's requests with `handler(method, params)`."""

    def __init__(
        self,
        settings: Callable[[], tuple[str, str]],
        handler: Handler,
        hello: dict[str, Any],
        logger: Optional[logging.Logger] = None,
        backoff_start: float = 1.0,
        backoff_max: float = 30.0,
    ) -> None:
        self._settings = settings
        self._handler = handler
        self._hello = hello
        self._log = logger or logging.getLogger("mai_agent_bridge.bridge")
        self._backoff_start = backoff_start
        self._backoff_max = backoff_max
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.connected = asyncio.Event()
        """Set while a bridge is open and mai-agent answered `hello`."""
        self.server_version: Optional[str] = None

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Connects until `stop()`; never raises."""
        delay = self._backoff_start
        async with aiohttp.ClientSession() as session:
            while not self._stop.is_set():
                endpoint, token = self._settings()
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                try:
                    async with session.ws_connect(
                        bridge_url(endpoint), headers=headers, heartbeat=30
                    ) as ws:
                        if await self._serve(ws):
                            delay = self._backoff_start
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any failure means: retry later
                    self._log.warning(
                        "mai-agent bridge at %s unavailable (%s); retrying in %g s. "
                        "Check that `mai-agent serve` runs there and the token matches.",
                        bridge_url(endpoint),
                        exc,
                        delay,
                    )
                finally:
                    self.connected.clear()
                if self._stop.is_set():
                    break
                try:
                    await asyncio.wait_for(self._stop.wait(), timeout=delay)
                except asyncio.TimeoutError:
                    pass
                delay = min(delay * 2, self._backoff_max)
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> bool:
        """Runs one connection; returns whether mai-agent answered `hello`."""
        await ws.send_str(json.dumps({"id": "hello", "method": "hello", "params": self._hello}))
        greeted = False
        stop_wait = asyncio.ensure_future(self._stop.wait())
        try:
            while True:
                receive = asyncio.ensure_future(ws.receive())
                done, _ = await asyncio.wait({receive, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if stop_wait in done:
                    receive.cancel()
                    await ws.close()
                    return greeted
                msg = receive.result()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                    aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.ERROR):
                        return greeted
                    continue
                greeted = self._on_frame(ws, msg.data) or greeted
        finally:
            stop_wait.cancel()

    def _on_frame(self, ws: aiohttp.ClientWebSocketResponse, data: str) -> bool:
        """Handles one text frame; returns True when it is the answer to `hello`."""
        try:
            frame = json.loads(data)
        except ValueError:
            self._log.warning("mai-agent sent a frame that is not JSON; ignored: %.200s", data)
            return False
        if not isinstance(frame, dict):
            return False
        if "method" not in frame:
            if frame.get("id") == "hello" and "result" in frame:
                result = frame.get("result") or {}
                self.server_version = result.get("server_version") if isinstance(result, dict) else None
                self.connected.set()
                self._log.info("mai-agent bridge open (server %s)", self.server_version)
                return True
            if frame.get("id") == "hello" and "error" in frame:
                self._log.warning("mai-agent refused the bridge hello: %s", frame.get("error"))
            return False
        task = asyncio.ensure_future(self._answer(ws, frame))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return False

    async def _answer(self, ws: aiohttp.ClientWebSocketResponse, frame: dict[str, Any]) -> None:
        request_id = frame.get("id")
        method = str(frame.get("method") or "")
        params = frame.get("params")
        answer: dict[str, Any] = {"id": request_id}
        try:
            if method == "ping":
                answer["result"] = "pong"
            elif not isinstance(params, (dict, type(None))):
                raise HostError("invalid", f"`params` of `{method}` must be an object")
            else:
                answer["result"] = await self._handler(method, params or {})
        except HostError as exc:
            answer["error"] = {"code": exc.code, "message": exc.message}
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every request gets an answer
            self._log.exception("bridge method %s failed", method)
            answer["error"] = {"code": "failed", "message": f"{method} failed in MaiBot: {exc}"}
        if request_id is None:
            return
        try:
            await ws.send_str(json.dumps(answer, ensure_ascii=False, default=str))
        except Exception as exc:  # noqa: BLE001 - the connection is gone; mai-agent retries
            self._log.warning("could not answer bridge request %s (%s): %s", request_id, method, exc)
