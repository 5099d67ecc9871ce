"""A small MCP server whose tool list comes in pages, for the client's pagination tests: 25 tools
`tool_00` .. `tool_24`, 10 per page behind an opaque cursor; each tool answers with its name and
its arguments as JSON. Built on the official Python SDK's low-level `Server`.

usage: python paged_server.py stdio
       python paged_server.py http PORT      (serves http://127.0.0.1:PORT/mcp)
"""
import json
import sys

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

PAGE_SIZE = 10
TOOLS = [
    types.Tool(
        name=f"tool_{i:02d}",
        description=f"echo #{i}",
        input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
    )
    for i in range(25)
]
NAMES = {tool.name for tool in TOOLS}


async def list_tools(ctx, params):
    start = int(params.cursor[len("page"):]) if params and params.cursor else 0
    end = start + PAGE_SIZE
    next_cursor = f"page{end}" if end < len(TOOLS) else None
    return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=next_cursor)


def text(value):
    return types.TextContent(type="text", text=value)


async def call_tool(ctx, params):
    if params.name not in NAMES:
        return types.CallToolResult(content=[text(f"unknown tool {params.name}")], is_error=True)
    return types.CallToolResult(content=[text(f"{params.name}: {json.dumps(params.arguments)}")])


server = Server("paged-tools", version="0.1", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        anyio.run(serve_stdio)
    else:
        import uvicorn

        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
