"""Identity comes from MaiBot, never from the model (pure part: `identity`)."""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mai_agent_bridge.identity import (  # noqa: E402
    CallGuard,
    IdentityRefused,
    SpeakerTracker,
    StreamIdentity,
    identity_for,
    planner_tool,
    session_of,
    tool_arguments,
)

TOOLS_FILE = Path(__file__).resolve().parents[1] / "mai_agent_bridge" / "planner_tools.json"
TOOLS = {d["name"]: planner_tool(d) for d in json.loads(TOOLS_FILE.read_text())["tools"]}

HERE = "a" * 32
OTHER = "b" * 32


def injected(**model):
    """MaiBot's payload: the model's arguments merged OVER the injected identity."""
    payload = {"stream_id": HERE, "chat_id": HERE, "group_id": "42", "platform": "qq"}
    payload.update(model)
    return payload


class SchemaTests(unittest.TestCase):
    def test_the_eleven_tools_are_offered_as_mai_tools_without_the_current_stream_id(self):
        self.assertEqual(len(TOOLS), 11)
        for tool in TOOLS.values():
            self.assertTrue(tool.maibot_name.startswith("mai_"))
            props = tool.parameters["properties"]
            for key in ("stream_id", "chat_id", "user_id", "group_id", "platform"):
                self.assertNotIn(key, props, f"{tool.name} offers {key}")
            self.assertNotIn("stream_id", tool.parameters.get("required", []))
            self.assertFalse(tool.parameters["additionalProperties"])
        self.assertEqual(TOOLS["subagent_create"].visibility, "visible")
        self.assertEqual(TOOLS["send_message"].visibility, "deferred")

    def test_send_message_targets_are_renamed_so_injected_identity_cannot_become_a_target(self):
        tool = TOOLS["send_message"]
        self.assertEqual(
            set(tool.renames), {"target_stream_id", "target_group_id", "target_user_id", "target_platform"}
        )
        args = tool_arguments(tool, injected(text="hi", target_user_id="777"), HERE)
        self.assertEqual(args, {"text": "hi", "user_id": "777"})
        # Without a model-chosen target, nothing of the injected identity is a target.
        self.assertEqual(tool_arguments(tool, injected(text="hi"), HERE), {"text": "hi"})


class SessionTests(unittest.TestCase):
    def test_the_session_is_the_injected_stream_id(self):
        self.assertEqual(session_of(injected()), HERE)

    def test_a_model_written_chat_id_of_another_group_is_refused(self):
        with self.assertRaises(IdentityRefused):
            session_of(injected(chat_id=OTHER))

    def test_a_model_written_stream_id_of_another_group_is_refused(self):
        with self.assertRaises(IdentityRefused):
            session_of(injected(stream_id=OTHER))

    def test_a_call_without_a_session_is_refused(self):
        with self.assertRaises(IdentityRefused):
            session_of({"intent": "x"})

    def test_model_written_user_group_and_platform_never_reach_the_arguments(self):
        tool = TOOLS["subagent_create"]
        args = tool_arguments(
            tool, injected(intent="x", user_id="admin", group_id="999", platform="tg", reasoning="r"), HERE
        )
        self.assertEqual(args, {"intent": "x", "stream_id": HERE})

    def test_the_context_comes_from_maibots_record_of_the_session(self):
        group = StreamIdentity.from_stream(
            {"session_id": HERE, "platform": "qq", "group_id": "42", "user_id": "first", "is_group_session": True}
        )
        self.assertEqual(group.context(), {"chat_id": HERE, "platform": "qq", "group_id": "42"})
        private = StreamIdentity.from_stream(
            {"session_id": OTHER, "platform": "qq", "user_id": "10001", "is_group_session": False}
        )
        self.assertEqual(private.context(), {"chat_id": OTHER, "platform": "qq", "user_id": "10001"})
        self.assertEqual(identity_for(HERE, None).context(), {"chat_id": HERE})
        self.assertEqual(identity_for(HERE, private).context(), {"chat_id": HERE})


def output(name, **args):
    return [
        {"item_type": "AssistantMessageItem", "meta": {}, "parts": []},
        {"item_type": "FunctionCallItem", "meta": {}, "tool_call": {"call_id": "c1", "func_name": name, "args": args}},
    ]


class GuardTests(unittest.TestCase):
    def test_a_call_whose_model_wrote_both_ids_of_another_group_is_refused_once(self):
        guard = CallGuard()
        self.assertEqual(guard.observe(HERE, output("mai_subagent_list", stream_id=OTHER, chat_id=OTHER)), 1)
        with self.assertRaises(IdentityRefused):
            guard.check("mai_subagent_list", {"stream_id": OTHER, "chat_id": OTHER})
        # Used up: the real planner of OTHER is not refused afterwards.
        guard.check("mai_subagent_list", {"stream_id": OTHER, "chat_id": OTHER})

    def test_naming_the_own_session_or_another_tool_is_not_refused(self):
        guard = CallGuard()
        self.assertEqual(guard.observe(HERE, output("mai_subagent_list", stream_id=HERE)), 0)
        self.assertEqual(guard.observe(HERE, output("reply", stream_id=OTHER)), 0)
        guard.check("mai_subagent_list", injected())

    def test_markers_expire(self):
        now = [0.0]
        guard = CallGuard(ttl=10, clock=lambda: now[0])
        guard.observe(HERE, output("mai_subagent_list", stream_id=OTHER, chat_id=OTHER))
        now[0] = 11
        guard.check("mai_subagent_list", {"stream_id": OTHER, "chat_id": OTHER})


if __name__ == "__main__":
    unittest.main()


class SpeakerTests(unittest.TestCase):
    def test_the_one_person_who_wrote_since_the_last_turn_is_the_speaker(self):
        speakers = SpeakerTracker()
        speakers.heard("s1", "alice")
        speakers.heard("s1", "alice")
        speakers.planner_requested("s1")
        self.assertEqual(speakers.speaker("s1"), "alice")
        # A follow-up turn with no new message keeps the speaker.
        speakers.planner_requested("s1")
        self.assertEqual(speakers.speaker("s1"), "alice")
        self.assertEqual(speakers.speaker("s2"), "")

    def test_several_writers_make_no_speaker_rather_than_a_guess(self):
        speakers = SpeakerTracker()
        speakers.heard("s1", "alice")
        speakers.planner_requested("s1")
        speakers.heard("s1", "alice")
        speakers.heard("s1", "mallory")
        speakers.planner_requested("s1")
        self.assertEqual(speakers.speaker("s1"), "")
        speakers.heard("s1", "bob")
        speakers.planner_requested("s1")
        self.assertEqual(speakers.speaker("s1"), "bob")
