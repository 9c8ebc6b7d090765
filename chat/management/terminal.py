"""What the commands share: finding users, reading dates, opening files, printing a run as it
streams, its summary, and a progress bar. Commands parse arguments, call the package that owns
the work, and print with these."""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import IO, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.utils import timezone

from chat import agent, runs
from chat.agent import events
from chat.agent.clients import ChatClient
from chat.models import Conversation, Run
from chat.runs import mcp


def user_named(name: str, *, create: bool = False) -> User:
    """The user with this username; CommandError naming it when there is none.

    With `create`, a missing user is created without a usable password (a terminal identity).
    """
    model = get_user_model()
    lookup: dict[str, Any] = {model.USERNAME_FIELD: name}
    try:
        return model._default_manager.get(**lookup)
    except model.DoesNotExist:
        if not create:
            raise CommandError(f"No user named {name!r}.") from None
    user = model(**lookup)
    user.set_unusable_password()
    user.save()
    return user


def parse_since(text: str) -> datetime:
    """`YYYY-MM-DD` (the start of that day) or an ISO datetime, in the current time zone."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(
            f"{text!r} is not a date: use YYYY-MM-DD or an ISO datetime "
            "such as 2025-01-31T14:00:00+01:00"
        ) from None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


def open_file(path: str, mode: str = "w") -> IO[Any]:
    """A file a command reads or writes (text is UTF-8); CommandError with the system's reason
    when it cannot be opened."""
    try:
        return open(path, mode, encoding=None if "b" in mode else "utf-8")
    except OSError as exc:
        verb = "read" if "r" in mode else "write"
        raise CommandError(f"Cannot {verb} {path}: {exc.strerror}.") from None


@contextmanager
def lines_to(
    path: str | None, stdout: OutputWrapper
) -> Iterator[Callable[[str | Iterable[str]], None]]:
    """Write lines on stdout, or to the file at `path`, opened before the first line (a path
    that cannot be written is refused before any work) and closed at the end. A line may come
    in pieces, written as they come."""
    if not path:

        def write_out(line: str | Iterable[str]) -> None:
            for piece in [line] if isinstance(line, str) else line:
                stdout.write(piece, ending="")
            stdout.write("\n", ending="")

        yield write_out
        return
    with open_file(path, "w") as output:

        def write(line: str | Iterable[str]) -> None:
            output.writelines([line] if isinstance(line, str) else line)
            output.write("\n")

        yield write


def unsent_key_note(base_url: str | None, *, given: bool) -> str | None:
    """The line a command prints when OPENAI_API_KEY is set but not sent to `base_url`."""
    if given or not base_url or not settings.OPENAI_API_KEY:
        return None
    if runs.endpoint(base_url=base_url).key_variable:
        return None
    return (
        f"OPENAI_API_KEY goes only to OPENAI_BASE_URL: no key sent to {base_url} "
        "(pass --api-key to send one)."
    )


class RunPrinter:
    """A run listener that streams the reply and each tool call to a terminal."""

    def __init__(self, stdout: OutputWrapper, stderr: OutputWrapper) -> None:
        self.stdout = stdout
        self.stderr = stderr

    async def __call__(self, run: Run, event: events.RunEvent) -> None:
        match event:
            case events.TextDelta(text):
                self._write(text)
            case events.TurnEnd(message) if message.content:
                self._write("\n")
            case events.ToolCallStarted(call):
                self._write(f"→ {agent.humanize(call.name)} {call.arguments or '{}'}\n")
            case events.ToolCallFinished(result):
                mark = "✓" if result.status == "completed" else "✗"
                self._write(
                    f"{mark} {agent.humanize(result.tool_call.name)} "
                    f"({result.duration:.2f}s): {fold(result.content)}\n"
                )
            case events.ModelCallFailed():
                # The reason is the command's last line (its CommandError); said once.
                self._write("\n")

    def _write(self, text: str) -> None:
        self.stdout.write(text, ending="")
        self.stdout.flush()


class RetryProgress(logging.Filter):
    """The client's retry warnings as short progress lines: the reason comes once, at the end."""

    def __init__(self, stderr: OutputWrapper, progress: Progress | None = None) -> None:
        super().__init__()
        self.stderr = stderr
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        retry = getattr(record, "retry", None)
        if retry is None:
            return True
        attempt, retries, wait = retry
        if self.progress is not None:
            self.progress.interrupt()
        self.stderr.write(f"… retrying ({attempt} of {retries}) in {wait:.1f} s")
        return False


def fold(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def plural(number: int, thing: str) -> str:
    """`1 case`, `3 cases`."""
    return f"{number} {thing}{'' if number == 1 else 's'}"


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as aligned lines: every column padded to its widest cell but the last."""
    if not rows:
        return []
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in rows
    ]


def footer(run: Run, label: str) -> str:
    """The line that closes a streamed run: model, status, conversation, usage, time."""
    return (
        f"[{label} · run {run.pk} {run.status} · conversation {run.conversation_id} · "
        f"{run.prompt_tokens} prompt + {run.completion_tokens} completion tokens · "
        f"{run.steps} step(s) · {run.duration or 0:.2f}s]"
    )


def run_summary(run: Run) -> dict[str, Any]:
    """A finished run as one JSON object, for `--json`."""
    messages = list(run.messages.order_by("index"))
    final = next((m for m in reversed(messages) if m.role == "assistant"), None)
    return {
        "conversation": run.conversation_id,
        "run": run.pk,
        "status": run.status,
        "error": run.error or None,
        "model": run.model,
        "text": final.content if final is not None else None,
        "tool_calls": [
            {
                "id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
                "status": call.status,
                "approval": call.approval or None,
                "edited_arguments": call.edited_arguments or None,
                "decision_reason": call.decision_reason or None,
                "result": call.result,
                "error": call.error or None,
            }
            for call in run.tool_calls.all()
        ],
        "usage": {
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "total_tokens": run.total_tokens,
        },
        "steps": run.steps,
        "duration": run.duration,
    }


def plain(text: str) -> str:
    return text


def add_progress_option(parser: CommandParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Show a progress bar on stderr (default: when stderr is a terminal).",
    )


def progress_wanted(options: Mapping[str, Any], stderr: OutputWrapper) -> bool:
    """What --progress / --no-progress asked for; without either, whether stderr is a terminal."""
    asked: bool | None = options["progress"]
    return asked if asked is not None else stderr.isatty()


class Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    WIDTH = 30

    def __init__(
        self,
        stream: Any,
        *,
        total: int,
        enabled: bool,
        verb: str = "Exporting",
        things: str = "conversations",
    ) -> None:
        self.stream = stream
        self.verb = verb
        self.things = things
        self.total = total
        self.enabled = enabled and total > 0
        self.done = 0
        self.drawn_at = 0.0
        self.visible = False

    def advance(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.enabled and (now - self.drawn_at >= 0.1 or self.done == self.total):
            self.drawn_at = now
            self._draw()

    def interrupt(self) -> None:
        """End the bar's line so a message can be written; it is redrawn on the next step."""
        if self.visible:
            self.stream.write("", style_func=plain)
            self.visible = False

    def close(self) -> None:
        if self.visible:
            self._draw()
            self.interrupt()

    def _draw(self) -> None:
        filled = self.WIDTH * self.done // self.total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        text = f"\r{self.verb} [{bar}] {self.done}/{self.total} {self.things}"
        self.stream.write(text, style_func=plain, ending="")
        self.stream.flush()
        self.visible = True


def run_to_end(
    *,
    conversation: Conversation,
    user: Any,
    content: str | None,
    client: ChatClient | None = None,
    printer: RunPrinter | None = None,
    version_from: int | None = None,
    attachments: Sequence[agent.Attachment] = (),
) -> Run:
    """Start a run the way the web does and wait for its end; CommandError when refused.

    With `version_from`, the run makes a new version from that message on (see `start_run`).
    """

    async def go() -> Run:
        try:
            handle = await runs.start_run(
                conversation=conversation,
                user=user,
                content=content,
                client=client,
                listeners=[printer] if printer is not None else [],
                version_from=version_from,
                attachments=attachments,
            )
        except runs.RunRefused as exc:
            if client is not None:
                await client.aclose()
            raise CommandError(str(exc)) from None
        try:
            return await handle.task
        finally:
            # The run connected to the MCP servers it enabled; the connections (and the stdio
            # servers) end with this event loop. A command is one process: its hub is ours.
            await mcp.hub.close()

    with retry_progress(printer):
        run = asyncio.run(go())
    run.refresh_from_db()
    return run


@contextmanager
def retry_progress(printer: RunPrinter | None) -> Iterator[None]:
    """While a streamed run executes, the client's retries as progress lines (RetryProgress)."""
    if printer is None:
        yield
        return
    clients = logging.getLogger("chat.agent.clients")
    progress = RetryProgress(printer.stderr)
    clients.addFilter(progress)
    try:
        yield
    finally:
        clients.removeFilter(progress)


def finish(run: Run, *, label: str, stdout: OutputWrapper, as_json: bool) -> None:
    """Print the run's footer (streamed) or nothing (--json prints the summary); CommandError
    with the run's error when it did not complete, so the exit status is 1."""
    if not as_json:
        stdout.write(footer(run, label))
    if run.status == "requires_action":
        raise CommandError(
            f"Run {run.pk} waits for a decision on its tool calls: approve or deny them in the "
            f"web, or with manage.py runs decide {run.pk} --approve | --deny."
        )
    if run.status != "completed":
        raise CommandError(run.error or f"The run ended {run.status}.")
