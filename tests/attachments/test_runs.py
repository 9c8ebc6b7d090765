"""Attached files on their way to the model: the parts a strict provider receives, versions and
forks keeping them, a model known to take no images, and the tokens a send frame carries."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from django.core import signing
from django.core.files.storage import default_storage

from chat import runs
from chat.models import Message, ModelCall, ProviderProfile
from chat.testing import factories as make
from chat.testing.approvals import on_provider
from chat.testing.openai_script import text_only, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import attachments as stored_files
from chat.transcripts import forks, load_history
from chat.transcripts.files import Refused

from . import files as made_files

pytestmark = pytest.mark.django_db(transaction=True)


def send(conversation: Any, content: str | None, *files: Any, **options: Any) -> Any:
    owner = conversation.owner

    async def go() -> Any:
        handle = await runs.start_run(
            conversation=conversation,
            user=owner,
            content=content,
            attachments=files,
            **options,
        )
        return await handle.task

    return asyncio.run(go())


@pytest.fixture
def provider(fake_openai: FakeOpenAIServer) -> Any:
    return on_provider(fake_openai, make.user("ada"))


@pytest.fixture
def chart() -> Any:
    return stored_files.admit_and_store("chart.png", made_files.png(), "image/png")


def test_a_strict_provider_gets_text_image_file_and_pdf_as_content_parts(
    provider: Any, fake_openai: FakeOpenAIServer, chart: Any
) -> None:
    data = made_files.png()
    notes = stored_files.admit_and_store("notes.csv", b"region,total\nnorth,12\n", "text/csv")
    spec = stored_files.admit_and_store("spec.pdf", made_files.pdf("Ship it"), "")
    fake_openai.enqueue(text_turn("A blue chart, a table and a spec."))

    run = send(provider, "What is in these?", chart, notes, spec)

    assert run.status == "completed", run.error
    (request,) = fake_openai.requests  # the strict server checked the parts against the schema
    assert request.body["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in these?"},
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/png;base64,{base64.b64encode(data).decode()}"},
            },
            {
                "type": "text",
                "text": "Attached file notes.csv (text/csv):\n\nregion,total\nnorth,12\n",
            },
            {
                "type": "text",
                "text": "Attached file spec.pdf (PDF, 1 page, as text):\n\n[Page 1]\nShip it",
            },
        ],
    }
    # The row keeps what was attached, not the contents; the model call keeps the exact body.
    row = Message.objects.get(conversation=provider, role="user")
    assert [item["name"] for item in row.attachments] == ["chart.png", "notes.csv", "spec.pdf"]
    assert all("content" not in item or item["content"] is None for item in row.attachments)
    call = ModelCall.objects.get(run=run)
    assert call.request["messages"][-1] == request.body["messages"][-1]


def test_files_alone_make_a_message_and_name_the_conversation(
    provider: Any, fake_openai: FakeOpenAIServer, chart: Any
) -> None:
    provider.title = ""
    provider.save()
    fake_openai.enqueue(text_turn("A chart."))

    run = send(provider, "", chart)

    assert run.status == "completed", run.error
    assert fake_openai.requests[0].body["messages"][-1]["content"][0]["type"] == "image_url"
    provider.refresh_from_db()
    assert provider.title == "chart.png"


def test_a_model_known_to_take_no_images_is_not_sent_one(
    provider: Any, fake_openai: FakeOpenAIServer, chart: Any
) -> None:
    fake_openai.checks.append(text_only)
    ProviderProfile.objects.filter(pk=provider.profile_id).update(accepts_images=False)
    provider.refresh_from_db()

    with pytest.raises(runs.RunRefused) as refused:
        send(provider, "What is this?", chart)

    assert str(refused.value) == (
        "The model fake-model takes no images (check_provider found so): remove chart.png or "
        "choose another model in Agent settings."
    )
    assert not Message.objects.filter(conversation=provider).exists()
    assert fake_openai.requests == []
    # A text file still goes to it.
    notes = stored_files.admit_and_store("notes.txt", b"hello", "text/plain")
    fake_openai.enqueue(text_turn("Hello to you."))
    assert send(provider, "Read this", notes).status == "completed"


def test_another_model_than_the_profiles_is_not_known(
    provider: Any, fake_openai: FakeOpenAIServer, chart: Any
) -> None:
    ProviderProfile.objects.filter(pk=provider.profile_id).update(accepts_images=False)
    parameters = provider.agent_parameters().model_copy(update={"model": "fake-vision"})
    provider.set_agent_parameters(parameters)
    provider.save()
    fake_openai.enqueue(text_turn("A chart."))

    assert send(provider, "What is this?", chart).status == "completed"


def test_regenerate_edit_and_fork_keep_the_files(
    provider: Any, fake_openai: FakeOpenAIServer, chart: Any
) -> None:
    fake_openai.enqueue(text_turn("First."), text_turn("Second."), text_turn("Third."))
    send(provider, "What is this?", chart)

    send(provider, None, version_from=0)
    send(provider, "And now?", version_from=0)

    for request in fake_openai.requests:
        assert request.body["messages"][-1]["content"][-1]["type"] == "image_url"
    assert fake_openai.requests[2].body["messages"][-1]["content"][0]["text"] == "And now?"
    history = load_history(provider)
    assert history[0].attachments == (chart,)
    fork = forks.fork_conversation(provider, owner=provider.owner, at_message=1)
    assert load_history(fork)[0].attachments == (chart,)


def test_a_file_gone_from_storage_says_so_and_the_conversation_goes_on(
    provider: Any, fake_openai: FakeOpenAIServer
) -> None:
    notes = stored_files.admit_and_store("notes.txt", b"hello", "text/plain")
    fake_openai.enqueue(text_turn("Read."), text_turn("Still here."))
    send(provider, "Read this", notes)
    default_storage.delete(stored_files.path(notes.sha256))

    assert send(provider, "And again?").status == "completed"

    earlier = fake_openai.requests[1].body["messages"][0]["content"]
    assert earlier[-1] == {
        "type": "text",
        "text": "Attached file notes.txt (text/plain):\n\n(no longer stored)",
    }


def test_the_same_bytes_are_stored_once() -> None:
    first = stored_files.admit_and_store("a.txt", b"same bytes")
    second = stored_files.admit_and_store("b.txt", b"same bytes")

    assert first.sha256 == second.sha256 and (first.name, second.name) == ("a.txt", "b.txt")
    folder = stored_files.path(first.sha256).rsplit("/", 1)[0]
    assert default_storage.listdir(folder)[1] == [first.sha256]


def test_a_send_frames_tokens_name_files_of_that_conversation_only(chart: Any) -> None:
    owner = make.user("ada")
    mine, other = make.conversation(owner), make.conversation(owner)
    token = stored_files.token(owner.pk, mine.pk, chart)

    assert stored_files.from_tokens([token], owner.pk, mine.pk) == (chart,)
    assert stored_files.from_tokens(None, owner.pk, mine.pk) == ()
    refusals = {
        "An attachment was uploaded to another conversation.": [token],
        "An attachment token is not one this site gave.": [token[:-2] + "xx"],
        "attachments must be a list of the tokens the upload answered.": "not a list",
        "A message carries at most 10 files, not 11.": [token] * 11,
    }
    for line, tokens in refusals.items():
        with pytest.raises(Refused) as refused:
            stored_files.from_tokens(tokens, owner.pk, other.pk if "another" in line else mine.pk)
        assert str(refused.value) == line
    forged = signing.dumps({"u": owner.pk, "c": mine.pk, "a": {"name": "x"}}, salt="other")
    with pytest.raises(Refused, match="not one this site gave"):
        stored_files.from_tokens([forged], owner.pk, mine.pk)
    default_storage.delete(stored_files.path(chart.sha256))
    with pytest.raises(Refused, match=r"^chart.png is no longer stored; attach it again\.$"):
        stored_files.from_tokens([token], owner.pk, mine.pk)
