"""An independent MCP client for the integration tests: the official Python SDK (`mcp` on PyPI,
pinned by setup.sh) connects to a server, lists every tool page by page, calls one tool, and
lists resources and prompts when the server offers them.

usage: python mcp_probe.py [--legacy] [--call TOOL JSON_ARGS] (http://HOST:PORT/mcp | -- CMD ARGS...)

--legacy   use the `initialize` handshake only (by default the SDK tries `server/discover`
           first and falls back to `initialize`)
--call     the tool to call and its arguments (default: the first listed tool with {})

The tests read its stdout lines; exit status 0, or 1 when the tool result is an error.
"""
import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


def parse(argv):
    mode, tool, args = "auto", None, {}
    while argv[0] in ("--legacy", "--call"):
        if argv[0] == "--legacy":
            mode, argv = "legacy", argv[1:]
        else:
            tool, args, argv = argv[1], json.loads(argv[2]), argv[3:]
    if argv[0] == "--":
        target = StdioServerParameters(command=argv[1], args=argv[2:])
    else:
        target = argv[0]
    return mode, tool, args, target


async def list_all_tools(client):
    tools, cursor, pages = [], None, 0
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools += page.tools
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            return tools, pages


async def main(argv):
    mode, tool, args, target = parse(argv)
    async with Client(target, mode=mode, read_timeout_seconds=30) as client:
        server = client.server_info.name if client.server_info else None
        print("protocol", client.protocol_version, "| server", server)
        tools, pages = await list_all_tools(client)
        print(f"{len(tools)} tools in {pages} page(s):", [t.name for t in tools])
        tool = tool or tools[0].name
        result = await client.call_tool(tool, args)
        texts = [getattr(block, "text", block.type) for block in result.content]
        print("call", tool, "isError", result.is_error, "->", texts, result.structured_content or "")
        if client.server_capabilities.resources:
            listed = await client.list_resources()
            print(len(listed.resources), "resources on page 1, next_cursor", listed.next_cursor)
            if listed.resources:
                first = listed.resources[0].uri
                read = await client.read_resource(str(first))
                print("read", first, "->", len(read.contents), "content item(s)")
        if client.server_capabilities.prompts:
            print("prompts:", [p.name for p in (await client.list_prompts()).prompts])
        return 1 if result.is_error else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
