"""The plugin's side of mai-agent's HTTP API: one request per action.

Owns: `GET /v1/planner/tools`, `POST /v1/planner/tools/{name}`, `GET /v1/planner/board`,
`POST /v1/messages`, with the Bearer token and a timeout each.

Must not: decide identity (callers pass `context` built by `identity`), retry (a failed call is
reported to the caller, which decides), or hold a session across event loops.
"""

from __future__ import annotations

from typing import Any, Callable, Optional
from urllib.parse import quote

import aiohttp


class ApiError(Exception):
    """mai-agent could not be reached or answered with an error; the message says which."""


class MaiAgentApi:
    def __init__(self, settings: Callable[[], tuple[str, str]], timeout: float = 30.0) -> None:
        self._settings = settings
        self._timeout = timeout
        self._session: Optional[aiohttp.ClientSession] = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def request(
        self, method: str, path: str, body: Any = None, timeout: Optional[float] = None
    ) -> tuple[int, Any]:
        """Returns (status, JSON body or text). Raises [`ApiError`] when mai-agent is not there."""
        endpoint, token = self._settings()
        url = endpoint.rstrip("/") + path
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with self._client().request(
                method,
                url,
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout or self._timeout),
            ) as resp:
                try:
                    data: Any = await resp.json(content_type=None)
                except ValueError:
                    data = await resp.text()
                return resp.status, data
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(
                f"mai-agent is not reachable at {endpoint} ({type(exc).__name__}: {exc}); "
                "start `mai-agent serve` or fix the plugin's `endpoint`"
            ) from exc

    async def planner_tools(self) -> list[dict[str, Any]]:
        status, data = await self.request("GET", "/v1/planner/tools")
        if status != 200 or not isinstance(data, dict):
            raise ApiError(f"GET /v1/planner/tools answered {status}: {data}")
        return list(data.get("tools") or [])

    async def call_tool(self, name: str, arguments: dict[str, Any], context: dict[str, Any]) -> tuple[int, Any]:
        return await self.request(
            "POST", f"/v1/planner/tools/{quote(name)}", {"arguments": arguments, "context": context}, timeout=120
        )

    async def board(self, stream_id: str, session: str, timeout: float = 4.0) -> Optional[str]:
        query = f"?stream_id={quote(stream_id)}&session={quote(session)}"
        status, data = await self.request("GET", "/v1/planner/board" + query, timeout=timeout)
        if status != 200:
            raise ApiError(f"GET /v1/planner/board answered {status}: {data}")
        board = data.get("board") if isinstance(data, dict) else None
        return board if isinstance(board, str) and board.strip() else None

    async def message(self, body: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        status, data = await self.request("POST", "/v1/messages", body, timeout=timeout)
        if status >= 300 or not isinstance(data, dict):
            raise ApiError(f"POST /v1/messages answered {status}: {data}")
        return data
