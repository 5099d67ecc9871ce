# Vendored: the benchmark harness of the original implementation, oh-mai-agent
# (github.com/Dreamwxz/oh-mai-agent, commit 072aefa902958adf741d49bac28a8c7cbb035888, GPL-3.0),
# written for this project to measure the original with its own test suite's wiring (an instant
# fake model, a real SQLite TaskStore). It imports the original from $OMA_SRC and changes
# nothing in it. testing/bench/compare-original.sh copies it outside the repo, sets up its venv
# and runs `bench.py b` interleaved with our `loadgen http --instant-model`. Nothing in the repo
# imports it. Kept as it was measured: edit it only to follow a change of the original.
"""Shared set-up for the oh-mai-agent (Python original) runtime-overhead benchmark.

Mirrors the test suite's conventions (tests/conftest.py, AGENTS.md):
  * the plugin root is mounted as package ``oh_mai_agent`` by importing the
    suite's own ``tests/conftest.py`` (same mechanism pytest uses);
  * the LLM is mocked (here: an *instant* in-process fake, no call history);
  * persistence is NOT mocked: a real sqlite ``TaskStore`` file is used.

Wiring follows ``lifecycle.load_plugin`` (TaskStore -> ToolRegistry ->
PermissionResolver -> TaskCommandBus -> TaskScheduler -> PromptManager /
PromptService -> ReplySender -> TaskManager -> scheduler.set_executor ->
TaskManager.setup() -> scheduler.start()), minus MCP servers, PlannerBoard and
the cross-plugin API registration (which need a live MaiBot host).

Nothing in $OMA_SRC is modified.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

OMA_SRC = Path(os.environ["OMA_SRC"]).resolve()  # a checkout of the original (Dreamwxz/oh-mai-agent)
BENCH_DIR = Path(__file__).resolve().parent
WORK_DIR = BENCH_DIR / "work"

sys.path.insert(0, str(OMA_SRC / "tests"))
import conftest  # noqa: E402  (mounts OMA_SRC as package "oh_mai_agent")
from conftest import MockCtx  # noqa: E402

from oh_mai_agent.bus.command_bus import TaskCommandBus  # noqa: E402
from oh_mai_agent.config import MaibotAgentConfig, PermissionConfig, TaskConfig  # noqa: E402
from oh_mai_agent.core.scheduler import TaskScheduler  # noqa: E402
from oh_mai_agent.core.task_manager import TaskManager  # noqa: E402
from oh_mai_agent.domain.task_record import TaskLevel, TaskRecord, TaskStatus  # noqa: E402
from oh_mai_agent.domain.task_store import TaskStore  # noqa: E402
from oh_mai_agent.executor.sender import ReplySender  # noqa: E402
from oh_mai_agent.permission import PermissionResolver, Role  # noqa: E402
from oh_mai_agent.prompt.builders import ALL_BUILDERS  # noqa: E402
from oh_mai_agent.prompt.manager import PromptManager  # noqa: E402
from oh_mai_agent.prompt.service import PromptService  # noqa: E402
from oh_mai_agent.tools.registry import ToolDefinition, ToolRegistry  # noqa: E402

# Logging: the plugin logs via logging.getLogger(__name__). We keep the
# stdlib default level (WARNING) and swallow output, so info/debug calls cost
# only their level check (plus any eagerly evaluated arguments).
logging.getLogger().addHandler(logging.NullHandler())
logging.getLogger().setLevel(logging.WARNING)
logging.lastResort = None

OWNER = "qq:10001"          # configured as admin -> tasks run with Role.ADMIN
STREAM = "qq:10001"         # private stream of the owner
PLATFORM = "qq"
BENCH_TOOL = "bench_echo"   # the cheap tool the fake LLM calls
BENCH_TOOL_ARGS = json.dumps({"text": "ping"})


# ─────────────────────────────────────────────────────────────────────────────
# Instant fake LLM
# ─────────────────────────────────────────────────────────────────────────────

class InstantToolLLM:
    """Instant in-process stand-in for ``ctx.llm``.

    ``generate_with_tools``: returns one call to ``tool_name`` while the prompt
    contains fewer than ``k`` tool-result messages, then a final answer (no
    tool calls). It is stateless per task (it counts ``role == "tool"``
    messages of the prompt it receives), so any number of tasks can run
    concurrently. ``mode="ask"`` makes the first call an ``ask_user`` call
    (used by the WAITING_INPUT memory test).

    ``generate`` (title generation, reply polishing) returns "ok" instantly.
    No prompt/tool history is retained (unlike conftest.MockLLM), so the fake
    itself does not grow memory.
    """

    def __init__(self, k: int = 5, tool_name: str = BENCH_TOOL, mode: str = "tool") -> None:
        self.k = k
        self.tool_name = tool_name
        self.mode = mode
        self.tool_calls = 0
        self.generate_calls = 0
        self.timestamps: list[float] | None = None  # perf_counter per generate_with_tools call

    async def generate_with_tools(self, prompt: list, tools: list, model: str = "", **kwargs: Any) -> dict:
        if self.timestamps is not None:
            self.timestamps.append(time.perf_counter())
        self.tool_calls += 1
        n_tool = 0
        for m in prompt:
            if m.get("role") == "tool":
                n_tool += 1
        if self.mode == "ask" and n_tool == 0:
            return {
                "success": True, "response": "",
                "tool_calls": [{
                    "id": "call_ask", "type": "function",
                    "function": {"name": "ask_user", "arguments": json.dumps({"question": "继续吗？"})},
                }],
            }
        if n_tool < self.k:
            return {
                "success": True, "response": "",
                "tool_calls": [{
                    "id": f"call_{n_tool + 1}", "type": "function",
                    "function": {"name": self.tool_name, "arguments": BENCH_TOOL_ARGS},
                }],
            }
        return {"success": True, "response": "final answer", "tool_calls": []}

    async def generate(self, prompt: Any, model: str = "", **kwargs: Any) -> dict:
        self.generate_calls += 1
        return {"success": True, "response": "ok"}


class BenchCtx(MockCtx):
    """conftest.MockCtx with the instant LLM and non-retaining send/context sinks."""

    class _NullSend:
        def __init__(self, ctx: "BenchCtx") -> None:
            self._ctx = ctx

        async def text(self, text: str, stream_id: str, **kwargs: Any) -> bool:
            self._ctx.sent_count += 1
            return True

    class _CountingMaisaka:
        class _Context:
            def __init__(self, parent: "BenchCtx._CountingMaisaka") -> None:
                self._parent = parent

            async def append(self, stream_id: str, segments: list, *, visible_text: str = "",
                             source_kind: str = "", message_id: str = "", **kwargs: Any) -> dict:
                self._parent.kinds[source_kind] += 1
                cb = self._parent.on_append
                if cb is not None:
                    cb(source_kind)
                return {"success": True, "index": 0, "stream_id": stream_id,
                        "visible_text": visible_text, "source_kind": source_kind}

        def __init__(self) -> None:
            self.kinds: Counter[str] = Counter()
            self.on_append = None
            self.context = self._Context(self)

    def __init__(self, llm: InstantToolLLM) -> None:
        super().__init__()
        self.llm = llm  # type: ignore[assignment]
        self.sent_count = 0
        self.maisaka = self._CountingMaisaka()  # type: ignore[assignment]

    @property
    def send(self) -> "BenchCtx._NullSend":  # type: ignore[override]
        return self._NullSend(self)


async def _bench_echo(**kwargs: Any) -> dict:
    return {"success": True, "echo": kwargs.get("text", "")}


def bench_tool() -> ToolDefinition:
    """The trivial registered tool used by the fake LLM (discoverable, guest+)."""
    return ToolDefinition(
        name=BENCH_TOOL,
        description="Echo the given text back (benchmark no-op tool).",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "text to echo"}},
            "required": ["text"],
        },
        handler=_bench_echo,
        visibility="discoverable",
        min_role=Role.GUEST,
    )


# ─────────────────────────────────────────────────────────────────────────────
# Environment (lifecycle.load_plugin minus MCP / PlannerBoard / dynamic APIs)
# ─────────────────────────────────────────────────────────────────────────────

class Env:
    ctx: BenchCtx
    llm: InstantToolLLM
    config: MaibotAgentConfig
    store: TaskStore
    registry: ToolRegistry
    scheduler: TaskScheduler
    manager: TaskManager
    prompt_service: PromptService
    completed: Counter
    waiters: list


async def build_env(
    db_path: Path,
    *,
    max_concurrent: int = 4,
    k: int = 5,
    mode: str = "tool",
    start_scheduler: bool = True,
    register_bench_tool: bool = True,
    permission: PermissionConfig | None = None,
) -> Env:
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(str(db_path) + suffix)
        if p.exists():
            p.unlink()

    env = Env()
    env.llm = InstantToolLLM(k=k, mode=mode)
    env.ctx = BenchCtx(env.llm)
    env.config = MaibotAgentConfig(
        permission=permission or PermissionConfig(admins=[OWNER]),
        task=TaskConfig(max_concurrent_tasks=max_concurrent),
    )
    env.store = TaskStore(db_path)
    await env.store.init()
    env.registry = ToolRegistry()
    resolver = PermissionResolver(env.config.permission)
    bus = TaskCommandBus()
    env.scheduler = TaskScheduler(config=env.config.task, store=env.store, command_bus=bus)
    pm = PromptManager(OMA_SRC / "prompt" / "templates")
    env.prompt_service = PromptService(manager=pm, builders=ALL_BUILDERS)
    sender = ReplySender(ctx=env.ctx, config_getter=lambda: env.config, prompt_service=env.prompt_service)

    async def llm_title(intent: str) -> str:
        # same as lifecycle.llm_title
        try:
            prompt = env.prompt_service.build("title", intent=intent)
            result = await env.ctx.llm.generate(prompt=prompt, model="utils", timeout_ms=60000)
            title = str(result.get("response", "")).strip()
            if title:
                return title
        except Exception:
            pass
        return intent[:40]

    env.manager = TaskManager(
        ctx=env.ctx, store=env.store, scheduler=env.scheduler, registry=env.registry,
        resolver=resolver, config=env.config, llm_title=llm_title,
        data_dir=db_path.parent / "data", prompt_manager=pm,
        prompt_service=env.prompt_service, command_bus=bus, sender=sender,
    )
    env.scheduler.set_executor(env.manager.execute_task)
    await env.manager.setup()
    if register_bench_tool:
        env.registry.register(bench_tool())

    # Completion observer: wrap the instance's on_task_completed (the single
    # completion entry point; AgentExecutor / InstantExecutor look it up on the
    # scheduler object at execution time). Counts only, then delegates.
    env.completed = Counter()
    env.waiters = []
    orig = env.scheduler.on_task_completed

    async def observed(task: TaskRecord) -> None:
        await orig(task)
        env.completed[(task.level.value, task.status.value)] += 1
        for cond, ev in env.waiters:
            if not ev.is_set() and cond(env.completed):
                ev.set()

    env.scheduler.on_task_completed = observed  # type: ignore[method-assign]
    if start_scheduler:
        await env.scheduler.start()
    return env


def wait_for(env: Env, cond) -> asyncio.Event:
    ev = asyncio.Event()
    if cond(env.completed):
        ev.set()
    env.waiters.append((cond, ev))
    return ev


async def create(env: Env, i: int) -> TaskRecord:
    ok, t = await env.manager.create_task(
        intent=f"benchmark task {i}", owner=OWNER, platform=PLATFORM, stream_id=STREAM,
        level=TaskLevel.AGENT, caller_role=Role.ADMIN,
    )
    assert ok, t
    return t  # type: ignore[return-value]


async def shutdown(env: Env) -> None:
    await env.scheduler.stop()
    # let stray background tasks (reply deliveries) finish or be cancelled
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("VmRSS not found")


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
