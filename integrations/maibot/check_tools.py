#!/usr/bin/env python3
"""Compares the plugin's shipped planner tool definitions with a running mai-agent.

The MaiBot plugin registers its tools when MaiBot loads it, before it can ask mai-agent, so it
ships `mai_agent_bridge/planner_tools.json`. This script fetches `GET /v1/planner/tools` and
exits 1 when names, order, descriptions, parameters or visibility differ (printing what), 0
when they match, 2 when mai-agent cannot be read. `--write` replaces the shipped file with mai-agent's list.

    python3 integrations/maibot/check_tools.py [--url http://127.0.0.1:8760] [--token T] [--write]

URL and token default to MAI_AGENT_URL / MAI_AGENT_TOKEN. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent / "mai_agent_bridge" / "planner_tools.json"
FIELDS = ("name", "description", "parameters", "visibility")


def fetch(url: str, token: str) -> list[dict]:
    request = urllib.request.Request(url.rstrip("/") + "/v1/planner/tools")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)["tools"]


def differences(shipped: list[dict], live: list[dict]) -> list[str]:
    out = []
    names = [t["name"] for t in shipped]
    live_names = [t["name"] for t in live]
    if names != live_names:
        out.append(f"tool names/order differ:\n  shipped: {names}\n  mai-agent: {live_names}")
    live_by_name = {t["name"]: t for t in live}
    for tool in shipped:
        other = live_by_name.get(tool["name"])
        if other is None:
            continue
        for field in FIELDS[1:]:
            if tool.get(field) != other.get(field):
                out.append(
                    f"{tool['name']}.{field} differs:\n  shipped: {json.dumps(tool.get(field), sort_keys=True)}"
                    f"\n  mai-agent: {json.dumps(other.get(field), sort_keys=True)}"
                )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MAI_AGENT_URL", "http://127.0.0.1:8760"))
    parser.add_argument("--token", default=os.environ.get("MAI_AGENT_TOKEN", ""))
    parser.add_argument("--write", action="store_true", help="replace the shipped definitions")
    args = parser.parse_args()
    try:
        live = fetch(args.url, args.token)
    except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
        print(f"cannot read {args.url}/v1/planner/tools: {exc}; is `mai-agent serve` running?", file=sys.stderr)
        return 2
    live = [{field: t.get(field) for field in FIELDS} for t in live]
    if args.write:
        SHIPPED.write_text(json.dumps({"tools": live}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {len(live)} tools to {SHIPPED}")
        return 0
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))["tools"]
    diffs = differences(shipped, live)
    for diff in diffs:
        print(diff)
    if diffs:
        print(f"{SHIPPED.name} is out of date: run with --write and commit it", file=sys.stderr)
        return 1
    print(f"the plugin's {len(shipped)} planner tools match mai-agent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
