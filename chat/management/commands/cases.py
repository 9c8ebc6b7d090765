"""manage.py cases: keep moments of conversations as evaluation cases, list, export, import."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from chat import access
from chat.agent import decisions
from chat.agent.probes.report import clip
from chat.evals import cases, records
from chat.management.terminal import lines_to, open_file, plain, plural, table, user_named
from chat.models import Case, CaseSet, CaseSource, Conversation
from chat.transcripts.limits import ARGUMENT_CHARS, JsonRefused, load_json

DEFAULT_SET = "default"
EXPECT = "expect"
"""The dest both --expect-tool and --expect-args write to, in the order they were given."""


class _Ordered(argparse.Action):
    """Keep --expect-tool and --expect-args in one list, in order, so each --expect-args goes
    with the --expect-tool before it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = list(getattr(namespace, self.dest, None) or [])
        given.append((option_string, values))
        setattr(namespace, self.dest, given)


class Command(BaseCommand):
    help = (
        "Evaluation cases: `add` keeps the moment after a user or tool message of a "
        "conversation with the tool decision expected next, `list` shows them, `export` writes "
        "a set as JSON Lines and `import` reads them back. `manage.py eval` replays them."
    )
    # It reads and writes rows only: the system checks (every URLconf and view loaded) are
    # `manage.py check`'s and the server's, not a cost of each call.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = actions.add_parser(
            "add",
            help="Keep the moment after a message as a case.",
            description="Keep the moment after message N (a user or tool message) of a "
            "conversation as a case: the history up to it, the tools offered then, the tool "
            "results recorded in the conversation, and the decision expected next. Without "
            "--expect-*, what the stored reply after it called.",
        )
        add.add_argument("--conversation", type=int, required=True, metavar="ID")
        add.add_argument(
            "--at-message",
            type=int,
            required=True,
            metavar="N",
            help="The message's index (its #N in the admin transcript).",
        )
        add.add_argument("--set", default=DEFAULT_SET, metavar="NAME", help="Default: default.")
        add.add_argument("--title", default="", help="Default: the question asked.")
        add.add_argument("--note", default="")
        add.add_argument(
            "--expect-tool",
            dest=EXPECT,
            action=_Ordered,
            metavar="NAME",
            help="A tool call expected (repeat for several).",
        )
        add.add_argument(
            "--expect-args",
            dest=EXPECT,
            action=_Ordered,
            metavar="JSON",
            help="The arguments the --expect-tool before it must hold, a JSON object "
            "(default: any arguments).",
        )
        add.add_argument(
            "--expect-no-tool", action="store_true", help="The model should call no tool."
        )
        add.add_argument(
            "--user",
            metavar="NAME",
            help="Who keeps it: the conversation's owner, or anyone when it is shared "
            "(default: 'cli', created if missing).",
        )
        listing = actions.add_parser("list", help="Show the cases.")
        listing.add_argument("--set", metavar="NAME", help="Only this set.")
        listing.add_argument("--json", action="store_true", help="Print a JSON list.")
        export = actions.add_parser("export", help="Write cases as JSON Lines.")
        export.add_argument("--set", metavar="NAME", help="Only this set (default: every case).")
        export.add_argument(
            "--output", default="-", metavar="FILE", help="Write here ('-', the default: stdout)."
        )
        load = actions.add_parser(
            "import",
            help="Read cases from JSON Lines.",
            description="Store each line of FILE as a case, all or none: each bad line is "
            "reported with its number, and when any is, nothing is imported (exit status 1).",
        )
        load.add_argument("file", metavar="FILE", help="JSON Lines ('-': stdin).")
        load.add_argument("--set", metavar="NAME", help="Put every case in this set.")
        load.add_argument(
            "--user", metavar="NAME", help="Who keeps them (default: 'cli', created if missing)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        match options["action"]:
            case "add":
                self.add_case(options)
            case "list":
                self.list_cases(options["set"], as_json=options["json"])
            case "export":
                self.export_cases(options["set"], options["output"])
            case "import":
                self.import_cases(options)

    def add_case(self, options: dict[str, Any]) -> None:
        expected = expectation(options.get(EXPECT) or [], no_tool=options["expect_no_tool"])
        try:
            conversation = Conversation.objects.get(pk=options["conversation"])
        except Conversation.DoesNotExist:
            raise CommandError(f"No conversation {options['conversation']}.") from None
        user = user_named(options["user"] or "cli", create=not options["user"])
        # A named user takes a case where the rule lets them annotate; 'cli' is the terminal.
        refused = access.denied(user, access.Action.ANNOTATE, conversation)
        if options["user"] and refused:
            raise CommandError(refused)
        try:
            case = cases.save_case(
                conversation,
                options["at_message"],
                set_name=options["set"],
                user=user,
                expected=expected,
                source=CaseSource.REPLY if expected is None else CaseSource.GIVEN,
                title=options["title"],
                note=options["note"],
            )
        except cases.CaseRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"case {case.pk} {json.dumps(case.title, ensure_ascii=False)} in set "
            f"{case.case_set.name}: expects {case.expected_text}"
        )
        if why := cases.why_expected(case.messages[-1]["role"], case.expected):
            self.stdout.write(why)

    def list_cases(self, set_name: str | None, *, as_json: bool) -> None:
        rows = list(chosen(set_name))
        if as_json:
            self.stdout.write(json.dumps([summary(case) for case in rows], indent=2))
            return
        if not rows:
            self.stdout.write(
                "No cases. Keep one with: manage.py cases add --conversation ID --at-message N"
            )
            return
        lines = [("ID", "SET", "TITLE", "EXPECTS", "FIXTURES", "FROM")]
        for case in rows:
            lines.append(
                (
                    str(case.pk),
                    case.case_set.name,
                    clip(case.title, 50),
                    clip(case.expected_text, 60),
                    str(len(case.fixtures)),
                    origin(case),
                )
            )
        for line in table(lines):
            self.stdout.write(line)

    def export_cases(self, set_name: str | None, path: str) -> None:
        rows = chosen(set_name)
        written = 0
        with lines_to(None if path == "-" else path, self.stdout) as write:
            for line in records.export_lines(rows.iterator(chunk_size=100)):
                write(line)
                written += 1
        where = "" if path == "-" else f" to {path}"
        what = f" of set {set_name}" if set_name else ""
        self.stderr.write(f"exported {plural(written, 'case')}{what}{where}", style_func=plain)

    def import_cases(self, options: dict[str, Any]) -> None:
        user = user_named(options["user"] or "cli", create=not options["user"])
        if options["set"] is not None and not options["set"].strip():
            raise CommandError("--set needs a name.")
        path = options["file"]
        stream = sys.stdin.buffer if path == "-" else open_file(path, "rb")
        unreadable: list[str] = []
        try:
            lines = list(decoded(stream, unreadable))
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        read = records.read_lines(lines, set_name=options["set"])
        problems = sorted([*read.problems, *unreadable], key=line_number)
        for problem in problems:
            self.stderr.write(problem)
        if problems:  # all or none: a corrected file imported again makes no duplicates
            raise CommandError(
                f"{plural(len(problems), 'line')} refused: nothing imported (see above)."
            )
        for note in read.notes:
            self.stderr.write(note, self.style.WARNING)
        created = records.store(read.records, user=user)
        self.stdout.write(f"imported {plural(len(created), 'case')}")


def expectation(given: Sequence[tuple[str, str]], *, no_tool: bool) -> dict[str, Any] | None:
    """The expectation --expect-tool/--expect-args/--expect-no-tool describe; None for none
    (the stored reply's decision); CommandError saying what is wrong."""
    calls: list[list[Any]] = []
    for option, value in given:
        if option == "--expect-tool":
            calls.append([value, None])
            continue
        if not calls or calls[-1][1] is not None:
            raise CommandError(
                "--expect-args goes right after the --expect-tool NAME whose arguments it gives."
            )
        calls[-1][1] = arguments(value)
    if no_tool and calls:
        raise CommandError("--expect-no-tool and --expect-tool exclude each other: choose one.")
    if no_tool:
        return dict(decisions.NO_TOOL)
    if not calls:
        return None
    return decisions.expectation((name, args or {}) for name, args in calls)


def arguments(text: str) -> dict[str, Any]:
    """--expect-args through the bounded gate, as the page reads expected arguments."""
    shown = clip(text, 40)
    try:
        value = load_json(text, max_chars=ARGUMENT_CHARS)
    except JsonRefused as exc:
        raise CommandError(f"--expect-args {shown!r}: {exc}.") from None
    if not isinstance(value, dict):
        raise CommandError(
            f"--expect-args {shown!r} is not a JSON object: give the arguments as {{...}}."
        )
    return value


def chosen(set_name: str | None) -> QuerySet[Case]:
    """The cases of a set (CommandError when there is no such set), or every case."""
    rows = Case.objects.select_related("case_set").order_by("case_set__name", "pk")
    if set_name is None:
        return rows
    if not CaseSet.objects.filter(name=set_name).exists():
        raise CommandError(f"No case set named {set_name!r} (manage.py cases list).")
    return rows.filter(case_set__name=set_name)


def origin(case: Case) -> str:
    if case.conversation_id is None:
        return "imported" if case.source == CaseSource.IMPORTED else "—"
    return f"conversation {case.conversation_id} message {case.at_message}"


def summary(case: Case) -> dict[str, Any]:
    return {
        "id": case.pk,
        "set": case.case_set.name,
        "title": case.title,
        "expected": case.expected,
        "expects": case.expected_text,
        "source": case.source,
        "tools": case.tool_names,
        "fixtures": len(case.fixtures),
        "conversation": case.conversation_id,
        "at_message": case.at_message,
        "note": case.note,
        "created_at": case.created_at.isoformat(),
    }


def decoded(stream: IO[bytes], unreadable: list[str]) -> Iterator[str]:
    """The stream's lines as text; a line that is not UTF-8 is reported in `unreadable` and
    passed on empty, so the others keep their numbers."""
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            unreadable.append(f"line {number}: not UTF-8 text: {exc.reason}")
            yield ""


def line_number(problem: str) -> int:
    found = re.match(r"line (\d+):", problem)
    return int(found.group(1)) if found else 0
