"""Optional: starts `mai-agent serve` next to MaiBot and restarts it when it exits.

Owns: one child process (`<binary> <args…> serve`), restarted with backoff (1 s doubling to
60 s, reset after a minute of uptime), stopped (SIGTERM, then SIGKILL after 10 s) on unload.

Must not: start more than one child, or outlive the plugin.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional


class Supervisor:
    def __init__(self, binary: str, args: list[str], logger: logging.Logger) -> None:
        self._argv = [binary, *args, "serve"]
        self._log = logger
        self._stop = asyncio.Event()
        self._proc: Optional[asyncio.subprocess.Process] = None

    async def run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._proc = await asyncio.create_subprocess_exec(*self._argv)
                self._log.info("started %s (pid %s)", " ".join(self._argv), self._proc.pid)
                code = await self._proc.wait()
                self._log.warning("mai-agent serve exited with %s", code)
            except OSError as exc:
                self._log.error("cannot start %s: %s; fix the plugin's `binary`", self._argv[0], exc)
            if time.monotonic() - started > 60:
                delay = 1.0
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, 60.0)

    async def stop(self) -> None:
        self._stop.set()
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout=10)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
