"""What the model reads of an MCP result, and the media a person is shown of it."""

from __future__ import annotations

import base64
import json

from mcp import types

from chat.agent import mcp_content
from chat.testing.mcp_server import RUNBOOK, RUNBOOK_URI, png, wav


def result(**fields: object) -> types.CallToolResult:
    return types.CallToolResult.model_validate(fields)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


PICTURE = png(padding=300_000)
CHART = result(
    content=[{"type": "text", "text": "The load chart for this week."}],
    structuredContent={
        "title": "Weekly load",
        "points": [3, 5, 4],
        "image": {"type": "image", "mimeType": "image/png", "data": b64(PICTURE)},
    },
)
RUNBOOK_BLOCKS = [
    {"type": "text", "text": "Here is the runbook."},
    {
        "type": "resource",
        "resource": {"uri": RUNBOOK_URI, "mimeType": "text/markdown", "text": RUNBOOK},
    },
]


def test_structured_content_is_json_after_the_results_own_words_its_image_named() -> None:
    text = mcp_content.result_text(CHART)
    size = f"{len(PICTURE):,}"
    assert text == (
        "The load chart for this week.\n"
        '{"title": "Weekly load", "points": [3, 5, 4], '
        f'"image": "[image: image/png, {size} bytes, shown to the user]"}}'
    )
    assert len(text) < 200  # not 400,000 characters of base64


def test_base64_and_data_urls_anywhere_in_structured_content_are_named() -> None:
    data = b64(b"\x00\x01" * 1_000)
    structured = {
        "rows": [{"thumb": f"data:image/jpeg;base64,{data}", "id": 1}],
        "attachment": data,
        "file": {"blob": data, "mimeType": "application/pdf"},
        "note": "short and plain",
        "hash": "a" * 40,
    }
    read = json.loads(mcp_content.result_text(result(content=[], structuredContent=structured)))
    assert read == {
        "rows": [{"thumb": "[binary data: image/jpeg, 2,000 bytes]", "id": 1}],
        "attachment": "[binary data: 2,000 bytes]",
        "file": "[binary data: application/pdf, 2,000 bytes, shown to the user]",
        "note": "short and plain",
        "hash": "a" * 40,
    }


def test_a_text_mirroring_the_structured_content_is_read_once() -> None:
    mirrored = result(
        content=[{"type": "text", "text": '{\n  "n": 1\n}'}], structuredContent={"n": 1, "é": "ü"}
    )
    assert mcp_content.result_text(mirrored) == '{"n": 1, "é": "ü"}'
    wrapped = result(content=[{"type": "text", "text": "5"}], structuredContent={"result": 5})
    assert mcp_content.result_text(wrapped) == "5"
    listed = result(content=[{"type": "text", "text": "[1]"}], structuredContent={"result": [1]})
    assert mcp_content.result_text(listed) == '{"result": [1]}'
    texts = result(content=[{"type": "text", "text": "one"}, {"type": "text", "text": "two"}])
    assert mcp_content.result_text(texts) == "one\ntwo"


def test_structured_content_mirroring_the_blocks_is_read_as_the_blocks_once() -> None:
    both = result(content=RUNBOOK_BLOCKS, structuredContent={"result": RUNBOOK_BLOCKS})
    assert mcp_content.result_text(both) == (
        f"Here is the runbook.\n[resource {RUNBOOK_URI} (text/markdown)]\n{RUNBOOK}"
    )


def test_images_audio_blobs_and_links_are_one_line_each() -> None:
    mixed = result(
        content=[
            {"type": "text", "text": "Here:"},
            {"type": "image", "data": b64(b"hello world!"), "mimeType": "image/png"},
            {"type": "audio", "data": b64(wav()), "mimeType": "audio/wav"},
            {
                "type": "resource",
                "resource": {"uri": "docs://x.zip", "blob": b64(b"z" * 1024), "mimeType": "a/z"},
            },
            {"type": "resource_link", "uri": "docs://oncall.md", "name": "on-call"},
            {"type": "resource_link", "uri": "https://x", "name": "x", "description": "The X"},
        ]
    )
    assert mcp_content.result_text(mixed).splitlines() == [
        "Here:",
        "[image: image/png, 12 bytes, shown to the user]",
        f"[audio: audio/wav, {len(wav()):,} bytes, shown to the user]",
        "[resource docs://x.zip: a/z, 1,024 bytes, shown to the user]",
        "[resource link on-call docs://oncall.md]",
        "[resource link x https://x: The X]",
    ]


def test_a_long_result_is_cut_with_a_line_saying_how_much() -> None:
    long = result(content=[{"type": "text", "text": "x" * 250}])
    assert mcp_content.result_text(long, limit=100) == (
        "x" * 100 + "\n[cut: the first 100 of 250 characters; the whole result is kept in the "
        "run's log]"
    )
    assert mcp_content.result_text(long, limit=250) == "x" * 250


def test_an_error_result_is_read_the_same_way() -> None:
    failed = result(content=[{"type": "text", "text": "index rebuilding"}], isError=True)
    assert mcp_content.error_text(failed) == "index rebuilding"
    assert mcp_content.error_text(result(content=[], isError=True)) == "the tool failed"
    with_image = result(
        content=[{"type": "image", "data": b64(PICTURE), "mimeType": "image/png"}], isError=True
    )
    assert mcp_content.error_text(with_image).endswith("bytes, shown to the user]")


def test_a_stored_result_reads_as_the_result_did() -> None:
    assert mcp_content.result_text(mcp_content.as_json(CHART)) == mcp_content.result_text(CHART)


def test_media_names_what_a_person_is_shown_and_where_its_data_is() -> None:
    stored = mcp_content.as_json(CHART)
    (chart,) = mcp_content.media(stored)
    assert (chart.kind, chart.mime_type, chart.size) == ("image", "image/png", len(PICTURE))
    assert chart.path == ("structuredContent", "image")
    assert mcp_content.media_data(stored, chart.path) == PICTURE

    both = result(content=RUNBOOK_BLOCKS, structuredContent={"result": RUNBOOK_BLOCKS})
    (runbook,) = mcp_content.media(both)  # the mirror is not shown twice
    assert (runbook.kind, runbook.uri, runbook.text) == ("text", RUNBOOK_URI, RUNBOOK)

    mixed = result(
        content=[
            {"type": "audio", "data": b64(b"RIFF...."), "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "docs://x.zip", "blob": b64(b"PK")}},
            {"type": "resource_link", "uri": "docs://oncall.md", "name": "on-call"},
        ],
        structuredContent={"thumb": f"data:image/gif;base64,{b64(b'GIF89a')}"},
    )
    found = mcp_content.media(mixed)
    assert [(m.kind, m.path) for m in found] == [
        ("audio", ("content", 0)),
        ("blob", ("content", 1, "resource")),
        ("link", ("content", 2)),
        ("image", ("structuredContent", "thumb")),
    ]
    assert mcp_content.media_data(mixed, found[1].path) == b"PK"
    assert mcp_content.media_data(mixed, found[3].path) == b"GIF89a"
    assert mcp_content.media_data(mixed, ("content", 9)) is None
    assert mcp_content.media_data(mixed, found[2].path) is None  # a link has no data
