"""Every JSON value a person or a file supplies passes one bounded gate (chat/transcripts/limits.py)
before it is stored: each way in refuses what the gate refuses with one line and stores nothing,
and rows stored before the gate existed render again once repaired (migration 0011)."""

from __future__ import annotations

import html as htmllib
import importlib
import io
import json
import re

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from chat.evals import cases
from chat.models import Annotation, Case, CaseSet, Conversation, ToolCall
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.transcripts.limits import ARGUMENT_CHARS, NOTE_CHARS

pytestmark = pytest.mark.django_db(transaction=True)
HTMX = {"HTTP_HX_REQUEST": "true"}
LONE = "\ud800"

HOSTILE = {
    "lone surrogate": (
        '{"query": "\\ud800"}',
        "a string holds a lone surrogate (\\ud800-\\udfff), which is not text",
    ),
    "3,000 deep": ('{"query": ' + "[" * 3000 + "]" * 3000 + "}", "nested more than 64 levels deep"),
    "NaN": ('{"query": NaN}', "NaN is not a JSON number"),
    "Infinity": ('{"query": -Infinity}', "-Infinity is not a JSON number"),
    "1e999": ('{"query": 1e999}', "1e999 is too large a number"),
    "NUL": (
        '{"query": "a\\u0000b"}',
        "a string holds a NUL character (\\u0000), which the database cannot store",
    ),
}
hostile = pytest.mark.parametrize(("arguments", "why"), HOSTILE.values(), ids=HOSTILE.keys())


def alerts(html: str) -> list[str]:
    return [htmllib.unescape(a) for a in re.findall(r'role="alert">([^<]*)<', html)]


def admin_errors(html: str) -> list[str]:
    return [
        htmllib.unescape(e)
        for e in re.findall(r'<ul class="errorlist[^"]*"[^>]*><li>([^<]*)<', html)
    ]


@pytest.fixture
def made() -> Conversation:
    """Ada's conversation: the scripted model searched the cards for pills, then answered."""
    return made_for.searched(make.user("ada"))


def call_of(conversation: Conversation) -> ToolCall:
    return conversation.runs.get().tool_calls.get()


def staff() -> Client:
    return make.logged_in(make.user("root", is_staff=True, is_superuser=True))


# Each way in refuses what the gate refuses: one line, nothing stored.


@hostile
def test_the_chats_annotation_form(made: Conversation, arguments: str, why: str) -> None:
    call = call_of(made)
    url = reverse("chat:tool_call_annotation", args=[made.pk, call.pk])
    form = {"verdict": "bad", "expected_tool": "search_cards", "expected_arguments": arguments}

    response = make.logged_in(made.owner).post(url, form, **HTMX)

    assert response.status_code == 422
    assert alerts(response.content.decode()) == [f"Expected arguments: {why}."]
    assert not Annotation.objects.exists()


@hostile
def test_save_as_case_with_another_call(made: Conversation, arguments: str, why: str) -> None:
    url = reverse("chat:tool_call_case", args=[made.pk, call_of(made).pk])
    form = {"set_name": "cards", "expect": "other", "tool": "search_cards", "arguments": arguments}

    response = make.logged_in(made.owner).post(url, form, **HTMX)

    assert response.status_code == 422
    assert alerts(response.content.decode()) == [f"Expected arguments: {why}."]
    assert not Case.objects.exists() and not CaseSet.objects.exists()


@hostile
def test_the_admins_annotation_form(made: Conversation, arguments: str, why: str) -> None:
    call = call_of(made)
    form = {
        "run": call.run_id,
        "tool_call": call.pk,
        "verdict": "bad",
        "note": "",
        "expected_tool": "search_cards",
        "expected_arguments": arguments,
    }

    response = staff().post(reverse("admin:chat_annotation_add"), form)

    assert response.status_code == 200
    assert admin_errors(response.content.decode()) == [f"Expected arguments: {why}."]
    assert not Annotation.objects.exists()


@hostile
def test_the_admins_case_form(made: Conversation, arguments: str, why: str) -> None:
    case = cases.save_case(made, 0, set_name="cards")
    expected = f'{{"tool_calls": [{{"name": "search_cards", "arguments": {arguments}}}]}}'
    form = {"title": case.title, "case_set": case.case_set_id, "note": "", "expected": expected}

    response = staff().post(reverse("admin:chat_case_change", args=[case.pk]), form)

    assert response.status_code == 200
    assert admin_errors(response.content.decode()) == [f"Enter a valid JSON: {why}."]
    case.refresh_from_db()
    assert case.expected == cases.stored_decision(case.conversation.messages.get(index=1))


def test_the_same_lengths_everywhere(made: Conversation) -> None:
    """A note of NOTE_CHARS + 1 and arguments of ARGUMENT_CHARS + 1 characters, however they
    come: the chat's forms, the admin's, and the command line."""
    call, root = call_of(made), staff()
    long_note, long_arguments = "n" * (NOTE_CHARS + 1), '{"q": "%s"}' % ("a" * ARGUMENT_CHARS)
    ada = make.logged_in(made.owner)
    annotate = reverse("chat:tool_call_annotation", args=[made.pk, call.pk])
    for form in ({"note": long_note}, {"expected_tool": "t", "expected_arguments": long_arguments}):
        assert ada.post(annotate, {"verdict": "bad", **form}, **HTMX).status_code == 422
    save = reverse("chat:tool_call_case", args=[made.pk, call.pk])
    for form in (
        {"note": long_note},
        {"expect": "other", "tool": "t", "arguments": long_arguments},
    ):
        response = ada.post(save, {"set_name": "cards", "expect": "reply", **form}, **HTMX)
        assert response.status_code == 422
    admin_form = {"run": call.run_id, "tool_call": call.pk, "verdict": "bad", "note": long_note}
    response = root.post(reverse("admin:chat_annotation_add"), admin_form)
    assert response.status_code == 200 and "at most 10000 characters" in response.content.decode()
    case = cases.save_case(made, 0, set_name="cards")
    form = {"title": "t", "case_set": case.case_set_id, "note": long_note, "expected": "{}"}
    response = root.post(reverse("admin:chat_case_change", args=[case.pk]), form)
    assert response.status_code == 200 and "at most 10000 characters" in response.content.decode()
    with pytest.raises(CommandError, match=r"^The note is 10,001 characters"):
        call_command(
            "cases", "add", f"--conversation={made.pk}", "--at-message=0", f"--note={long_note}"
        )
    assert not Annotation.objects.exists()
    assert Case.objects.get() == case and case.note == ""


# Rows stored before the gate: repaired, then every page renders them.


def plant(conversation: Conversation) -> tuple[Annotation, Case]:
    """An annotation and a case holding lone surrogates, as SQLite kept them before the gate."""
    call = call_of(conversation)
    mark = Annotation.objects.create(
        author=make.user("mallory"),
        run=call.run,
        tool_call=call,
        verdict="bad",
        expected={"tool": "search_cards", "arguments": {"query": f"pills{LONE}", LONE: 1}},
    )
    case = cases.save_case(conversation, 0, set_name="cards", user=conversation.owner)
    Case.objects.filter(pk=case.pk).update(
        messages=[{"role": "user", "content": f"hi{LONE}"}],
        expected={"tool_calls": [{"name": "search_cards", "arguments": {"query": LONE}}]},
        fixtures=[{"name": "search_cards", "arguments": {"query": LONE}, "content": LONE}],
    )
    return mark, case


def pages(
    conversation: Conversation, mark: Annotation, case: Case
) -> dict[str, tuple[Client, str]]:
    call, ada, root = call_of(conversation), make.logged_in(conversation.owner), staff()
    return {
        "tool call details": (
            ada,
            reverse("chat:tool_call_detail", args=[conversation.pk, call.pk]),
        ),
        "conversation": (ada, reverse("chat:conversation_detail", args=[conversation.pk])),
        "annotations": (ada, reverse("chat:tool_call_annotation", args=[conversation.pk, call.pk])),
        "save as case": (
            ada,
            reverse("chat:tool_call_case", args=[conversation.pk, call.pk])
            + f"?annotation={mark.pk}",
        ),
        "case set": (ada, reverse("chat:evals:set", args=[case.case_set_id])),
        "admin annotation": (root, reverse("admin:chat_annotation_change", args=[mark.pk])),
        "admin run": (root, reverse("admin:chat_run_change", args=[call.run_id])),
        "admin case": (root, reverse("admin:chat_case_change", args=[case.pk])),
        "admin case set": (root, reverse("admin:chat_caseset_change", args=[case.case_set_id])),
    }


def repair() -> None:
    migration = importlib.import_module("chat.migrations.0011_repair_lone_surrogates")
    migration.repair_lone_surrogates(apps, None)


def test_stored_lone_surrogates_are_repaired_and_every_page_renders(made: Conversation) -> None:
    mark, case = plant(made)
    client, url = pages(made, mark, case)["tool call details"]
    with pytest.raises(UnicodeEncodeError):
        client.get(url)

    repair()

    mark.refresh_from_db()
    assert mark.expected == {
        "tool": "search_cards",
        "arguments": {"query": "pills\ufffd", "\ufffd": 1},
    }
    case.refresh_from_db()
    assert case.messages == [{"role": "user", "content": "hi\ufffd"}]
    assert case.fixtures[0] == {
        "name": "search_cards",
        "arguments": {"query": "\ufffd"},
        "content": "\ufffd",
    }
    for name, (client, url) in pages(made, mark, case).items():
        response = client.get(url, **HTMX)
        assert response.status_code == 200, name
    for command in (["list"], ["list", "--json"], ["export"]):
        out = io.StringIO()
        call_command("cases", *command, stdout=out, stderr=io.StringIO())
        assert "\ufffd" in out.getvalue() or "\\ufffd" in out.getvalue(), command
    ada = make.logged_in(made.owner)
    annotate = reverse("chat:tool_call_annotation", args=[made.pk, call_of(made).pk])
    assert ada.post(annotate, {"verdict": "good"}, **HTMX).status_code == 200
    assert ada.post(annotate, {"action": "clear"}, **HTMX).status_code == 200
    save = pages(made, mark, case)["save as case"][1]
    response = ada.post(
        save, {"set_name": "cards", "expect": "annotation", "annotation": mark.pk}, **HTMX
    )
    assert response.status_code == 200
    assert (
        Case.objects.latest("pk").expected["tool_calls"][0]["arguments"]["query"] == "pills\ufffd"
    )


def test_the_repair_leaves_other_rows_as_they_are(made: Conversation) -> None:
    mark, _ = plant(made)
    clean = cases.save_case(made, 2, set_name="cards", note="fine \U0001f600")
    before = Case.objects.filter(pk=clean.pk).values().get()

    repair()
    repair()

    assert Case.objects.filter(pk=clean.pk).values().get() == before
    mark.refresh_from_db()
    assert json.dumps(mark.expected).count("ufffd") == 2
