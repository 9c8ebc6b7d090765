"""Cases as JSON Lines: `cases export` writes a record per case, `cases import` reads them
back, all or none, through the same gate and message reader as an imported transcript. A user
message's files travel inline (`attachments` with base64 `data`, or an openai line's content
parts) and come back through the file gate."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from django.db import transaction
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chat.agent import decisions, history
from chat.agent.contracts import AgentParameters
from chat.models import Case, CaseSource
from chat.transcripts import inline
from chat.transcripts.files import Admitted
from chat.transcripts.limits import (
    NOTE_CHARS,
    PARTS,
    ROWS,
    JsonRefused,
    Name,
    Text,
    at_most,
    import_context,
    load_json,
    refusal_text,
)
from chat.transcripts.messages import OpenAIMessage, OpenAIMessages

from .cases import SAMPLING, CaseRefused, case_set_named, set_name_of


class Fixture(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[Name, Field(min_length=1)]
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    content: Text


class CaseRecord(BaseModel):
    """One case as a JSON line: `cases export` writes these, `cases import` reads them within
    the bounds of an imported transcript line (`chat.transcripts.limits`), its messages with
    the same reader (`chat.transcripts.messages`)."""

    model_config = ConfigDict(extra="forbid")

    set: str
    title: Annotated[Name, Field(min_length=1)]
    messages: OpenAIMessages
    preamble: Annotated[int, Field(ge=0)] | None = None
    tools: Annotated[list[dict[str, Any]], PARTS] = []
    parameters: dict[str, Any] = {}
    expected: dict[str, Any]
    fixtures: Annotated[list[Fixture], ROWS] = []
    note: Annotated[str, at_most(NOTE_CHARS)] = ""
    source: str = CaseSource.REPLY

    @field_validator("set")
    @classmethod
    def _set_name(cls, value: str) -> str:
        return set_name_of(value)

    @field_validator("messages")
    @classmethod
    def _strict_history(cls, value: list[OpenAIMessage]) -> list[OpenAIMessage]:
        messages = [message.value() for message in value]
        if messages[-1].role not in ("user", "tool"):
            raise ValueError("the history must end with a user or a tool message")
        problems = history.validate(messages)
        if problems:
            raise ValueError("; ".join(str(p) for p in problems))
        return value

    @field_validator("parameters")
    @classmethod
    def _sampling(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(SAMPLING))
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {', '.join(unknown)} (known: {', '.join(SAMPLING)})"
            )
        AgentParameters.model_validate(value)
        return value

    @field_validator("expected")
    @classmethod
    def _expectation(cls, value: dict[str, Any]) -> dict[str, Any]:
        return decisions.check_expectation(value)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if value not in CaseSource.values:
            raise ValueError(f"source is one of {', '.join(CaseSource.values)}")
        return value

    def admitted(self) -> list[Admitted]:
        """The files its messages carry, as the gate admitted them on import."""
        return inline.admitted_of([[*m.attachments, *m.parts] for m in self.messages])

    @model_validator(mode="after")
    def _preamble_before_the_moment(self) -> CaseRecord:
        if self.preamble is not None and self.preamble >= len(self.messages):
            raise ValueError(
                f"preamble counts the system prompts and pre-messages before the history: "
                f"{self.preamble} leaves none of the {len(self.messages)} messages"
            )
        return self


def record(case: Case) -> dict[str, Any]:
    """A stored case as its JSON line says it, as stored, each file's bytes inline (read now):
    an export never refuses a case."""
    return {
        "set": case.case_set.name,
        "title": case.title,
        "messages": [
            inline.with_data(m) if isinstance(m, dict) and "attachments" in m else m
            for m in case.messages
        ],
        "preamble": case.preamble,
        "tools": case.tools,
        "parameters": case.parameters,
        "expected": case.expected,
        "fixtures": case.fixtures,
        "note": case.note,
        "source": case.source,
    }


def export_lines(cases: Iterable[Case]) -> Iterator[str]:
    for case in cases:
        yield json.dumps(record(case), ensure_ascii=False)


def read_line(line: str, *, set_name: str | None = None) -> tuple[CaseRecord, list[str]]:
    """A JSON line as a case record, read through the bounded gate, and notes on what was
    folded; CaseRefused saying why not."""
    try:
        data = load_json(line)
    except JsonRefused as exc:
        raise CaseRefused(str(exc)) from None
    if not isinstance(data, dict):
        raise CaseRefused("a case is a JSON object")
    if set_name:
        data["set"] = set_name
    context = import_context()
    try:
        return CaseRecord.model_validate(data, context=context), list(context["notes"])
    except ValidationError as exc:
        raise CaseRefused(refusal_text(exc)) from None


@dataclass
class Read:
    """The case records of some lines, and what was refused or folded, line by line."""

    records: list[CaseRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What was folded on the way in (a long tool result), for the reader."""


def read_lines(lines: Iterable[str], *, set_name: str | None = None) -> Read:
    """Each line read as a case record (`read_line`); a bad one is `line N: reason`."""
    read = Read()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value, notes = read_line(line, set_name=set_name)
        except CaseRefused as exc:
            read.problems.append(f"line {number}: {exc}")
            continue
        read.records.append(value)
        read.notes += [f"line {number}: warning: {note}" for note in notes]
    return read


def store(values: Iterable[CaseRecord], *, user: Any = None) -> list[Case]:
    """The records as imported cases, and their files, in one transaction."""
    made_by = user if getattr(user, "is_authenticated", False) else None
    values = list(values)
    with transaction.atomic():
        created = [
            Case.objects.create(
                case_set=case_set_named(value.set, user=user),
                title=value.title,
                messages=[inline.case_message(message.value()) for message in value.messages],
                preamble=value.preamble,
                tools=value.tools,
                parameters=value.parameters,
                expected=value.expected,
                fixtures=[f.model_dump(mode="json") for f in value.fixtures],
                note=value.note,
                source=CaseSource.IMPORTED,
                created_by=made_by,
            )
            for value in values
        ]
        inline.store(found for value in values for found in value.admitted())
    return created


@dataclass
class Imported:
    created: list[Case]
    problems: list[str]


def import_lines(
    lines: Iterable[str], *, user: Any = None, set_name: str | None = None
) -> Imported:
    """Cases from JSON lines, all or none: each bad line is reported as `line N: reason`, and
    when any is, nothing is stored (a corrected file imported again makes no duplicates)."""
    read = read_lines(lines, set_name=set_name)
    if read.problems:
        return Imported([], read.problems)
    return Imported(store(read.records, user=user), [])
