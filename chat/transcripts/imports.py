"""Records back into conversations: each record is written whole, or not at all."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction

from chat import access, agent
from chat.access import AgentAction
from chat.agent import history
from chat.models import (
    AgentVersion,
    Conversation,
    HistoryRepair,
    Message,
    ModelCall,
    Run,
    ToolCall,
    Version,
    title_from,
)
from chat.models.mcp import known_tool_names

from . import inline, versions
from .model_calls import create_chained
from .records import FullRecord, ImportRefused, NoOwner, OpenAIRecord
from .rows import append_messages, create_as_recorded, to_chat_messages


def import_record(
    record: FullRecord | OpenAIRecord, *, user: User | None = None
) -> tuple[Conversation, list[str]]:
    """Write one record as a new conversation; returns it and warnings for the reader.

    A `full` record belongs to `user` if given, else to its owner by username; an `openai`
    record needs `user`. Raises ImportRefused, writing nothing, when it cannot be imported.
    """
    if isinstance(record, FullRecord):
        return _import_full(record, user=user)
    if user is None:
        raise NoOwner("the openai format has no owner: pass --user")
    return _import_openai(record, user=user)


def _import_openai(record: OpenAIRecord, *, user: User) -> tuple[Conversation, list[str]]:
    values = record.values()
    prompts: list[str] = []
    while values and values[0].role == "system":
        prompts.append(values.pop(0).content or "")
    if not values:
        raise ImportRefused("no message besides system prompts")
    violations = history.validate(values)
    if violations:
        raise ImportRefused(f"the history breaks the strict rules: {violations[0]}")
    names = record.tool_names()
    here = {*agent.default_registry.built_in_names(), *known_tool_names()}
    known = [name for name in names if name in here]
    warnings = []
    if len(known) < len(names):
        unknown = ", ".join(name for name in names if name not in here)
        warnings.append(f"tools not available here, left disabled: {unknown}")
    parameters = agent.AgentParameters().changed(
        known_tools=known,
        model=record.model or None,
        system_prompts=tuple(prompts),
        enabled_tools=tuple(known),
    )
    first = next((value for value in values if value.role == "user"), None)
    with transaction.atomic():
        conversation = Conversation(owner=user, title=title_from(_said(first)))
        conversation.set_agent_parameters(parameters)
        conversation.save()
        append_messages(conversation, values)
        inline.store(record.admitted())
    return conversation, warnings


def _said(message: agent.ChatMessage | None) -> str:
    """What a title is made of: the text, else the first file's name."""
    if message is None:
        return ""
    return message.content or (message.attachments[0].name if message.attachments else "")


def _import_full(record: FullRecord, *, user: User | None) -> tuple[Conversation, list[str]]:
    deciders = {c.decided_by for run in record.runs for c in run.tool_calls if c.decided_by}
    users = _users(
        {record.owner, *(run.created_by for run in record.runs if run.created_by), *deciders}
    )
    owner = user or users.get(record.owner)
    if owner is None:
        raise ImportRefused(f"no user named {record.owner!r} (pass --user to choose the owner)")

    def created_by(name: str | None) -> User | None:
        if name is None:
            return None
        if name == record.owner:
            return owner
        if name not in users:
            raise ImportRefused(f"no user named {name!r} (a run's created_by)")
        return users[name]

    started_from, warnings = _agent_version(record, owner)
    if unknown := sorted(deciders - set(users)):
        warnings.append(
            f"decisions by {', '.join(unknown)} are kept with the name only: no user of that "
            "name here"
        )
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner=owner,
            title=record.title,
            purpose=record.purpose,
            parameters=record.parameters,
            agent_version=started_from,
        )
        runs = create_as_recorded(
            Run,
            [
                Run(
                    conversation=conversation,
                    created_by=created_by(run.created_by),
                    **run.model_dump(exclude={"created_by", "tool_calls", "model_calls"}),
                )
                for run in record.runs
            ],
            "started_at",
        )
        archived = _create_versions(conversation, record)
        messages = create_as_recorded(
            Message,
            [
                Message(
                    conversation=conversation,
                    run=runs[message.run] if message.run is not None else None,
                    version=archived[message.version] if message.version is not None else None,
                    attachments=[a.value().model_dump(mode="json") for a in message.attachments],
                    **message.model_dump(exclude={"run", "version", "attachments"}),
                )
                for message in record.messages
            ],
            "created_at",
        )
        by_place = {
            (message.version, message.index): row
            for message, row in zip(record.messages, messages, strict=True)
        }
        ToolCall.objects.bulk_create(
            ToolCall(
                run=row,
                message=(
                    by_place[call.message_version, call.message]
                    if call.message is not None
                    else None
                ),
                **call.model_dump(exclude={"message", "message_version", "decided_by"}),
                **_decider(call.decided_by, users),
            )
            for row, run in zip(runs, record.runs, strict=True)
            for call in run.tool_calls
        )
        model_calls = [
            ModelCall(run=row, **call.model_dump())
            for row, run in zip(runs, record.runs, strict=True)
            for call in run.model_calls
        ]
        create_chained(model_calls)
        repairs = [
            HistoryRepair(
                conversation=conversation,
                run=runs[repair.run] if repair.run is not None else None,
                **repair.model_dump(exclude={"run"}),
            )
            for repair in record.history_repairs
        ]
        create_as_recorded(HistoryRepair, repairs, "created_at")
        Conversation.objects.filter(pk=conversation.pk).update(
            created_at=record.created_at, updated_at=record.updated_at
        )
        inline.store(record.admitted())
    conversation.refresh_from_db()
    pending = bool(record.runs_in_progress())
    return conversation, [*warnings, *_broken_paths(conversation, pending=pending)]


def _agent_version(record: FullRecord, owner: User) -> tuple[AgentVersion | None, list[str]]:
    """The version the record started from, when an agent of that name that `owner` may use
    has it; otherwise none (the conversation keeps its settings, and names no agent)."""
    if record.agent is None or record.agent_version is None:
        return None, []
    found = (
        AgentVersion.objects.filter(
            agent__in=access.agents(owner, AgentAction.USE),
            agent__name=record.agent,
            number=record.agent_version,
        )
        .select_related("agent")
        .first()
    )
    if found is not None:
        return found, []
    return None, [
        f"it started from {record.agent} v{record.agent_version}, which is not an agent version "
        "its owner may use here: its settings are kept, linked to no agent"
    ]


def _create_versions(conversation: Conversation, record: FullRecord) -> list[Version]:
    """The record's versions, in its order; parents are set once all exist, as a parent may
    come later in the list."""
    rows = create_as_recorded(
        Version,
        [
            Version(conversation=conversation, **version.model_dump(exclude={"parent"}))
            for version in record.versions
        ],
        "created_at",
    )
    children = []
    for row, version in zip(rows, record.versions, strict=True):
        if version.parent is not None:
            row.parent = rows[version.parent]
            children.append(row)
    Version.objects.bulk_update(children, ["parent"], batch_size=500)
    return rows


def _broken_paths(conversation: Conversation, *, pending: bool) -> list[str]:
    """A warning for each path of an imported conversation that breaks the strict rules (the
    active one may end on calls a run in progress is answering, when `pending`)."""
    warnings = []
    for path in versions.paths(conversation):
        active = path.version is None
        violations = history.validate(
            to_chat_messages(path.messages), allow_trailing_pending=pending and active
        )
        if violations:
            where = "" if active else f"{path.version}: "
            warnings.append(
                f"{where}the history breaks the strict rules ({violations[0]}); "
                "run validate_transcripts --fix"
            )
    return warnings


def _decider(name: str | None, users: dict[str, User]) -> dict[str, Any]:
    """Who decided an imported call: the user of that name here (not whoever imports it: a
    decision is its decider's), else the name alone."""
    if name is None:
        return {}
    if name in users:
        return {"decided_by": users[name]}
    return {"decided_by_name": name}


def _users(names: Iterable[str]) -> dict[str, User]:
    model = get_user_model()
    found = model._default_manager.filter(**{f"{model.USERNAME_FIELD}__in": list(names)})
    return {user.get_username(): user for user in found}
