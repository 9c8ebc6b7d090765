"""What an MCP server lists: its tools and its prompts, every page of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp import ClientSession


@dataclass(frozen=True)
class ServerTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None
    task_support: str = ""
    """`required`: the tool runs only as an MCP task (a plain call is refused), so it is not
    offered."""


@dataclass(frozen=True)
class ServerPrompt:
    """A prompt as the server lists it; `arguments` are dicts of name, description, required."""

    name: str
    title: str = ""
    description: str = ""
    arguments: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "arguments": list(self.arguments),
        }


async def list_tools(session: ClientSession) -> list[ServerTool]:
    from mcp.types import PaginatedRequestParams

    tools: list[ServerTool] = []
    cursor: str | None = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        for tool in page.tools:
            annotations = tool.annotations and tool.annotations.model_dump(exclude_none=True)
            execution = tool.execution
            tools.append(
                ServerTool(
                    name=tool.name,
                    description=tool.description or "",
                    input_schema=dict(tool.input_schema or {"type": "object"}),
                    annotations=annotations or None,
                    task_support=(execution and execution.task_support) or "",
                )
            )
        cursor = page.next_cursor
        if not cursor:
            return tools


async def list_prompts(session: ClientSession) -> list[ServerPrompt]:
    from mcp.types import PaginatedRequestParams

    capabilities = session.server_capabilities
    if capabilities is None or capabilities.prompts is None:
        return []
    prompts: list[ServerPrompt] = []
    cursor: str | None = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_prompts(params=params)
        for prompt in page.prompts:
            arguments = tuple(
                {
                    "name": argument.name,
                    "description": argument.description or "",
                    "required": bool(argument.required),
                }
                for argument in prompt.arguments or ()
            )
            prompts.append(
                ServerPrompt(
                    name=prompt.name,
                    title=prompt.title or "",
                    description=prompt.description or "",
                    arguments=arguments,
                )
            )
        cursor = page.next_cursor
        if not cursor:
            return prompts
