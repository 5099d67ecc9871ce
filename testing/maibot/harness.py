"""A real MaiBot, offline, for end-to-end tests, plus a fake chat platform talking to it.

Run with MaiBot's own Python (the venv `testing/maibot/setup.sh` prints):

    python harness.py --dir DIR --model-url http://127.0.0.1:PORT/v1 --ws-port N [--plugin PATH]...

It owns: preparing a MaiBot instance directory (`maibot init`, then the config: every model at
the given fake OpenAI-compatible server with no auth, telemetry, WebUI and console input off,
the maim_message websocket on the given port, the bot's QQ account), accepting the EULA and
privacy notice through their environment variables, copying plugin folders into `DIR/plugins/`,
running `maibot run` in its own process group, and playing a chat platform (`platform: qq`) on
MaiBot's maim_message websocket.

It does not: decide what the models answer (the test's fake server does), judge results (the
test does), or touch anything outside DIR.

Protocol: JSON lines. The test writes commands on stdin:
    {"op": "send", "user_id", "nickname"?, "group_id"?, "group_name"?, "text"}
        a group message when `group_id` is given, else a private message
    {"op": "stop"}   stop MaiBot (SIGTERM, then SIGKILL) and exit
The harness writes events on stdout:
    {"event": "log", "line"}          a line MaiBot printed
    {"event": "ready", "ws"}          the fake platform is connected to MaiBot's websocket
    {"event": "sent", "message_id"}   a `send` reached MaiBot's websocket
    {"event": "received", "text", "group_id", "user_id", "message"}  what MaiBot sent the chat
    {"event": "exited", "code"}       MaiBot's process ended
    {"event": "error", "message"}     a command or step failed (says what to do)
stdin closing means stop.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import tomlkit
import websockets
from maim_message import BaseMessageInfo, FormatInfo, GroupInfo, MessageBase, Seg, UserInfo

PLATFORM = "qq"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
READY_TIMEOUT_S = 120.0


def emit(event: str, **fields: Any) -> None:
    """One event line on stdout (the test's only input from us)."""
    sys.stdout.write(json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def maibot_source() -> Path:
    """The installed MaiBot package (`src/`), whose resources hold the agreements."""
    import src  # MaiBot's top-level package name

    return Path(src.__file__).parent


def agreement_env() -> dict[str, str]:
    """EULA_AGREE / PRIVACY_AGREE: the MD5 of the installed texts, as MaiBot's runtime checks."""
    resources = maibot_source() / "_resources"
    digest = {}
    for name, var in (("EULA.md", "EULA_AGREE"), ("PRIVACY.md", "PRIVACY_AGREE")):
        text = (resources / name).read_text(encoding="utf-8")
        digest[var] = hashlib.md5(text.encode("utf-8")).hexdigest()
    return digest


def maibot_command() -> list[str]:
    """`maibot` from the same venv as this Python."""
    script = Path(sys.executable).parent / "maibot"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "src.cli.tool"]


def init_instance(directory: Path) -> None:
    """`maibot init` once; it keeps an existing config."""
    if (directory / "config" / "bot_config.toml").exists():
        return
    subprocess.run(
        [*maibot_command(), "init", "-d", str(directory)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
    )


def configure_models(path: Path, model_url: str) -> None:
    """Every model and task at one fake OpenAI-compatible provider, without auth or retries."""
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    provider = tomlkit.table()
    provider.update(
        {
            "name": "Fake",
            "base_url": model_url,
            "api_key": "none",
            "client_type": "openai",
            "auth_type": "none",
            "max_retry": 1,
            "timeout": 60,
            "retry_interval": 1,
        }
    )
    providers = tomlkit.aot()
    providers.append(provider)
    doc["api_providers"] = providers
    for model in doc["models"]:
        model["api_provider"] = "Fake"
        model["model_identifier"] = "maibot-" + str(model["name"])
        model["extra_params"] = tomlkit.inline_table()
        model["force_stream_mode"] = False
    names = [str(m["name"]) for m in doc["models"] if str(m.get("model_type", "llm")) == "llm"]
    for task_name, task in doc["model_task_config"].items():
        if task_name in ("embedding", "image_embedding", "web_search", "vlm", "voice"):
            continue
        task["model_list"] = names[:1]
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def configure_bot(path: Path, ws_port: int, account: str, nickname: str) -> None:
    """The bot's identity, the platform websocket's port, and nothing that reaches out."""
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    doc["bot"]["platform"] = PLATFORM
    doc["bot"]["qq_account"] = account
    doc["bot"]["nickname"] = nickname
    doc["telemetry"]["enable"] = False
    doc["webui"]["enabled"] = False
    doc["debug"]["enable_console_input"] = False
    doc["maim_message"]["ws_server_host"] = "127.0.0.1"
    doc["maim_message"]["ws_server_port"] = ws_port
    doc["maim_message"]["enable_api_server"] = False
    doc["plugin_runtime"]["render"]["auto_download_chromium"] = False
    doc["chinese_typo"]["enable"] = False
    doc["response_splitter"]["enable"] = False
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def install_plugins(directory: Path, plugins: list[Path]) -> None:
    """A fresh copy of each plugin folder in `DIR/plugins/<folder name>`."""
    for plugin in plugins:
        if not (plugin / "_manifest.json").exists():
            raise SystemExit(f"{plugin} has no _manifest.json; pass a MaiBot plugin folder")
        target = directory / "plugins" / plugin.name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(plugin, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def message(cmd: dict[str, Any], account: str) -> dict[str, Any]:
    """What a platform adapter sends MaiBot for one incoming chat message."""
    user = UserInfo(
        platform=PLATFORM,
        user_id=str(cmd["user_id"]),
        user_nickname=cmd.get("nickname") or str(cmd["user_id"]),
        user_cardname=cmd.get("nickname") or None,
    )
    group = None
    if cmd.get("group_id"):
        group = GroupInfo(
            platform=PLATFORM,
            group_id=str(cmd["group_id"]),
            group_name=cmd.get("group_name") or f"group {cmd['group_id']}",
        )
    info = BaseMessageInfo(
        platform=PLATFORM,
        message_id=cmd.get("message_id") or uuid.uuid4().hex[:16],
        time=time.time(),
        group_info=group,
        user_info=user,
        format_info=FormatInfo(content_format=["text"], accept_format=["text", "emoji", "reply"]),
    )
    segment = Seg(type="seglist", data=[Seg(type="text", data=str(cmd["text"]))])
    payload = MessageBase(message_info=info, message_segment=segment, raw_message=cmd["text"]).to_dict()
    # MaiBot refuses to reply without knowing which account it sends from.
    payload["account_id"] = account
    return payload


def plain_text(segment: Any) -> str:
    """The text of a segment tree MaiBot sent (other kinds shown as `[type]`)."""
    if not isinstance(segment, dict):
        return ""
    kind, data = segment.get("type"), segment.get("data")
    if kind == "seglist" and isinstance(data, list):
        return "".join(plain_text(s) for s in data)
    if kind == "text":
        return str(data)
    return f"[{kind}]"


def die_with_parent() -> None:
    """In the child: Linux kills MaiBot when the harness dies, however it dies (no leftovers)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class MaiBot:
    """`maibot run` as a child in its own process group; its lines become `log` events."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, **agreement_env(), "PYTHONUNBUFFERED": "1", "TERM": "dumb"}
        self.process = await asyncio.create_subprocess_exec(
            *maibot_command(),
            "run",
            "-d",
            str(self.directory),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        asyncio.create_task(self._forward())

    async def _forward(self) -> None:
        assert self.process and self.process.stdout
        async for raw in self.process.stdout:
            emit("log", line=ANSI.sub("", raw.decode("utf-8", "replace")).rstrip())
        emit("exited", code=await self.process.wait())

    async def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after 15 s: nothing of MaiBot's outlives the harness."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                await asyncio.wait_for(process.wait(), grace)
                break
            except asyncio.TimeoutError:
                continue
        try:
            os.killpg(process.pid, signal.SIGKILL)  # runner subprocesses left behind
        except ProcessLookupError:
            pass


async def connect(url: str, maibot: MaiBot) -> Any:
    """The platform's websocket, retried until MaiBot listens (bounded)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if maibot.process and maibot.process.returncode is not None:
            raise SystemExit("MaiBot exited before its websocket listened; see the log events")
        try:
            return await websockets.connect(
                url, additional_headers={"platform": PLATFORM}, max_size=None, ping_interval=None
            )
        except (OSError, websockets.exceptions.InvalidHandshake):
            if time.monotonic() > deadline:
                raise SystemExit(f"MaiBot's websocket {url} never accepted within {READY_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.25)


async def receive(ws: Any) -> None:
    """Everything MaiBot sends the platform becomes a `received` event."""
    async for frame in ws:
        try:
            data = json.loads(frame)
        except ValueError:
            emit("received", text=str(frame), message=None, group_id=None, user_id=None)
            continue
        info = data.get("message_info") or {}
        group = info.get("group_info") or {}
        user = info.get("user_info") or {}
        emit(
            "received",
            text=plain_text(data.get("message_segment")),
            group_id=group.get("group_id"),
            user_id=user.get("user_id"),
            message=data,
        )


async def commands(ws: Any, account: str) -> None:
    """Commands from stdin until `stop` or end of input."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async for raw in reader:
        line = raw.decode("utf-8").strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            if cmd.get("op") == "stop":
                return
            if cmd.get("op") != "send":
                raise ValueError(f"unknown op {cmd.get('op')!r}; use send or stop")
            payload = message(cmd, account)
            await ws.send(json.dumps(payload, ensure_ascii=False))
            emit("sent", message_id=payload["message_info"]["message_id"])
        except Exception as error:  # one bad command must not end the harness
            emit("error", message=f"command {line!r} failed: {error}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="MaiBot instance directory")
    parser.add_argument("--model-url", required=True, help="fake OpenAI-compatible base URL (…/v1)")
    parser.add_argument("--ws-port", type=int, required=True, help="free port for MaiBot's websocket")
    parser.add_argument("--plugin", type=Path, action="append", default=[], help="plugin folder")
    parser.add_argument("--account", default="999", help="the bot's QQ account")
    parser.add_argument("--nickname", default="麦麦", help="the bot's nickname (mention it to talk)")
    args = parser.parse_args()

    directory = args.dir.resolve()
    init_instance(directory)
    configure_models(directory / "config" / "model_config.toml", args.model_url)
    configure_bot(directory / "config" / "bot_config.toml", args.ws_port, args.account, args.nickname)
    install_plugins(directory, [p.resolve() for p in args.plugin])

    maibot = MaiBot(directory)
    await maibot.start()
    try:
        url = f"ws://127.0.0.1:{args.ws_port}/ws"
        ws = await connect(url, maibot)
        emit("ready", ws=url)
        receiver = asyncio.create_task(receive(ws))
        await commands(ws, args.account)
        receiver.cancel()
        await ws.close()
    finally:
        await maibot.stop()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except SystemExit as stop:
        if stop.code not in (None, 0):
            emit("error", message=str(stop.code))
            raise SystemExit(1)
