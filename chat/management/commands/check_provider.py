"""manage.py check_provider: what an OpenAI-compatible endpoint does, before a run depends on it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from chat.agent import probes
from chat.agent.redaction import redact_text
from chat.forms import ProviderProfileForm, base_url_problem
from chat.management.terminal import unsent_key_note
from chat.models import ProviderProfile
from chat.models.providers import NAME_CHARS
from chat.runs.providers import (
    ENVIRONMENT_KEY,
    KeyStatus,
    endpoint,
    key_status,
    key_variable_problem,
    read_key,
)

DEFAULT_KEY_ENV = ENVIRONMENT_KEY
PROFILE_FIELDS = (
    "base_url",
    "model",
    "api_key_env",
    "tool_call_content",
    "tool_call_ids",
    "reasoning_field",
    "parallel_tool_calls",
    "accepts_images",
    "notes",
)


class Command(BaseCommand):
    help = (
        "Connect to an OpenAI-compatible endpoint, list its models, run a streaming probe and a "
        "tool-calling probe, and report what it does: whether it sends a usage chunk, which "
        "finish_reason it gives with tool calls, which field carries reasoning, whether it "
        'accepts "" or null content on a tool-call-only assistant message and whether it '
        "refuses parallel_tool_calls. Exit status 0 only when chat and tool calling work. "
        "With --save-profile, also write what was found to a provider profile. The API key is "
        "never printed, and never stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", help="Default: OPENAI_BASE_URL.")
        parser.add_argument(
            "--api-key",
            help="Default: the variable named by --api-key-env if given, else OPENAI_API_KEY, "
            "which is sent only to OPENAI_BASE_URL (to another --base-url, no key).",
        )
        parser.add_argument(
            "--model", help="Default: AGENTLAB_MODEL, else the first model the endpoint lists."
        )
        parser.add_argument(
            "--timeout", type=float, default=60.0, help="Seconds to wait for each answer."
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")
        parser.add_argument(
            "--save-profile",
            metavar="NAME",
            help="When chat and tool calling work, create or update the provider profile NAME "
            "from what was found (also probes whether tool call ids of our making are refused).",
        )
        parser.add_argument(
            "--api-key-env",
            metavar="VAR",
            help=f"The environment variable the saved profile reads its key from (default "
            f"{DEFAULT_KEY_ENV}; empty: no key): {DEFAULT_KEY_ENV}, an AGENTLAB_KEY_* variable or "
            "one listed in AGENTLAB_KEY_VARIABLES. Its value is the probe's key unless --api-key "
            "is given. Only the name is stored.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["save_profile"]
        key_env = options["api_key_env"]
        if name is not None:
            name = name.strip()
            if not name or len(name) > NAME_CHARS:
                raise CommandError("--save-profile needs a name of 1 to 100 characters.")
        if key_env is not None:
            key_env = key_env.strip()
            problem = key_variable_problem(key_env)
            if problem:
                raise CommandError(f"--api-key-env {key_env!r}: {problem}")
        base_url = options["base_url"] or settings.OPENAI_BASE_URL
        if not base_url:
            raise CommandError(
                "No provider to check: pass --base-url or set OPENAI_BASE_URL (without one, the "
                "lab uses its built-in scripted model, which needs no check)."
            )
        if name is not None:
            problem = base_url_problem(base_url)
            if problem:
                raise CommandError(f"Cannot save a profile for this URL. {problem}")
        if key_env is not None:
            api_key = options["api_key"] or read_key(key_env)
        else:
            api_key = options["api_key"] or endpoint(base_url=base_url).api_key()
            if note := unsent_key_note(base_url, given=bool(options["api_key"])):
                self.stderr.write(note)
        report = asyncio.run(
            probes.check_provider(
                base_url=base_url,
                api_key=api_key or None,
                model=options["model"] or settings.AGENTLAB_MODEL or None,
                read_timeout=options["timeout"],
                configured_content=settings.AGENTLAB_TOOL_CALL_CONTENT,
                probe_ids=name is not None,
            )
        )
        saved: ProviderProfile | None = None
        created = False
        save_error: CommandError | None = None
        if name is not None and report.works:
            try:
                saved, created = save_profile(
                    name,
                    base_url=base_url.strip(),
                    api_key_env=DEFAULT_KEY_ENV if key_env is None else key_env,
                    report=report,
                    secret=api_key or "",
                )
            except CommandError as exc:
                save_error = exc
        if options["json"]:
            data = report.to_json()
            if name is not None:
                data["saved_profile"] = (
                    None if saved is None else {**profile_json(saved), "created": created}
                )
            self.stdout.write(json.dumps(data, ensure_ascii=False, indent=2))
        else:
            self.stdout.write("\n".join(probes.describe(report)))
        unsaved = f" Profile {name!r} not saved." if name is not None else ""
        if report.unreachable:
            raise CommandError(f"Cannot reach the provider: {report.unreachable}{unsaved}")
        if report.problem:
            raise CommandError(report.problem[:1].upper() + report.problem[1:] + "." + unsaved)
        if not report.works:
            failing = [
                name
                for name, works in (
                    ("chat", report.chat_works),
                    ("tool calling", report.tool_calling_works),
                )
                if not works
            ]
            raise CommandError(f"The provider failed the probe: {' and '.join(failing)}.{unsaved}")
        if save_error is not None:
            raise save_error
        if saved is not None and not options["json"]:
            self.stdout.write("\n".join(describe_profile(saved, created)))


def save_profile(
    name: str, *, base_url: str, api_key_env: str, report: probes.Report, secret: str = ""
) -> tuple[ProviderProfile, bool]:
    """Create or update the profile `name` from the report; the key itself is never stored."""
    fields = probes.profile_fields(report)
    if secret:
        # Provider messages quoted in the notes pass through the client's redaction already;
        # this is the belt to that brace.
        fields["notes"] = redact_text(fields["notes"], [secret])
    with transaction.atomic():
        instance = ProviderProfile.objects.select_for_update().filter(name=name).first()
        # Who may use the profile is the admin's to decide: a re-check keeps it.
        available = instance is not None and instance.available_to_everyone
        if fields["accepts_images"] is None and instance is not None:
            # A probe that could not tell keeps what an earlier one (or staff) found.
            fields["accepts_images"] = instance.accepts_images
        form = ProviderProfileForm(
            data={
                "name": name,
                "base_url": base_url,
                "api_key_env": api_key_env,
                "available_to_everyone": available,
                **fields,
            },
            instance=instance,
        )
        if not form.is_valid():
            problems = "; ".join(
                f"{field}: {' '.join(str(error) for error in errors)}"
                for field, errors in form.errors.items()
            )
            raise CommandError(f"Profile {name!r} not saved: {problems}")
        return form.save(), instance is None


def profile_json(profile: ProviderProfile) -> dict[str, Any]:
    data: dict[str, Any] = {"name": profile.name, "id": profile.pk}
    data.update((field, getattr(profile, field)) for field in PROFILE_FIELDS)
    data["api_key_env_set"] = key_status(profile.api_key_env) is KeyStatus.SET
    return data


def describe_profile(profile: ProviderProfile, created: bool) -> list[str]:
    """What was written, as lines for a terminal."""
    if not profile.api_key_env:
        key = "(none: requests are sent without a key)"
    elif key_status(profile.api_key_env) is KeyStatus.SET:
        key = f"{profile.api_key_env} (set in this process; only the name is stored)"
    else:
        key = f"{profile.api_key_env} (NOT set in this process: set it where the lab runs)"
    rows = [
        ("base_url", profile.base_url),
        ("model", profile.model),
        ("api_key_env", key),
        ("tool_call_content", profile.tool_call_content),
        ("tool_call_ids", profile.tool_call_ids),
        ("reasoning_field", profile.reasoning_field or "(not sent back)"),
        ("parallel_tool_calls", "yes" if profile.parallel_tool_calls else "no"),
        ("notes", profile.notes),
    ]
    verb = "Created" if created else "Updated"
    return [
        f"{verb} provider profile {profile.name!r} (id {profile.pk}):",
        *(f"  {label:<19} {value}" for label, value in rows),
    ]
