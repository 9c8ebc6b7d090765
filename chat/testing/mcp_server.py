"""A real MCP server, built with the official SDK's `MCPServer`, for the tests and to try MCP
tools by hand:

    python -m chat.testing.mcp_server                      # stdio
    python -m chat.testing.mcp_server --http 8931          # streamable HTTP at /mcp

Its tools cover what a client must handle: text, structured content, an image, audio, embedded
text and blob resources, a resource link, structured content holding an image, a tool error, a
slow tool, a big result, unicode, progress notifications, a tool that runs only as a task, a
sampling and an elicitation request, a tool list that changes, and a server that dies mid-call;
its prompts are one without and one with arguments. `--name` prefixes nothing; it only names the
server in its `initialize` answer. `--extra-tools N` adds N small tools (`filler_001`, ...).
`--unknown-session 400` answers a request for a session it does not know (after a restart) with
400 and a JSON-RPC error, as some servers do, instead of the 404 the specification names.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time
import wave
import zlib
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Audio, Image
from mcp.shared.exceptions import MCPError
from mcp.types import (
    METHOD_NOT_FOUND,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    SamplingMessage,
    TextContent,
    TextResourceContents,
    Tool,
    ToolExecution,
)

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


RUNBOOK_URI = "docs://runbooks/deploy.md"
RUNBOOK = "# Deploy runbook\n\n1. Check CI is green on main.\n2. Run `make deploy`.\n"
TASK_ONLY = "research_task"
"""A tool the server offers only as an MCP task: a plain call is answered -32601."""


def png(width: int = 48, height: int = 32, padding: int = 0) -> bytes:
    """A real PNG (a blue-to-green gradient), `padding` bytes larger by a text chunk: a picture
    a browser shows, of whatever size a test needs."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\0"
        + b"".join(
            bytes((20, 80 + 150 * x // width, 200 - 120 * y // height)) for x in range(width)
        )
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    extra = chunk(b"tEXt", b"padding\0" + b"x" * padding) if padding else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + extra
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def wav(seconds: float = 0.3) -> bytes:
    """A short 440 Hz tone as WAV."""
    rate = 8000
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * n / rate)))
        for n in range(int(rate * seconds))
    )
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(rate)
        sound.writeframes(frames)
    return out.getvalue()


class _Server(MCPServer):
    """MCPServer whose `research_task` is listed as task-only (the SDK's decorator cannot say
    so) and refuses a plain call as a task-only tool does."""

    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        return [
            tool.model_copy(update={"execution": ToolExecution(task_support="required")})
            if tool.name == TASK_ONLY
            else tool
            for tool in tools
        ]


def build(name: str = "docs", extra_tools: int = 0) -> MCPServer:
    server = _Server(name)

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

    @server.tool(description="A chart of the week's load: structured content holding an image.")
    def chart(padding: int = 0) -> CallToolResult:
        data = base64.b64encode(png(padding=padding)).decode()
        return CallToolResult(
            content=[TextContent(text="The load chart for this week.")],
            structured_content={
                "title": "Weekly load",
                "points": [3, 5, 4],
                "image": {"type": "image", "mimeType": "image/png", "data": data},
            },
        )

    @server.tool(description="A gradient picture.")
    def gradient() -> Image:
        return Image(data=png(), format="png")

    @server.tool(description="A short tone.")
    def tone() -> Audio:
        return Audio(data=wav(), format="wav")

    @server.tool(description="The deploy runbook, as an embedded text resource.")
    def runbook() -> list[Any]:
        resource = TextResourceContents(uri=RUNBOOK_URI, mime_type="text/markdown", text=RUNBOOK)
        return [TextContent(text="Here is the runbook."), EmbeddedResource(resource=resource)]

    @server.tool(description="The docs as a zip archive, as an embedded blob resource.")
    def archive() -> EmbeddedResource:
        blob = base64.b64encode(b"PK\x05\x06" + b"\0" * 1020).decode()
        contents = BlobResourceContents(
            uri="docs://export.zip", mime_type="application/zip", blob=blob
        )
        return EmbeddedResource(resource=contents)

    @server.tool(description="A link to the on-call page.")
    def oncall_link() -> ResourceLink:
        return ResourceLink(name="on-call", uri="docs://oncall.md", mime_type="text/markdown")

    @server.tool(description="Research a topic in steps, reporting progress as it goes.")
    async def research(topic: str, steps: int = 5, pause: float = 0.2, ctx: Context = None) -> str:  # type: ignore[assignment]
        for step in range(steps):
            await ctx.report_progress(step, steps, f"reading source {step + 1} of {steps}")
            await anyio.sleep(pause)
        return f"{topic}: {steps} sources read"

    @server.tool(name=TASK_ONLY, description="Long research that runs only as an MCP task.")
    def research_task(topic: str) -> str:
        raise MCPError(METHOD_NOT_FOUND, "research_task runs only as a task (tools/call with task)")

    @server.tool(description="Asks the client's model to summarise (a sampling request).")
    async def summarise(text: str, ctx: Context) -> str:
        message = SamplingMessage(role="user", content=TextContent(text=f"Summarise: {text}"))
        result = await ctx.session.create_message(messages=[message], max_tokens=100)
        return str(result.content)

    @server.tool(description="Asks the user a question (an elicitation request).")
    async def confirm(question: str, ctx: Context) -> str:
        from pydantic import BaseModel

        class Answer(BaseModel):
            ok: bool

        result = await ctx.elicit(question, Answer)
        return str(result)

    @server.prompt(description="Start the day: what changed since yesterday.")
    def standup() -> str:
        return "What changed in the docs since yesterday? List the pages and who changed them."

    @server.prompt(description="Write an incident summary for a service.")
    def incident_summary(service: str, severity: str = "minor") -> list[dict[str, str]]:
        return [
            {
                "role": "user",
                "content": f"Write a {severity} incident summary for {service}: what happened, "
                "the impact, and the follow-ups.",
            }
        ]

    for number in range(1, extra_tools + 1):
        server.add_tool(
            lambda n=number: f"filler {n}",
            name=f"filler_{number:03d}",
            description=f"A small tool ({number}).",
        )

    return server


class McpHttpServer(ManagedProcess):
    """This server over streamable HTTP on a free 127.0.0.1 port, in a process of its own."""

    name = "MCP server"
    start_timeout = 20.0

    def __init__(
        self,
        name: str = "docs",
        port: int | None = None,
        *,
        extra_tools: int = 0,
        unknown_session: int = 404,
    ) -> None:
        super().__init__()
        self.server_name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.options = [
            "--extra-tools",
            str(extra_tools),
            "--unknown-session",
            str(unknown_session),
        ]

    def launch(self) -> subprocess.Popen[Any]:
        command = [sys.executable, "-m", "chat.testing.mcp_server", "--http", str(self.port)]
        return subprocess.Popen(
            [*command, "--name", self.server_name, *self.options],
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
    parser.add_argument("--extra-tools", type=int, default=0, metavar="N")
    parser.add_argument("--unknown-session", type=int, choices=(400, 404), default=404)
    parser.add_argument("--stderr-line", default="", metavar="TEXT", help="Say TEXT on stderr.")
    options = parser.parse_args()
    if options.stderr_line:
        print(options.stderr_line, file=sys.stderr, flush=True)
    server = build(options.name, options.extra_tools)
    if not options.http:
        server.run("stdio")
    elif options.unknown_session == 404:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        import uvicorn

        app = _UnknownSession400(server.streamable_http_app())
        uvicorn.run(app, host="127.0.0.1", port=options.http, log_level="warning")


class _UnknownSession400:
    """ASGI middleware: a request naming a session the server does not know gets 400 and a
    JSON-RPC error mentioning the session (as the TypeScript SDK's servers answer)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.known: set[str] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        session = headers.get(b"mcp-session-id", b"").decode()
        if session and session not in self.known:
            error = {"code": -32000, "message": "Bad Request: No valid session ID provided"}
            body = json.dumps({"jsonrpc": "2.0", "error": error, "id": None}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return

        async def remember(message: Any) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        self.known.add(value.decode())
            await send(message)

        await self.app(scope, receive, remember)


if __name__ == "__main__":
    main()
