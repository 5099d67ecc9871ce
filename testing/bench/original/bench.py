# Vendored: the benchmark harness of the original implementation, oh-mai-agent
# (github.com/Dreamwxz/oh-mai-agent, commit 072aefa902958adf741d49bac28a8c7cbb035888, GPL-3.0),
# written for this project to measure the original with its own test suite's wiring (an instant
# fake model, a real SQLite TaskStore). It imports the original from $OMA_SRC and changes
# nothing in it. testing/bench/compare-original.sh copies it outside the repo, sets up its venv
# and runs `bench.py b` interleaved with our `loadgen http --instant-model`. Nothing in the repo
# imports it. Kept as it was measured: edit it only to follow a change of the original.
"""oh-mai-agent (Python original) runtime-overhead benchmark — one repetition per call.

Usage:  venv/bin/python bench.py {a|b|c|d|e} [--rep N]
Each call prints ONE JSON object on stdout (run_all.py runs every measurement
5 times in fresh processes and summarises median / min / max).

  a  per-round AgentLoop overhead, single task at a time (instant fake LLM, K=5)
  b  throughput: N=200 agent tasks via TaskManager.create_task, max_concurrent_tasks=4
  c  memory: RSS delta for 1000 tasks suspended in WAITING_INPUT (ask_user)
  d  ToolRegistry presentation filtering with 200 registered tools
  e  tool-schema JSON size per round for guest / user / admin (default setup)

See README.txt for the exact workload definitions.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import bench_common as bc
from bench_common import Role, TaskLevel, TaskStatus, median

K = 5


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


# ═════════════════════════════════════════════════════════════════════════════
# (a) per-round overhead
# ═════════════════════════════════════════════════════════════════════════════

async def bench_a(rep: int, n_tasks: int = 40, warmup: int = 3) -> dict:
    env = await bc.build_env(bc.WORK_DIR / f"a-{rep}.db", max_concurrent=4, k=K)
    done_times: list[float] = []
    orig = env.scheduler.on_task_completed

    async def stamp(task):  # record the moment the agent task is COMPLETED+persisted
        if task.level == TaskLevel.AGENT:
            done_times.append(time.perf_counter())
        await orig(task)

    env.scheduler.on_task_completed = stamp  # type: ignore[method-assign]

    rounds: list[float] = []
    startup: list[float] = []
    finalize: list[float] = []
    e2e: list[float] = []
    e2e_with_reply: list[float] = []
    for i in range(warmup + n_tasks):
        target = i + 1
        ev = bc.wait_for(env, lambda c, t=target: c[("agent", "completed")] >= t
                         and c[("instant", "completed")] >= t)
        env.llm.timestamps = []
        t0 = time.perf_counter()
        await bc.create(env, i)
        await asyncio.wait_for(ev.wait(), 60)
        t_end = time.perf_counter()
        ts = env.llm.timestamps
        assert len(ts) == K + 1, len(ts)
        if i < warmup:
            continue
        rounds.extend((ts[j + 1] - ts[j]) * 1e3 for j in range(K))
        startup.append((ts[0] - t0) * 1e3)
        finalize.append((done_times[-1] - ts[-1]) * 1e3)
        e2e.append((done_times[-1] - t0) * 1e3)
        e2e_with_reply.append((t_end - t0) * 1e3)
    env.llm.timestamps = None
    await env.scheduler.stop()

    # ── component micro-timings on the same DB / registry (no tasks running) ──
    comp = await _components(env)
    await bc.shutdown(env)
    return {
        "bench": "a", "rep": rep, "tasks": n_tasks, "k": K,
        "round_ms_median": median(rounds), "round_ms_p10": _pct(rounds, .1),
        "round_ms_p90": _pct(rounds, .9), "round_samples": len(rounds),
        "startup_ms_median": median(startup),
        "finalize_ms_median": median(finalize),
        "task_e2e_ms_median": median(e2e),
        "task_e2e_incl_reply_ms_median": median(e2e_with_reply),
        "components": comp,
    }


async def _components(env: bc.Env, n_db: int = 300, n_schema: int = 3000) -> dict:
    from conftest import make_task
    from oh_mai_agent.executor.agent_loop import AgentLoop

    loop_obj = AgentLoop(ctx=env.ctx, registry=env.registry, store=env.store,
                         command_bus=env.manager._command_bus,
                         prompt_service=env.prompt_service)
    out: dict[str, Any] = {}
    for role in (Role.ADMIN,):
        t0 = time.perf_counter()
        for _ in range(n_schema):
            loop_obj._build_tool_schemas(role)
        out["build_tool_schemas_admin_us"] = (time.perf_counter() - t0) / n_schema * 1e6

    task = make_task(task_id="comp-task", status=TaskStatus.RUNNING)
    await env.store.save(task)
    entry = {"round": 2, "llm_result": {"response": "", "tool_calls": [{
        "id": "call_2", "type": "function",
        "function": {"name": bc.BENCH_TOOL, "arguments": bc.BENCH_TOOL_ARGS}}]},
        "timestamp": "2026-01-01T00:00:00",
        "new_messages": [
            {"role": "assistant", "tool_calls": [{"id": "call_2", "type": "function",
             "function": {"name": bc.BENCH_TOOL, "arguments": bc.BENCH_TOOL_ARGS}}]},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"success": true, "echo": "ping"}'}]}

    async def timeit_async(fn, n):
        xs = []
        for _ in range(n):
            t0 = time.perf_counter()
            await fn()
            xs.append((time.perf_counter() - t0) * 1e3)
        return median(xs)

    out["store_append_history_ms"] = await timeit_async(lambda: env.store.append_history(task.id, entry), n_db)
    out["store_get_ms"] = await timeit_async(lambda: env.store.get(task.id), n_db)
    out["store_save_guarded_ms"] = await timeit_async(
        lambda: env.store.save(task, expected_status=TaskStatus.RUNNING), n_db)
    out["to_thread_noop_ms"] = await timeit_async(lambda: asyncio.to_thread(lambda: None), n_db)

    # Same three statements on ONE persistent connection (what the store does
    # per round, without open/close per call and without the thread hop).
    db = env.store._db_path
    data = json.dumps(task.to_dict(), ensure_ascii=False)
    ej = json.dumps(entry, ensure_ascii=False)
    with closing(sqlite3.connect(db)) as conn:
        xs = []
        for _ in range(n_db):
            t0 = time.perf_counter()
            conn.execute("INSERT INTO task_history (task_id, entry, created_at) VALUES (?, ?, ?)",
                         (task.id, ej, "2026-01-01T00:00:00"))
            conn.commit()
            conn.execute("SELECT data FROM tasks WHERE id = ?", (task.id,)).fetchone()
            conn.execute("UPDATE tasks SET data = ?, status = ? WHERE id = ? AND status = ?",
                         (data, "running", task.id, "running"))
            conn.commit()
            xs.append((time.perf_counter() - t0) * 1e3)
        out["persistent_conn_3stmt_ms"] = median(xs)
        out["sqlite_synchronous"] = conn.execute("PRAGMA synchronous").fetchone()[0]
        out["sqlite_journal_mode"] = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return out


# ═════════════════════════════════════════════════════════════════════════════
# (b) throughput
# ═════════════════════════════════════════════════════════════════════════════

async def bench_b(rep: int, n: int = 200, warmup: int = 2) -> dict:
    env = await bc.build_env(bc.WORK_DIR / f"b-{rep}.db", max_concurrent=4, k=K)
    ev = bc.wait_for(env, lambda c: c[("agent", "completed")] >= warmup
                     and c[("instant", "completed")] >= warmup)
    for i in range(warmup):
        await bc.create(env, -1 - i)
    await asyncio.wait_for(ev.wait(), 60)

    agent_done_at: list[float] = []
    orig = env.scheduler.on_task_completed

    async def stamp(task):
        if task.level == TaskLevel.AGENT:
            agent_done_at.append(time.perf_counter())
        await orig(task)

    env.scheduler.on_task_completed = stamp  # type: ignore[method-assign]
    total = warmup + n
    ev_all = bc.wait_for(env, lambda c: c[("agent", "completed")] >= total
                         and c[("instant", "completed")] >= total)
    llm_calls0 = env.llm.tool_calls
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(n):
        await bc.create(env, i)
    t_created = time.perf_counter()
    await asyncio.wait_for(ev_all.wait(), 600)
    t_all = time.perf_counter()
    cpu = time.process_time() - cpu0
    t_agents = agent_done_at[n - 1]
    await env.scheduler.stop()
    n_completed = await env.store.count(status=TaskStatus.COMPLETED)
    n_failed = await env.store.count(status=TaskStatus.FAILED)
    n_hist = 0
    with closing(sqlite3.connect(env.store._db_path)) as conn:
        n_hist = conn.execute("SELECT COUNT(*) FROM task_history").fetchone()[0]
    res = {
        "bench": "b", "rep": rep, "n": n, "k": K, "max_concurrent": 4,
        "create_phase_s": t_created - t0,
        "agents_done_s": t_agents - t0,
        "all_done_s": t_all - t0,
        "agent_tasks_per_s": n / (t_agents - t0),
        "agent_tasks_per_s_incl_replies": n / (t_all - t0),
        "cpu_s": cpu, "cpu_util": cpu / (t_all - t0),
        "llm_tool_calls": env.llm.tool_calls - llm_calls0,
        "db_completed": n_completed, "db_failed": n_failed, "db_history_rows": n_hist,
    }
    await bc.shutdown(env)
    return res


# ═════════════════════════════════════════════════════════════════════════════
# (c) memory: 1000 tasks in WAITING_INPUT
# ═════════════════════════════════════════════════════════════════════════════

async def bench_c(rep: int, n: int = 1000) -> dict:
    env = await bc.build_env(bc.WORK_DIR / f"c-{rep}.db", max_concurrent=n + 10, k=0, mode="ask")
    waiting_kind = "plugin:oh-mai-agent:task-waiting"
    state = {"target": 1, "ev": asyncio.Event()}

    def on_append(kind: str) -> None:
        if kind == waiting_kind and env.ctx.maisaka.kinds[waiting_kind] >= state["target"]:
            state["ev"].set()

    env.ctx.maisaka.on_append = on_append

    # warm-up: one task through ask_user -> user reply -> resume -> completion,
    # plus a burst of concurrent store calls so the to_thread pool is fully spun up.
    done = bc.wait_for(env, lambda c: c[("agent", "completed")] >= 1 and c[("instant", "completed")] >= 1)
    await bc.create(env, -1)
    await asyncio.wait_for(state["ev"].wait(), 30)
    await asyncio.sleep(0)  # let the loop reach resume_event.wait()
    await env.manager.handle_user_reply(stream_id=bc.STREAM, user_id="10001", reply="yes", platform="qq")
    await asyncio.wait_for(done.wait(), 30)
    await asyncio.gather(*(env.store.count() for _ in range(64)))

    gc.collect()
    await asyncio.sleep(0.05)
    rss0 = bc.rss_kib()
    tasks0 = len(asyncio.all_tasks())

    state["target"] = 1 + n
    state["ev"] = asyncio.Event()
    t0 = time.perf_counter()
    for i in range(n):
        await bc.create(env, i)
    t_created = time.perf_counter()
    await asyncio.wait_for(state["ev"].wait(), 600)
    # the waiting-note count can overshoot if a task was dispatched twice
    # (scheduler race, see README) -> also wait until the DB shows n rows.
    for _ in range(200):
        n_waiting = await env.store.count(status=TaskStatus.WAITING_INPUT)
        if n_waiting >= n:
            break
        await asyncio.sleep(0.05)
    t_waiting = time.perf_counter()
    await asyncio.sleep(0.2)
    n_waiting = await env.store.count(status=TaskStatus.WAITING_INPUT)
    gc.collect()
    rss1 = bc.rss_kib()
    # cost of the scheduler's 1 Hz poll query with n active rows
    xs = []
    for _ in range(5):
        t = time.perf_counter()
        await env.store.list_active()
        xs.append((time.perf_counter() - t) * 1e3)
    res = {
        "bench": "c", "rep": rep, "n": n,
        "rss_before_kib": rss0, "rss_after_kib": rss1,
        "rss_delta_kib": rss1 - rss0, "rss_delta_per_task_kib": (rss1 - rss0) / n,
        "asyncio_tasks_before": tasks0, "asyncio_tasks_after": len(asyncio.all_tasks()),
        "db_waiting_input": n_waiting,
        "create_phase_s": t_created - t0, "all_waiting_s": t_waiting - t0,
        "scheduler_running_set": env.scheduler.active_count(),
        "waiting_notes": env.ctx.maisaka.kinds[waiting_kind] - 1,
        "list_active_ms_at_n": median(xs),
    }
    return res  # process exits right after printing (tasks left suspended)


# ═════════════════════════════════════════════════════════════════════════════
# (d) registry filtering with 200 tools
# ═════════════════════════════════════════════════════════════════════════════

def make_200_registry():
    """tool_000: essential, min_role=user (like ask_user);
    tool_001..tool_199: discoverable, min_role = (guest, user, admin)[i % 3]."""
    from oh_mai_agent.tools.registry import ToolDefinition, ToolRegistry
    reg = ToolRegistry()
    roles = (Role.GUEST, Role.USER, Role.ADMIN)
    for i in range(200):
        reg.register(ToolDefinition(
            name=f"tool_{i:03d}",
            description=f"Synthetic tool number {i} used for registry filtering benchmarks.",
            parameters={"type": "object",
                        "properties": {"q": {"type": "string", "description": "query"}},
                        "required": ["q"]},
            handler=bc._bench_echo,
            visibility="essential" if i == 0 else "discoverable",
            min_role=Role.USER if i == 0 else roles[i % 3],
        ))
    return reg


def bench_d(rep: int, batches: int = 9, per_batch: int = 500) -> dict:
    """Per-call time of list_essential(role)+list_discoverable(role) on a
    200-tool registry (and the same plus build_llm_tool_schemas, i.e. what
    AgentLoop._build_tool_schemas does). timeit-style: `batches` batches of
    `per_batch` calls; reports the median batch and the best batch (µs/call)."""
    from oh_mai_agent.tools.registry import build_llm_tool_schemas
    reg = make_200_registry()
    out: dict[str, Any] = {"bench": "d", "rep": rep, "tools": 200,
                           "batches": batches, "per_batch": per_batch}

    def filt(role):
        reg.list_essential(role)
        reg.list_discoverable(role)

    def filt_schemas(role):
        build_llm_tool_schemas(reg.list_essential(role))
        build_llm_tool_schemas(reg.list_discoverable(role))

    for role in (Role.GUEST, Role.USER, Role.ADMIN):
        out[f"visible_{role.value}"] = len(reg.list_essential(role)) + len(reg.list_discoverable(role))
        for name, fn in (("filter", filt), ("filter_plus_schemas", filt_schemas)):
            for _ in range(300):  # warm-up
                fn(role)
            xs = []
            for _ in range(batches):
                t0 = time.perf_counter()
                for _ in range(per_batch):
                    fn(role)
                xs.append((time.perf_counter() - t0) / per_batch * 1e6)
            out[f"{name}_us_{role.value}_median"] = median(xs)
            out[f"{name}_us_{role.value}_best"] = min(xs)
    return out


# ═════════════════════════════════════════════════════════════════════════════
# (e) schema size per round
# ═════════════════════════════════════════════════════════════════════════════

async def bench_e(rep: int, with_mcp_fetch: bool = True) -> dict:
    from oh_mai_agent.executor.agent_loop import AgentLoop
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(bc.BENCH_DIR / "tiktoken_cache"))
    try:
        import tiktoken
        enc = tiktoken.get_encoding("cl100k_base")
    except Exception as exc:  # pragma: no cover
        enc = None
        tk_err = repr(exc)
    env = await bc.build_env(bc.WORK_DIR / f"e-{rep}.db", start_scheduler=False, register_bench_tool=False)
    loop_obj = AgentLoop(ctx=env.ctx, registry=env.registry, store=env.store,
                         command_bus=env.manager._command_bus, prompt_service=env.prompt_service)

    def measure(tag: str) -> dict:
        res = {}
        for role in (Role.GUEST, Role.USER, Role.ADMIN):
            schemas = loop_obj._build_tool_schemas(role)
            s = json.dumps(schemas, ensure_ascii=False)
            s_compact = json.dumps(schemas, ensure_ascii=False, separators=(",", ":"))
            s_ascii = json.dumps(schemas)
            r = {
                "tools": len(schemas),
                "names": [x["function"]["name"] for x in schemas],
                "json_chars": len(s), "json_utf8_bytes": len(s.encode()),
                "json_compact_chars": len(s_compact),
                "json_ascii_escaped_chars": len(s_ascii),
            }
            if enc is not None:
                r["tokens_cl100k"] = len(enc.encode(s))
                r["tokens_cl100k_compact"] = len(enc.encode(s_compact))
                r["tokens_cl100k_ascii_escaped"] = len(enc.encode(s_ascii))
            res[role.value] = r
        return res

    out: dict[str, Any] = {"bench": "e", "rep": rep, "default_no_mcp": measure("no_mcp")}
    # system prompt (sent once per LLM call as messages[0]) for a typical task
    from conftest import make_task
    sp = env.prompt_service.build("agent_system", task=make_task(title="ok", intent="benchmark task 0"), bot_name="")
    out["agent_system_prompt_chars"] = len(sp)
    if enc is not None:
        out["agent_system_prompt_tokens_cl100k"] = len(enc.encode(sp))
    if with_mcp_fetch:
        try:
            from oh_mai_agent.config import MCPConfig
            from oh_mai_agent.tools.mcp.provider import MCPManager
            mgr = MCPManager(MCPConfig(exa_enabled=False))  # default fetch preset; exa = remote, unreachable here
            await mgr.start()
            defs = mgr.build_tool_definitions()
            for td in defs:
                env.registry.register(td)
            out["mcp_tools"] = [d.name for d in defs]
            out["default_with_mcp_fetch"] = measure("mcp_fetch")
            await mgr.stop()
        except Exception as exc:
            out["mcp_error"] = repr(exc)
    if enc is None:
        out["tiktoken_error"] = tk_err
    await bc.shutdown(env)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=list("abcde"))
    ap.add_argument("--rep", type=int, default=0)
    args = ap.parse_args()
    bc.WORK_DIR.mkdir(parents=True, exist_ok=True)
    os.chdir(bc.WORK_DIR)  # any relative path the plugin creates lands here
    if args.which == "d":
        res = bench_d(args.rep)
    else:
        fn = {"a": bench_a, "b": bench_b, "c": bench_c, "e": bench_e}[args.which]
        res = asyncio.run(fn(args.rep))
    sys.stdout.write(json.dumps(res, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    if args.which == "c":
        os._exit(0)  # leave the 1000 suspended tasks behind without teardown noise


if __name__ == "__main__":
    main()
