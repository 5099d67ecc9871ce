"""The plugin as MaiBot loads it, against a fake mai-agent: what reaches mai-agent for a tool
call, the hooks, and MaiBot's own manifest validation. Needs MaiBot's Python (maibot_sdk);
skipped elsewhere."""

import asyncio
import importlib.util
import json
import sys
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

from aiohttp import web
from aiohttp.test_utils import TestServer

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "mai_agent_bridge"

try:
    import maibot_sdk  # noqa: F401

    HAVE_SDK = True
except ImportError:
    HAVE_SDK = False

HERE = "a" * 32
OTHER = "b" * 32


def load_plugin_module():
    """Imports plugin.py the way MaiBot's runner does (a module with the folder as its path)."""
    name = "mai_agent_bridge_under_test"
    spec = importlib.util.spec_from_file_location(
        name, PLUGIN_DIR / "plugin.py", submodule_search_locations=[str(PLUGIN_DIR)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class FakeCtx:
    def __init__(self, data_dir):
        self.paths = SimpleNamespace(data_dir=data_dir, runtime_dir=data_dir)
        self.logger = __import__("logging").getLogger("test.plugin")
        self.chat = SimpleNamespace(get_all_streams=self._streams)

    async def _streams(self, platform="qq"):
        return [
            {"session_id": HERE, "platform": "qq", "group_id": "42", "user_id": "first", "is_group_session": True},
            {"session_id": OTHER, "platform": "qq", "group_id": "7", "user_id": "", "is_group_session": True},
        ]


class FakeMaiAgent:
    def __init__(self):
        self.calls = []
        self.messages = []
        self.outcome = "stored"

    async def tool(self, request):
        self.calls.append((request.match_info["name"], await request.json(), request.headers.get("Authorization")))
        return web.json_response({"success": True, "tasks": []})

    async def board(self, request):
        return web.json_response(
            {"stream_id": request.query["stream_id"], "session": request.query["session"], "board": "BOARD"}
        )

    async def message(self, request):
        self.messages.append(await request.json())
        return web.json_response({"outcome": self.outcome, "stream_id": HERE})


@unittest.skipUnless(HAVE_SDK, "needs MaiBot's Python (maibot_sdk)")
class PluginTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.module = load_plugin_module()
        self.fake = FakeMaiAgent()
        app = web.Application()
        app.router.add_post("/v1/planner/tools/{name}", self.fake.tool)
        app.router.add_get("/v1/planner/board", self.fake.board)
        app.router.add_post("/v1/messages", self.fake.message)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        self.tmp = tempfile.TemporaryDirectory()
        self.plugin = self.module.create_plugin()
        self.plugin._set_context(FakeCtx(Path(self.tmp.name)))
        self.plugin.set_plugin_config(
            {"plugin": {"config_version": "1.0.0"},
             "mai_agent": {"endpoint": f"http://127.0.0.1:{self.server.port}", "token": "tok"}}
        )
        self.plugin._host = self.module.MaiBotHost(self.plugin.ctx, None)

    async def asyncTearDown(self):
        await self.plugin._api.close()
        await self.server.close()
        self.tmp.cleanup()

    async def test_a_model_written_identity_of_another_group_never_reaches_mai_agent(self):
        payload = {
            # MaiBot's injection, then the model's arguments over it:
            "stream_id": HERE, "chat_id": HERE, "group_id": "999", "user_id": "admin", "platform": "tg",
            "status": "running",
        }
        result = await self.plugin.tool_subagent_list(**payload)
        self.assertTrue(result["success"], result)
        name, body, auth = self.fake.calls[0]
        self.assertEqual(name, "subagent_list")
        self.assertEqual(auth, "Bearer tok")
        self.assertEqual(body["arguments"], {"status": "running", "stream_id": HERE})
        self.assertEqual(body["context"], {"chat_id": HERE, "platform": "qq", "group_id": "42"})

    async def test_a_model_written_chat_id_of_another_group_is_refused_without_calling_mai_agent(self):
        result = await self.plugin.tool_subagent_list(stream_id=HERE, chat_id=OTHER)
        self.assertFalse(result["success"])
        self.assertEqual(self.fake.calls, [])

    async def test_both_ids_written_by_the_model_are_refused_after_the_planner_output_was_seen(self):
        output = [{"item_type": "FunctionCallItem", "meta": {},
                   "tool_call": {"call_id": "c", "func_name": "mai_subagent_list",
                                 "args": {"stream_id": OTHER, "chat_id": OTHER}}}]
        await self.plugin.on_planner_response(session_id=HERE, output_items=output)
        result = await self.plugin.tool_subagent_list(stream_id=OTHER, chat_id=OTHER)
        self.assertFalse(result["success"])
        self.assertEqual(self.fake.calls, [])

    async def test_the_board_is_appended_to_the_planner_items(self):
        items = [{"item_type": "UserMessageItem", "meta": {}, "parts": []}]
        result = await self.plugin.on_planner_request(session_id=HERE, items=items, item_schema_version=1)
        self.assertEqual(result["modified_kwargs"]["item_schema_version"], 1)
        new_items = result["modified_kwargs"]["items"]
        self.assertEqual(len(new_items), 2)
        self.assertIn("BOARD", new_items[-1]["parts"][0]["text"])

    async def test_a_command_stops_maibot_and_other_messages_continue(self):
        message = {
            "session_id": HERE, "platform": "qq", "processed_plain_text": "/mt list", "message_id": "m-81",
            "message_info": {"user_info": {"user_id": "10001", "user_nickname": "Ann"},
                             "group_info": {"group_id": "42", "group_name": "Team"}},
        }
        self.fake.outcome = "command"
        self.assertEqual((await self.plugin.on_message(message=message))["action"], "abort")
        self.fake.outcome = "stored"
        self.assertEqual((await self.plugin.on_message(message=message))["action"], "continue")
        self.assertEqual(
            self.fake.messages[0],
            {"platform": "qq", "stream_id": HERE, "user_id": "10001", "sender_name": "Ann",
             "text": "/mt list", "message_id": "m-81", "group_id": "42", "group_name": "Team"},
        )

    async def test_maibot_continues_when_mai_agent_is_down(self):
        await self.server.close()
        message = {"session_id": HERE, "platform": "qq", "processed_plain_text": "hi",
                   "message_info": {"user_info": {"user_id": "1", "user_nickname": "A"}}}
        self.assertEqual((await self.plugin.on_message(message=message))["action"], "continue")
        self.assertEqual((await self.plugin.on_planner_request(session_id=HERE, items=[]))["action"], "continue")
        result = await self.plugin.tool_subagent_list(stream_id=HERE, chat_id=HERE)
        self.assertFalse(result["success"])
        self.assertIn("not reachable", result["error"])

    def test_the_plugin_declares_eleven_tools_and_three_hooks(self):
        components = self.plugin.get_components()
        tools = sorted(c["name"] for c in components if c["type"] == "TOOL")
        hooks = sorted(c["metadata"]["hook"] for c in components if c["type"] == "HOOK_HANDLER")
        self.assertEqual(len(tools), 11)
        self.assertIn("mai_subagent_create", tools)
        self.assertEqual(
            hooks, ["chat.receive.after_process", "maisaka.planner.after_response", "maisaka.planner.before_request"]
        )
        create = next(c for c in components if c["name"] == "mai_subagent_create")
        self.assertEqual(create["metadata"]["visibility"], "visible")


_INSTANCE = tempfile.mkdtemp(prefix="maibot-instance-")


def _maibot_validator():
    """MaiBot's own manifest validator (an installed MaiBot needs an instance directory)."""
    import os

    os.environ.setdefault("MAIBOT_INSTANCE_DIR", _INSTANCE)
    try:
        from src.plugin_runtime.runner.manifest_validator import ManifestValidator
    except Exception:  # noqa: BLE001 - no MaiBot here: the test is skipped
        return None
    return ManifestValidator


@unittest.skipUnless(HAVE_SDK and _maibot_validator() is not None, "needs MaiBot installed")
class ManifestTests(unittest.TestCase):
    def test_maibot_accepts_the_manifest(self):
        validator = _maibot_validator()()
        manifest = json.loads((PLUGIN_DIR / "_manifest.json").read_text())
        parsed = validator.parse_manifest(manifest)
        self.assertIsNotNone(parsed, validator.errors)


if __name__ == "__main__":
    unittest.main()
