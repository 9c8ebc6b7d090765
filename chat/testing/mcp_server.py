"""A real MCP server, built with the official SDK's `MCPServer`, for the tests and to try MCP
tools by hand:

    python -m chat.testing.mcp_server                      # stdio
    python -m chat.testing.mcp_server --http 8931          # streamable HTTP at /mcp

Its tools cover what a client must handle: text, structured content, an image, a tool error,
a slow tool, a big result, unicode, a tool list that changes, and a server that dies mid-call.
`--name` prefixes nothing; it only names the server in its `initialize` answer.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

from chat.testing.processes import ROOT, ManagedProcess, free_port

DOCS = (
    {"title": "Deploying", "body": "Deploys run from main after CI is green."},
    {"title": "On call", "body": "The on-call engineer answers pages within 15 minutes."},
    {"title": "Runbooks", "body": "Every alert links a runbook in the docs repository."},
)
# A 1x1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


def build(name: str = "docs") -> MCPServer:
    server = MCPServer(name)

    @server.tool(description="Search the team docs by keywords; returns the matching pages.")
    def search_docs(query: str, limit: int = 3) -> dict[str, Any]:
        words = {word.lower() for word in query.split()}
        hits = [doc for doc in DOCS if words & set(f"{doc['title']} {doc['body']}".lower().split())]
        return {"query": query, "matches": hits[:limit]}

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Echo a text back, as it came.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Wait, then answer.")
    async def slow(seconds: float = 5.0) -> str:
        await anyio.sleep(seconds)
        return f"waited {seconds:g} s"

    @server.tool(description="Always fails with the given message.")
    def fail(message: str = "the docs index is being rebuilt") -> str:
        raise ToolError(message)

    @server.tool(description="A long text of the given size in bytes.")
    def big(size: int = 1_048_576) -> str:
        return ("0123456789abcdef" * (size // 16 + 1))[:size]

    @server.tool(description="A one-pixel picture.")
    def picture() -> Image:
        return Image(data=PIXEL, format="png")

    @server.tool(description="The process id of this server (to tell restarts apart).")
    def pid() -> int:
        return os.getpid()

    @server.tool(description="Ends this server's process in the middle of the call.")
    def crash() -> str:
        time.sleep(0.2)
        os._exit(3)

    @server.tool(description="Adds the tool 'late_tool' and tells the client the list changed.")
    async def grow(ctx: Context) -> str:
        if "late_tool" not in {tool.name for tool in await server.list_tools()}:
            server.add_tool(lambda: "late and here", name="late_tool", description="Arrived late.")
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


class McpHttpServer(ManagedProcess):
    """This server over streamable HTTP on a free 127.0.0.1 port, in a process of its own."""

    name = "MCP server"
    start_timeout = 20.0

    def __init__(self, name: str = "docs", port: int | None = None) -> None:
        super().__init__()
        self.server_name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def launch(self) -> subprocess.Popen[Any]:
        command = [sys.executable, "-m", "chat.testing.mcp_server", "--http", str(self.port)]
        return subprocess.Popen(
            [*command, "--name", self.server_name],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait_ready(self, process: subprocess.Popen[Any]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError("the MCP server exited before it served")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the MCP server did not listen on {self.port}")


STDIO_COMMAND = (sys.executable, "-m", "chat.testing.mcp_server")
"""The stdio form of this server, as a server configuration names it."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="Serve streamable HTTP.")
    parser.add_argument("--name", default="docs")
    options = parser.parse_args()
    server = build(options.name)
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
