"""Validated inputs of a run."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .approvals import Policy
from .messages import Attachment, ChatMessage
from .tools import ToolRegistry, default_registry

MAX_USER_MESSAGE_CHARS = 32_000
MAX_EVENT_LOOPS = 50


def validation_text(exc: ValueError, *, unnamed: Collection[str] = ()) -> str:
    """A pydantic ValidationError as one readable line: "field: what is wrong; ...".

    Fields in `unnamed` are not named: their messages say what they are about.
    """
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    parts = []
    for error in errors():
        where = ".".join(str(part) for part in error["loc"])
        shown = where and where not in unnamed
        parts.append(f"{where}: {error_text(error)}" if shown else error_text(error))
    return "; ".join(parts)


def error_text(error: Mapping[str, Any]) -> str:
    """One pydantic error's message without pydantic's "Value error, " prefix."""
    return str(error["msg"]).removeprefix("Value error, ")


def _registry(info: ValidationInfo) -> ToolRegistry:
    context = info.context or {}
    registry = context.get("registry", default_registry)
    if not isinstance(registry, ToolRegistry):
        raise TypeError("the validation context's 'registry' must be a ToolRegistry")
    return registry


class AgentParameters(BaseModel):
    """How the agent behaves: a conversation keeps a validated snapshot of these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    system_prompts: tuple[str, ...] = ()
    pre_messages: tuple[ChatMessage, ...] = ()
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_event_loops: Annotated[int, Field(ge=1, le=MAX_EVENT_LOOPS)] = 8
    enabled_tools: tuple[str, ...] = ()
    tool_policies: dict[Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")], Policy] = Field(
        default_factory=dict
    )
    """Per tool, run / ask / never where it differs from the tool's default (see approvals)."""

    @field_validator("pre_messages")
    @classmethod
    def _no_tool_pre_messages(cls, value: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
        for index, message in enumerate(value):
            if message.role == "tool":
                raise ValueError(
                    f"pre_messages[{index}] has role 'tool': a pre-message cannot answer a tool "
                    "call; use system, user or assistant"
                )
            if message.tool_calls:
                raise ValueError(
                    f"pre_messages[{index}] carries tool_calls: a pre-message cannot request "
                    "tool calls"
                )
        return value

    @field_validator("enabled_tools")
    @classmethod
    def _tools_exist(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """New choices must exist: in the registry (a run's own registry knows the tools it
        withholds), or among the context's `known_tools` (tools of other sources, such as MCP
        servers); `unavailable_tools` are chosen ones kept."""
        registry = _registry(info)
        context = info.context or {}
        kept = set(context.get("unavailable_tools", ())) | set(context.get("known_tools", ()))
        unknown = [
            name
            for name in value
            if name not in registry and registry.withheld(name) is None and name not in kept
        ]
        if unknown:
            known = ", ".join([*registry.names(), *context.get("known_tools", ())]) or "none"
            raise ValueError(f"unknown tool(s): {', '.join(unknown)} (known: {known})")
        return tuple(dict.fromkeys(value))

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> AgentParameters:
        """A stored snapshot, as it was saved: a chosen tool this process does not have (a
        module not loaded here, a server that is down) stays chosen; it is just not offered."""
        tools = data.get("enabled_tools") or ()
        kept = [name for name in tools if isinstance(name, str)]
        return cls.model_validate(data, context={"unavailable_tools": kept})

    def changed(self, *, known_tools: Collection[str] = (), **changes: Any) -> AgentParameters:
        """These parameters with some changed, validated; the tools chosen so far stay valid,
        and `known_tools` (not in the registry, e.g. MCP tools) may be chosen."""
        return self.model_validate(
            {**self.model_dump(), **changes},
            context={"unavailable_tools": self.enabled_tools, "known_tools": tuple(known_tools)},
        )

    def policies(self, registry: ToolRegistry = default_registry) -> dict[str, Policy]:
        """Each chosen tool's policy with this registry's defaults (see approvals)."""
        return {
            name: registry.policy(name, self.tool_policies)
            for name in self.enabled_tools
            if name in registry
        }

    def unavailable_tools(self, registry: ToolRegistry = default_registry) -> tuple[str, ...]:
        """Chosen tools the registry does not offer: kept in the settings, not offered."""
        return tuple(name for name in self.enabled_tools if name not in registry)


class DebugRunRequest(BaseModel):
    """One user turn: the parameters, the stored history before it, and the new message.

    Without a user message the run continues the stored history as it stands (a fork after an
    edited tool result): it must then end with a user or a tool message.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    parameters: AgentParameters = AgentParameters()
    history: tuple[ChatMessage, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    """The files sent with `user_message` (which may then be empty)."""
    user_message: str | None

    @field_validator("user_message")
    @classmethod
    def _not_blank_nor_too_long(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if not value.strip() and not info.data.get("attachments"):
            raise ValueError("the message is empty")
        limit = (info.context or {}).get("max_message_chars", MAX_USER_MESSAGE_CHARS)
        if len(value) > limit:
            raise ValueError(
                f"The message is too long: {len(value):,} characters (the limit is {limit:,})."
            )
        return value

    @model_validator(mode="after")
    def _something_to_answer(self, info: ValidationInfo) -> DebugRunRequest:
        # A resumed run may stop on its last turn's tool calls: it runs them first.
        ends = (
            ("user", "tool", "assistant")
            if (info.context or {}).get("resuming")
            else ("user", "tool")
        )
        if self.attachments and self.user_message is None:
            raise ValueError("attachments come with a new user message")
        if self.user_message is None and (not self.history or self.history[-1].role not in ends):
            raise ValueError(
                "without a new message, the history must end with a user or a tool message"
            )
        return self

    def messages(self) -> list[ChatMessage]:
        """The full request history: system prompts, pre-messages, stored history, the user."""
        prompts = self.parameters.system_prompts
        result = [ChatMessage(role="system", content=text) for text in prompts]
        result.extend(self.parameters.pre_messages)
        result.extend(self.history)
        if self.user_message is not None:
            result.append(self.user_chat_message())
        return result

    def user_chat_message(self) -> ChatMessage:
        """The new user message as the transcript keeps it."""
        text = self.user_message
        return ChatMessage(role="user", content=text, attachments=self.attachments)
