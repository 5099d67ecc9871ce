"""The bridge against a fake mai-agent (aiohttp test server): frames, token, reconnect, and the
part-id memory that makes `send_text` idempotent across restarts."""

import asyncio
import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp import WSMsgType, web  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402

from mai_agent_bridge.bridge import BridgeClient, PartIdMemory, bridge_url  # noqa: E402
from mai_agent_bridge.host import MaiBotHost  # noqa: E402

WAIT = 5.0
TOKEN = "s3cret"


class FakeSend:
    def __init__(self):
        self.sent = []

    async def text(self, text, stream_id, **kwargs):
        self.sent.append((stream_id, text, kwargs))
        return True


class FakeChat:
    async def get_all_streams(self, platform="qq"):
        return [
            {"session_id": "g" * 32, "platform": "qq", "group_id": "42", "group_name": "Team",
             "user_id": "", "user_nickname": "", "is_group_session": True},
        ]


class FakeCtx:
    def __init__(self):
        self.send = FakeSend()
        self.chat = FakeChat()


class FakeMaiAgent:
    """Accepts bridges; hands each connection's frames to the test through a queue."""

    def __init__(self):
        self.connections = asyncio.Queue()
        self.attempts = asyncio.Queue()
        self.auth = []

    async def bridge(self, request):
        self.auth.append(request.headers.get("Authorization"))
        await self.attempts.put(request.headers.get("Authorization"))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.Response(status=401, text="token")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        inbox = asyncio.Queue()
        await self.connections.put((ws, inbox))
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await inbox.put(json.loads(msg.data))
        return ws


async def next_frame(inbox):
    return await asyncio.wait_for(inbox.get(), WAIT)


class BridgeTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.fake = FakeMaiAgent()
        app = web.Application()
        app.router.add_get("/v1/bridge", self.fake.bridge)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        self.endpoint = f"http://127.0.0.1:{self.server.port}"
        self.ctx = FakeCtx()
        self.clients = []

    async def asyncTearDown(self):
        for client, task in self.clients:
            client.stop()
            await asyncio.wait_for(task, WAIT)
        await self.server.close()
        self.tmp.cleanup()

    def start(self, token=TOKEN):
        host = MaiBotHost(self.ctx, PartIdMemory(Path(self.tmp.name) / "parts.txt"))
        client = BridgeClient(
            lambda: (self.endpoint, token), host.handle, {"plugin_version": "t", "maibot_version": "t"},
            backoff_start=0.01, backoff_max=0.05,
        )
        task = asyncio.ensure_future(client.run())
        self.clients.append((client, task))
        return client

    async def connect(self):
        ws, inbox = await asyncio.wait_for(self.fake.connections.get(), WAIT)
        hello = await next_frame(inbox)
        self.assertEqual(hello["method"], "hello")
        self.assertEqual(hello["id"], "hello")
        await ws.send_json({"id": "hello", "result": {"server_version": "9.9.9"}})
        return ws, inbox

    async def test_the_plugin_says_hello_first_with_the_bearer_token(self):
        client = self.start()
        await self.connect()
        await asyncio.wait_for(client.connected.wait(), WAIT)
        self.assertEqual(client.server_version, "9.9.9")
        self.assertEqual(self.fake.auth[0], f"Bearer {TOKEN}")

    async def test_send_text_sends_once_and_answers_duplicate_for_a_repeated_part(self):
        self.start()
        ws, inbox = await self.connect()
        params = {"stream_id": "g" * 32, "text": "done", "part_id": "task1:0"}
        await ws.send_json({"id": "1", "method": "send_text", "params": params})
        self.assertEqual(await next_frame(inbox), {"id": "1", "result": {"sent": True}})
        await ws.send_json({"id": "2", "method": "send_text", "params": params})
        self.assertEqual(await next_frame(inbox), {"id": "2", "result": {"sent": True, "duplicate": True}})
        self.assertEqual(len(self.ctx.send.sent), 1)
        stream_id, text, kwargs = self.ctx.send.sent[0]
        self.assertEqual((stream_id, text), ("g" * 32, "done"))
        self.assertTrue(kwargs["sync_to_maisaka_history"])

    async def test_a_part_sent_before_a_restart_is_a_duplicate_after_it(self):
        client = self.start()
        ws, inbox = await self.connect()
        params = {"stream_id": "g" * 32, "text": "done", "part_id": "task1:0"}
        await ws.send_json({"id": "1", "method": "send_text", "params": params})
        await next_frame(inbox)
        client.stop()
        await asyncio.wait_for(self.clients.pop()[1], WAIT)
        self.start()  # a new plugin process: a fresh memory read from the data dir
        ws, inbox = await self.connect()
        await ws.send_json({"id": "3", "method": "send_text", "params": params})
        self.assertEqual(await next_frame(inbox), {"id": "3", "result": {"sent": True, "duplicate": True}})
        self.assertEqual(len(self.ctx.send.sent), 1)

    async def test_unknown_methods_answer_unsupported_and_ping_answers_pong(self):
        self.start()
        ws, inbox = await self.connect()
        await ws.send_json({"id": "7", "method": "teleport", "params": {}})
        answer = await next_frame(inbox)
        self.assertEqual(answer["id"], "7")
        self.assertEqual(answer["error"]["code"], "unsupported")
        await ws.send_json({"id": "8", "method": "ping"})
        self.assertEqual(await next_frame(inbox), {"id": "8", "result": "pong"})
        await ws.send_json({"id": "9", "method": "send_text", "params": {"stream_id": "x"}})
        self.assertEqual((await next_frame(inbox))["error"]["code"], "invalid")

    async def test_stream_info_is_answered_from_maibots_streams(self):
        self.start()
        ws, inbox = await self.connect()
        await ws.send_json({"id": "s", "method": "stream_info", "params": {"stream_id": "g" * 32}})
        answer = await next_frame(inbox)
        self.assertEqual(
            answer["result"],
            {"stream_id": "g" * 32, "platform": "qq", "target": {"kind": "group", "group_id": "42"}, "name": "Team"},
        )
        await ws.send_json({"id": "n", "method": "stream_info", "params": {"stream_id": "nope"}})
        self.assertEqual(await next_frame(inbox), {"id": "n", "result": None})

    async def test_the_plugin_reconnects_after_mai_agent_drops_the_bridge(self):
        self.start()
        ws, _ = await self.connect()
        await ws.close()
        await self.connect()  # a second connection, again starting with hello

    async def test_a_wrong_token_is_retried_until_stopped_without_crashing(self):
        client = self.start(token="wrong")
        # Two attempts: refused, backed off, tried again.
        for _ in range(2):
            self.assertEqual(await asyncio.wait_for(self.fake.attempts.get(), WAIT), "Bearer wrong")
        self.assertFalse(client.connected.is_set())


class PartIdMemoryTests(unittest.TestCase):
    def test_the_memory_keeps_the_last_ids_across_instances_and_stays_bounded(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "parts.txt"
            memory = PartIdMemory(path, capacity=3)
            for i in range(10):
                memory.add(f"p{i}")
            self.assertEqual(len(memory), 3)
            again = PartIdMemory(path, capacity=3)
            self.assertIn("p9", again)
            self.assertIn("p7", again)
            self.assertNotIn("p6", again)
            self.assertLessEqual(len(path.read_text().splitlines()), 6)

    def test_bridge_url_follows_the_endpoint_scheme(self):
        self.assertEqual(bridge_url("http://127.0.0.1:8760/"), "ws://127.0.0.1:8760/v1/bridge")
        self.assertEqual(bridge_url("https://agent.example"), "wss://agent.example/v1/bridge")


if __name__ == "__main__":
    unittest.main()
