"""Agents as `manage.py agents` prints them: lines for a person, JSON values for scripts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Any

from django.db.models import Count

from chat import runs
from chat.agent.contracts import AgentParameters
from chat.agent.probes.report import clip
from chat.models import (
    Agent,
    AgentVersion,
    Configuration,
    EvalRun,
    EvalStatus,
    ProviderProfile,
    Visibility,
)

from . import suites
from .defaults import DEFAULT
from .differences import PARAMETERS, PROVIDER_DEFAULT, SERVER_ENDPOINT, Difference, Line, TextChange
from .records import unavailable

CONTEXT = 2
"""Unchanged lines shown around a changed one in a prompt's difference."""


def version_name(version: AgentVersion | None) -> str:
    return DEFAULT.name if version is None else str(version)


def suite_line(eval_run: EvalRun) -> str:
    """`Support v4: 4 of 5 cases passed (eval run 12)`, or how its evaluation ended."""
    passed = suites.passed_text(eval_run)
    ended = "" if eval_run.status == EvalStatus.COMPLETED else f", {eval_run.status}"
    name = eval_run.agent_version or eval_run.label
    return f"{name}: {passed} passed (eval run {eval_run.pk}{ended})"


def version_counts(agents: Iterable[Agent]) -> dict[int, int]:
    """How many versions each agent has, in one query (for a list)."""
    rows = AgentVersion.objects.filter(agent__in=list(agents)).values("agent")
    return dict(rows.annotate(count=Count("pk")).values_list("agent", "count"))


def agent_summary(
    agent: Agent,
    chosen: Agent | None,
    *,
    versions: int | None = None,
    shown: AgentVersion | None = None,
    every_version: bool = False,
) -> dict[str, Any]:
    """An agent as --json writes it: who owns it, who may use it, its published version's
    number, how many versions (counted unless given), whether it is the user's `chosen`
    default; with `shown`, that version's settings; with `every_version`, each version's
    number, author, time and note, newest first."""
    published = agent.published
    summary: dict[str, Any] = {
        "name": agent.name,
        "slug": agent.slug,
        "description": agent.description,
        "owner": agent.owner.get_username(),
        "visibility": agent.visibility,
        "published": published.number if published is not None else None,
        "versions": agent.versions.count() if versions is None else versions,
        "default": chosen is not None and chosen.pk == agent.pk,
    }
    if every_version:
        rows = agent.versions.select_related("author").order_by("-number")
        summary["history"] = [_history(row, agent) for row in rows]
    if shown is not None:
        summary["version"] = version_settings(shown)
    return summary


def built_in_summary() -> dict[str, Any]:
    """The built-in Default as `show --json` writes an agent."""
    return {
        "name": DEFAULT.name,
        "built_in": True,
        "description": DEFAULT.description,
        "version": _settings(DEFAULT.configuration()),
    }


def version_settings(version: AgentVersion) -> dict[str, Any]:
    """A version's number, note, author, time and settings (the parameters as stored; the
    model that answers; the tools unavailable here)."""
    return {
        "number": version.number,
        "published": version.is_published,
        "note": version.note,
        "author": _author(version),
        "created_at": version.created_at.isoformat(),
        **_settings(version.configuration()),
    }


def _settings(configuration: Configuration) -> dict[str, Any]:
    parameters = configuration.parameters
    return {
        "endpoint": _endpoint(configuration.profile),
        "model": _model(configuration),
        "parameters": parameters.to_json(),
        "tools": list(parameters.enabled_tools),
        "unavailable_tools": unavailable(parameters.enabled_tools),
    }


def _history(version: AgentVersion, agent: Agent) -> dict[str, Any]:
    return {
        "number": version.number,
        "published": version.pk == agent.published_id,
        "author": _author(version),
        "created_at": version.created_at.isoformat(),
        "note": version.note,
    }


def list_row(agent: Agent, chosen: Agent | None, *, versions: int) -> tuple[str, ...]:
    """NAME, PUBLISHED, VERSIONS, VISIBILITY, OWNER, DESCRIPTION; `chosen`: the user's default."""
    mark = " (your default)" if chosen is not None and chosen.pk == agent.pk else ""
    published = agent.published
    return (
        agent.name + mark,
        f"v{published.number}" if published is not None else "—",
        str(versions),
        agent.visibility,
        agent.owner.get_username(),
        clip(agent.description, 60),
    )


def show_lines(version: AgentVersion | None) -> Iterator[str]:
    """An agent (its versions, newest first) and one version's settings, for a person."""
    if version is None:
        yield f"{DEFAULT.name}: the built-in agent. {DEFAULT.description}"
        yield from _setting_lines(DEFAULT.configuration())
        return
    agent = version.agent
    yield (
        f"{agent.name} (slug {agent.slug}) · {Visibility(agent.visibility).label} · "
        f"owner {agent.owner.get_username()}"
    )
    if agent.description:
        yield agent.description
    yield "Versions, newest first:"
    rows = agent.versions.select_related("author").order_by("-number")
    for row in rows:
        state = "published" if row.pk == agent.published_id else "draft"
        when = row.created_at.strftime("%Y-%m-%d %H:%M")
        yield f"  v{row.number}  {state:9}  {_author(row) or '—'}  {when}  {clip(row.note, 60)}"
    yield f"{version}{' (published)' if version.is_published else ' (draft)'}:"
    yield from _setting_lines(version.configuration())


def _setting_lines(configuration: Configuration) -> Iterator[str]:
    parameters = configuration.parameters
    rows = [
        ("Endpoint", _endpoint(configuration.profile) or SERVER_ENDPOINT),
        ("Model", _model(configuration)),
        *((label, _value(parameters, name)) for name, label in PARAMETERS.items()),
        ("Tools", _tools(parameters)),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        yield f"  {label.ljust(width)}  {value}"
    for number, prompt in enumerate(parameters.system_prompts, 1):
        yield f"  System prompt {number}:"
        yield from _indented(prompt)
    for number, message in enumerate(parameters.pre_messages, 1):
        yield f"  Pre-message {number} ({message.role}):"
        yield from _indented(message.content or "")


def difference_summary(difference: Difference, before: str, after: str) -> dict[str, Any]:
    """A difference as --json writes it: settings and tool policies changed, tools added and
    removed, and each prompt or pre-message that changed (both texts)."""
    texts = (*difference.system_prompts, *difference.pre_messages)
    return {
        "before": before,
        "after": after,
        "same": difference.empty,
        "settings": [asdict(change) for change in difference.settings],
        "policies": [asdict(change) for change in difference.policies],
        "tools_added": list(difference.tools_added),
        "tools_removed": list(difference.tools_removed),
        "texts": [
            {"label": text.label, "kind": text.kind, "before": text.before, "after": text.after}
            for text in texts
            if text.changed
        ],
    }


def difference_lines(difference: Difference, before: str, after: str) -> Iterator[str]:
    """A difference for a person: settings and tool policies as `before → after`, tools added
    and removed, then each changed prompt line by line (`-` before, `+` after, unchanged lines
    around them)."""
    yield f"{before} → {after}"
    if difference.empty:
        yield "No differences."
        return
    for change in (*difference.settings, *difference.policies):
        yield f"{change.label}: {change.before} → {change.after}"
    if difference.tools_added:
        yield f"Tools added: {', '.join(difference.tools_added)}"
    if difference.tools_removed:
        yield f"Tools removed: {', '.join(difference.tools_removed)}"
    for text in (*difference.system_prompts, *difference.pre_messages):
        if text.changed:
            yield f"{text.label} ({text.kind}):"
            yield from _changed_lines(text)


def _changed_lines(text: TextChange) -> Iterator[str]:
    """Changed lines with CONTEXT unchanged ones around them; `…` where more were left out."""
    rows = text.lines()
    near = {
        at + offset
        for at, row in enumerate(rows)
        if row.kind != "same"
        for offset in range(-CONTEXT, CONTEXT + 1)
    }
    if not any(row.kind != "same" for row in rows):  # only a pre-message's role changed
        yield f"  role: {text.before_role} → {text.after_role}"
    skipped = False
    for at, row in enumerate(rows):
        if at not in near:
            skipped = True
            continue
        if skipped:
            yield "  …"
            skipped = False
        yield from _marked(row)
    if skipped:
        yield "  …"


def _marked(row: Line) -> Iterable[str]:
    if row.kind == "same":
        return [f"    {row.before}"]
    marked = []
    if row.before is not None:
        marked.append(f"  - {row.before}")
    if row.after is not None:
        marked.append(f"  + {row.after}")
    return marked


def _indented(text: str) -> Iterator[str]:
    for line in text.splitlines() or [""]:
        yield f"      {line}"


def _endpoint(profile: ProviderProfile | None) -> str | None:
    """A profile's name; None: the server's own endpoint."""
    return None if profile is None else profile.name


def _model(configuration: Configuration) -> str:
    """The model that answers: the settings' own, else the endpoint's (the runs' rule)."""
    return runs.endpoint(configuration.profile, model=configuration.parameters.model).label


def _value(parameters: AgentParameters, name: str) -> str:
    value = getattr(parameters, name)
    return PROVIDER_DEFAULT if value is None else str(value)


def _tools(parameters: AgentParameters) -> str:
    if not parameters.enabled_tools:
        return "none"
    missing = set(unavailable(parameters.enabled_tools))
    return ", ".join(
        f"{name} (unavailable here)" if name in missing else name
        for name in parameters.enabled_tools
    )


def _author(version: AgentVersion) -> str | None:
    return version.author.get_username() if version.author is not None else None
