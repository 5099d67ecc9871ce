"""Host methods map MaiBot's capability answers to the bridge protocol's shapes."""

import sys
import unittest
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mai_agent_bridge.bridge import HostError  # noqa: E402
from mai_agent_bridge.host import MaiBotHost  # noqa: E402

GROUP = "g" * 32
PRIVATE = "p" * 32


def message(ts, nick, text):
    return {"timestamp": str(ts), "processed_plain_text": text,
            "message_info": {"user_info": {"user_id": nick.lower(), "user_nickname": nick}}}


class FakeCtx:
    def __init__(self):
        async def get_all_streams(platform="qq"):
            return [
                {"session_id": GROUP, "platform": "qq", "group_id": "42", "group_name": "Team", "is_group_session": True},
                {"session_id": PRIVATE, "platform": "qq", "user_id": "10001", "user_nickname": "Ann",
                 "is_group_session": False},
            ]

        async def get_recent(chat_id, limit=10):
            return [message(200, "Bob", "second"), message(100, "Ann", "first")]

        async def query(model_name, query_type="get", filters=None, limit=None, **kw):
            self.queries.append((model_name, query_type, filters))
            if model_name == "Jargon":
                return [
                    {"content": "yyds", "meaning": "the best", "is_global": True, "session_id_dict": "{}"},
                    {"content": "awsl", "meaning": "too cute", "is_global": False, "session_id_dict": "{\"x\": 1}"},
                ]
            return 3

        async def append(stream_id, segments, **kw):
            self.appended.append((stream_id, segments, kw))
            return {"success": True}

        self.queries = []
        self.appended = []
        self.chat = SimpleNamespace(get_all_streams=get_all_streams)
        self.message = SimpleNamespace(get_recent=get_recent)
        self.db = SimpleNamespace(query=query)
        self.maisaka = SimpleNamespace(context=SimpleNamespace(append=append))


class HostTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.ctx = FakeCtx()
        self.host = MaiBotHost(self.ctx, None)

    async def test_recent_messages_are_oldest_first_with_rfc3339_times(self):
        got = await self.host.handle("recent_messages", {"stream_id": GROUP, "limit": 5})
        self.assertEqual([m["text"] for m in got], ["first", "second"])
        self.assertEqual(got[0]["sender"], "Ann")
        self.assertEqual(got[0]["at"], "1970-01-01T00:01:40+00:00")

    async def test_jargon_returns_global_terms_and_this_streams_terms_found_in_the_text(self):
        got = await self.host.handle("jargon", {"stream_id": GROUP, "text": "yyds awsl"})
        self.assertEqual(got, [{"term": "yyds", "meaning": "the best"}])

    async def test_membership_in_private_and_group_streams(self):
        self.assertTrue(await self.host.handle("is_member", {"person": "qq:10001", "stream_id": PRIVATE}))
        self.assertFalse(await self.host.handle("is_member", {"person": "qq:777", "stream_id": PRIVATE}))
        self.assertTrue(await self.host.handle("is_member", {"person": "qq:777", "stream_id": GROUP}))
        self.assertEqual(self.ctx.queries[-1], ("Messages", "count", {"session_id": GROUP, "user_id": "777"}))
        with self.assertRaises(HostError):
            await self.host.handle("is_member", {"person": "no-platform", "stream_id": GROUP})

    async def test_list_streams_and_append_context(self):
        streams = await self.host.handle("list_streams", {"limit": 10})
        self.assertEqual(streams[1]["target"], {"kind": "private", "user_id": "10001"})
        self.assertEqual(streams[1]["name"], "Ann")
        self.assertIsNone(await self.host.handle("append_context", {"stream_id": GROUP, "note": "task done"}))
        self.assertEqual(self.ctx.appended[0][1], [{"type": "text", "data": "task done"}])


if __name__ == "__main__":
    unittest.main()
