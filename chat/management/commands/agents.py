"""manage.py agents: make agents and versions from conversations, list, show, compare, publish,
export and import them, as the user `--user` names (the rule of `chat.access` decides)."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import agents
from chat.agents import records, suites, texts
from chat.management.terminal import lines_to, open_file, plain, plural, table, user_named
from chat.models import Agent, AgentVersion, Conversation, Visibility


class Command(BaseCommand):
    help = (
        "Agents: `create` one from a conversation's settings (version 1, published), add a "
        "`version`, `publish` one, `list`, `show` and `diff` versions, `export` an agent as JSON "
        "and `import` it back. Each acts as --user (default: 'cli'), as the web lets them."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = self._action(
            actions, "create", "An agent whose version 1, published, is a conversation's settings."
        )
        create.add_argument("name", metavar="NAME")
        create.add_argument("--from-conversation", type=int, required=True, metavar="ID")
        create.add_argument("--description", default="", metavar="TEXT", help="What it does.")
        create.add_argument(
            "--team", action="store_true", help="Share it with the team (default: private)."
        )
        version = self._action(
            actions, "version", "A new version of an agent from a conversation's settings."
        )
        version.add_argument("name", metavar="NAME")
        version.add_argument("--from-conversation", type=int, required=True, metavar="ID")
        version.add_argument("--note", default="", metavar="TEXT", help="What changed.")
        version.add_argument(
            "--publish", action="store_true", help="Publish it: new conversations use it."
        )
        self._action(actions, "list", "The agents you may chat with.")
        show = self._action(actions, "show", "An agent's versions and one version's settings.")
        show.add_argument(
            "name", metavar="NAME[@N]", help="NAME: its published version; NAME@N: version N."
        )
        diff = self._action(actions, "diff", "What changed from one version to another.")
        diff.add_argument("before", metavar="NAME@N")
        diff.add_argument("after", metavar="NAME@M")
        publish = self._action(actions, "publish", "Make version N the one new conversations use.")
        publish.add_argument("name", metavar="NAME@N")
        export = self._action(actions, "export", "Write an agent and its versions as JSON.", False)
        export.add_argument("name", metavar="NAME")
        export.add_argument(
            "--output", default="-", metavar="FILE", help="Write here ('-', the default: stdout)."
        )
        load = self._action(
            actions,
            "import",
            "Read an agent written by `export`, all or nothing.",
            description="Read an agent written by `export`, all or nothing. MCP servers and "
            "provider profiles are named: a missing profile refuses the import; a missing MCP "
            "server is said in one line and its tools stay chosen, unavailable until it is added.",
        )
        load.add_argument("file", metavar="FILE", help="JSON ('-': stdin).")
        load.add_argument("--name", help="Import it under this name (default: the file's).")

    def _action(
        self,
        actions: Any,
        name: str,
        text: str,
        as_json: bool = True,
        *,
        description: str | None = None,
    ) -> CommandParser:
        parser: CommandParser = actions.add_parser(name, help=text, description=description or text)
        parser.add_argument(
            "--user",
            metavar="NAME",
            help="Who acts (default: 'cli', created if missing): the web's rule decides.",
        )
        if as_json:
            parser.add_argument("--json", action="store_true", help="Print JSON.")
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_named(options["user"] or "cli", create=not options["user"])
        self.as_json = bool(options.get("json"))
        try:
            match options["action"]:
                case "create":
                    self.create(user, options)
                case "version":
                    self.version(user, options)
                case "list":
                    self.list(user)
                case "show":
                    self.show(user, options["name"])
                case "diff":
                    self.diff(user, options["before"], options["after"])
                case "publish":
                    self.publish(user, options["name"])
                case "export":
                    self.export(user, options["name"], options["output"])
                case "import":
                    self.load(user, options["file"], options["name"])
        except agents.AgentRefused as exc:
            raise CommandError(str(exc)) from None

    def create(self, user: User, options: dict[str, Any]) -> None:
        made = agents.create_agent(
            name=options["name"],
            conversation=conversation(options["from_conversation"]),
            user=user,
            description=options["description"],
            visibility=Visibility.TEAM if options["team"] else Visibility.PRIVATE,
        )
        self.made(user, made.published, f"made {made.name} (slug {made.slug}): v1, published")

    def version(self, user: User, options: dict[str, Any]) -> None:
        made = agents.new_version(
            agent=agent_named(user, options["name"]),
            conversation=conversation(options["from_conversation"]),
            user=user,
            note=options["note"],
        )
        if options["publish"]:
            self.publish_version(user, made, f"made {made}: published")
            return
        self.made(user, made, f"made {made}: a draft (agents publish NAME@N)")

    def publish(self, user: User, reference: str) -> None:
        if "@" not in reference:
            raise CommandError(f"{reference!r}: write NAME@N, the version to publish.")
        version = stored(find(user, reference))
        if version.is_published:
            self.made(user, version, f"published {version} (it already was)")
            return
        was = version.agent.published
        self.publish_version(user, version, f"published {version} (was {was})")

    def publish_version(self, user: User, version: AgentVersion, line: str) -> None:
        """Publish, through the agent's suite when it has one: the version is evaluated first,
        shown beside the published version's result; refused by the gate, exit status 1."""
        publishing = suites.publish_or_plan(version, user=user)
        if publishing is None:
            version.agent.refresh_from_db()
            self.made(user, version, line)
            return
        candidate = publishing.candidate.eval_run
        self.stderr.write(
            f"Evaluating {version} on the suite {candidate.set_name!r} "
            f"({plural(len(publishing.candidate.cases), 'case')}) before publishing it…"
        )
        try:
            outcome = suites.run_publication(publishing, user=user)
        except KeyboardInterrupt:
            raise CommandError(
                f"Stopped: {version} is not published; eval run {candidate.pk} is cancelled."
            ) from None
        candidate.refresh_from_db()
        for shown in filter(None, (candidate, candidate.baseline)):
            self.stderr.write(texts.suite_line(shown))
        version.agent.refresh_from_db()
        if not version.is_published:
            raise CommandError(outcome)
        self.made(user, version, outcome)

    def made(self, user: User, version: AgentVersion | None, line: str) -> None:
        if version is None:  # an agent always has its published version; said, not assumed
            raise CommandError("The agent has no published version.")
        if self.as_json:
            chosen = agents.default_agent(user)
            self.print_json(texts.agent_summary(version.agent, chosen, shown=version))
        else:
            self.stdout.write(line)

    def list(self, user: User) -> None:
        rows = list(agents.Agent.objects.usable_by(user).select_related("owner", "published"))
        chosen, counts = agents.default_agent(user), texts.version_counts(rows)
        if self.as_json:
            self.print_json(
                [texts.agent_summary(row, chosen, versions=counts.get(row.pk, 0)) for row in rows]
            )
            return
        if not rows:
            self.stdout.write(
                "No agents but the built-in Default. Make one with: manage.py agents create NAME "
                "--from-conversation ID"
            )
            return
        lines: list[tuple[str, ...]] = [
            ("NAME", "PUBLISHED", "VERSIONS", "VISIBILITY", "OWNER", "DESCRIPTION")
        ]
        lines += [texts.list_row(row, chosen, versions=counts.get(row.pk, 0)) for row in rows]
        for line in table(lines):
            self.stdout.write(line, style_func=plain)

    def show(self, user: User, reference: str) -> None:
        version = find(user, reference)
        if self.as_json:
            shown = (
                texts.built_in_summary()
                if version is None
                else texts.agent_summary(
                    version.agent, agents.default_agent(user), shown=version, every_version=True
                )
            )
            self.print_json(shown)
            return
        for line in texts.show_lines(version):
            self.stdout.write(line, style_func=plain)

    def diff(self, user: User, before: str, after: str) -> None:
        old, new = find(user, before), find(user, after)
        difference = agents.difference(side(old), side(new))
        names = (texts.version_name(old), texts.version_name(new))
        if self.as_json:
            self.print_json(texts.difference_summary(difference, *names))
            return
        for line in texts.difference_lines(difference, *names):
            self.stdout.write(line, style_func=plain)

    def export(self, user: User, name: str, path: str) -> None:
        found = agent_named(user, name)
        text = records.export_text(found)
        with lines_to(None if path == "-" else path, self.stdout) as write:
            write(text)
        where = "" if path == "-" else f" to {path}"
        self.stderr.write(
            f"exported {found.name} ({found.versions.count()} versions){where}", style_func=plain
        )

    def load(self, user: User, path: str, name: str | None) -> None:
        if path == "-":
            raw = sys.stdin.buffer.read(records.MAX_FILE_CHARS * 4 + 1)
        else:
            with open_file(path, "rb") as stream:
                raw = stream.read(records.MAX_FILE_CHARS * 4 + 1)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CommandError(f"Not an agent file: not UTF-8 text ({exc.reason}).") from None
        imported = records.store(records.read(text), user=user, name=name)
        for note in imported.notes:
            self.stderr.write(note, self.style.WARNING)
        made = imported.agent
        count = made.versions.count()
        line = f"imported {made.name} ({count} versions): {made.published} published"
        self.made(user, made.published, line)

    def print_json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, ensure_ascii=False, indent=2))


def conversation(pk: int) -> Conversation:
    found = Conversation.objects.select_related("profile").filter(pk=pk).first()
    if found is None:
        raise CommandError(f"No conversation {pk}.")
    return found


def find(user: User, reference: str) -> AgentVersion | None:
    """The version NAME or NAME@N names among the agents `user` may use (None: Default)."""
    return agents.find_version(user, reference)


def agent_named(user: User, name: str) -> Agent:
    """The agent NAME names (not a version of it), among those `user` may use."""
    if "@" in name:
        raise CommandError(f"{name!r}: give the agent's name, without @N.")
    return stored(find(user, name)).agent


def stored(version: AgentVersion | None) -> AgentVersion:
    """A stored agent's version; CommandError for the built-in Default, which has none."""
    if version is None:
        raise CommandError(
            "Default is the built-in agent (the server's own settings): it has no versions to "
            "add to, publish or export."
        )
    return version


def side(version: AgentVersion | None) -> AgentVersion | agents.Configuration:
    return agents.configuration(None) if version is None else version
