"""How a model call's request body is stored: whole, or as what the conversation's previous
request did not already hold, so that stored bytes per call do not grow with the history.

A request carries the whole history, so storing each body whole is quadratic in a
conversation's length. A call instead names its base (`ModelCall.request_base`, an earlier call
of the same conversation) and keeps a delta as JSON text (never jsonb, which reorders keys):

    {"keep": n, "messages": [appended], "set": {key: value}, "unset": [key], "order": [key]}

`keep` counts the base's messages taken as they are (present only when both bodies have a
`messages` list); `set` holds the top-level values that differ from the base's, `unset` the keys
the base had and the body lacks, and `order` the body's key order when it is not the base's
(with new keys last). Parts that would be empty are left out. Values are compared by their
encoding, so `1` and `1.0` or a reordered object count as different.

The sha256 of the bytes sent (`wire.encode_body`) is stored beside it: every rebuilt body is
encoded again and checked against it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from chat.agent.wire import encode_body, payload_sha256

if TYPE_CHECKING:
    from .runs import ModelCall, Run

_BODY = "_request_body"
_BATCH = "_request_batch"


class StoredRequestError(Exception):
    """A stored request does not rebuild to the bytes that were sent; the text names the call."""


class Stored(NamedTuple):
    """One call's request columns, as the chain query reads them."""

    pk: int
    base: int | None
    text: str
    sha256: str


def _encoded(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def delta(base: Any, body: Any) -> dict[str, Any] | None:
    """What `body` adds to `base`, or None when a delta cannot say it (either is no object)."""
    if not isinstance(base, dict) or not isinstance(body, dict):
        return None
    out: dict[str, Any] = {}
    old, new = base.get("messages"), body.get("messages")
    listed = isinstance(old, list) and isinstance(new, list)
    if isinstance(old, list) and isinstance(new, list):
        keep = 0
        for before, after in zip(old, new, strict=False):
            if _encoded(before) != _encoded(after):
                break
            keep += 1
        out["keep"] = keep
        if new[keep:]:
            out["messages"] = new[keep:]
    changed = {
        key: value
        for key, value in body.items()
        if not (listed and key == "messages")
        and (key not in base or _encoded(base[key]) != _encoded(value))
    }
    if changed:
        out["set"] = changed
    unset = [key for key in base if key not in body]
    if unset:
        out["unset"] = unset
    if list(body) != _order(base, changed, unset):
        out["order"] = list(body)
    return out


def _order(base: dict[str, Any], changed: dict[str, Any], unset: Sequence[str]) -> list[str]:
    """A rebuilt body's keys when the delta does not name them: the base's, new ones last."""
    return [key for key in base if key not in unset] + [key for key in changed if key not in base]


def apply(base: Any, change: dict[str, Any], *, reuse: bool = False) -> dict[str, Any]:
    """The body `change` (a `delta`) makes of `base`. With `reuse` the base's messages list is
    extended in place: the caller needs the base no more (a chain's fold)."""
    if not isinstance(base, dict):
        raise ValueError("the base request is not a JSON object")
    changed: dict[str, Any] = change.get("set", {})
    order = change.get("order") or _order(base, changed, change.get("unset", ()))
    body: dict[str, Any] = {}
    for key in order:
        if key in changed:
            body[key] = changed[key]
        elif key == "messages" and "keep" in change:
            messages: list[Any] = base["messages"]
            keep, appended = change["keep"], change.get("messages", [])
            if reuse:
                del messages[keep:]
                messages.extend(appended)
                body[key] = messages
            else:
                body[key] = [*messages[:keep], *appended]
        else:
            body[key] = base[key]
    return body


def store_whole(call: ModelCall, body: Any, sha256: str = "") -> None:
    """Keep `body` whole in `call` (no base); `sha256` of the bytes sent, else of its encoding."""
    payload = encode_body(body)
    call.request_base = None
    call.request_delta = payload.decode()
    call.request_sha256 = sha256 or payload_sha256(payload)
    setattr(call, _BODY, body)


def store(
    call: ModelCall, body: Any, sha256: str, *, bases: Sequence[ModelCall]
) -> ModelCall | None:
    """Keep `body` in `call` as what one of `bases` lacks (the shortest such delta) when that is
    shorter than the body whole; returns that base, else None (an unsaved base is the caller's
    to link once it has a key)."""
    store_whole(call, body, sha256)
    whole = call.request_delta
    chosen: ModelCall | None = None
    for base in bases:
        text = delta_text(base.request, body, whole)
        if text is not None and len(text) < len(call.request_delta):
            call.request_delta, chosen = text, base
    if chosen is not None and chosen.pk is not None:
        call.request_base = chosen
    return chosen


def delta_text(base: Any, body: Any, whole: str) -> str | None:
    """`body` as the JSON text of its delta from `base`, when that is shorter than `whole` (the
    body's own text) and rebuilds it exactly as read back; else None.

    The check at write time keeps a body whole rather than storing a delta that the sha256
    check would refuse on every read."""
    change = delta(base, body)
    if change is None:
        return None
    text = _encoded(change)
    if len(text) >= len(whole) or _encoded(apply(base, json.loads(text))) != whole:
        return None
    return text


def body_of(call: ModelCall) -> Any:
    """The call's request body: cached, else rebuilt with the calls fetched along with it."""
    if _BODY not in call.__dict__:
        attach(getattr(call, _BATCH, None) or [call])
        if _BODY not in call.__dict__:
            attach([call])
    return call.__dict__[_BODY]


def share_batch(calls: list[ModelCall]) -> None:
    """Calls fetched together rebuild their requests together, on the first read of one."""
    for call in calls:
        setattr(call, _BATCH, calls)


def attach(calls: Iterable[ModelCall]) -> None:
    """Rebuild the requests of `calls` in one pass: at most one query reads the chains they
    extend (the deltas of their conversations' earlier calls), then each body is folded."""
    wanted = [call for call in calls if _BODY not in call.__dict__ and call.pk is not None]
    if not wanted:
        return
    known = {
        call.pk: Stored(call.pk, call.request_base_id, call.request_delta, call.request_sha256)
        for call in wanted
        if "request_delta" not in call.get_deferred_fields()
    }
    if _missing(wanted, known):
        known.update(_chains(wanted))
    bodies = fold((known[pk] for pk in sorted(known)), targets={call.pk for call in wanted})
    for call in wanted:
        setattr(call, _BODY, bodies[call.pk])


def _missing(wanted: Sequence[ModelCall], known: dict[int, Stored]) -> bool:
    """Whether a chain of `wanted` leads to a call not read yet."""
    complete: set[int] = set()
    for call in wanted:
        seen = []
        pk: int | None = call.pk
        while pk is not None and pk not in complete:
            if pk not in known:
                return True
            seen.append(pk)
            pk = known[pk].base
        complete.update(seen)
    return False


def _chains(wanted: Sequence[ModelCall]) -> list[tuple[int, Stored]]:
    """Every call of the conversations of `wanted` up to the last of them: one query."""
    from .runs import ModelCall, Run

    rows = (
        ModelCall.objects.filter(
            run__conversation__in=Run.objects.filter(
                pk__in={call.run_id for call in wanted}
            ).values("conversation"),
            pk__lte=max(call.pk for call in wanted),
        )
        .order_by("pk")
        .values_list("pk", "request_base", "request_delta", "request_sha256")
    )
    return [(row[0], Stored(*row)) for row in rows]


def fold(rows: Iterable[Stored], *, targets: set[int]) -> dict[int, Any]:
    """The bodies of `targets`, folding the chain `rows` (by key, bases first) once, each
    checked against its sha256. A body is dropped once its last child is built, and extended
    in place by that child when it is no target."""
    rows = list(rows)
    children = Counter(row.base for row in rows if row.base is not None)
    bodies: dict[int, Any] = {}
    out: dict[int, Any] = {}
    for row in rows:
        if row.base is not None and row.base not in bodies:
            raise StoredRequestError(
                f"model call {row.pk}: its request extends model call {row.base}, which is not "
                "an earlier call of its conversation"
            )
        try:
            if row.base is None:
                body = json.loads(row.text)
            else:
                children[row.base] -= 1
                last = not children[row.base]
                base = bodies.pop(row.base) if last else bodies[row.base]
                body = apply(base, json.loads(row.text), reuse=last and row.base not in targets)
        except (ValueError, KeyError, TypeError) as exc:
            raise StoredRequestError(
                f"model call {row.pk}: its stored request is broken: {exc}"
            ) from None
        if children[row.pk]:
            bodies[row.pk] = body
        if row.pk in targets:
            if row.sha256 and payload_sha256(encode_body(body)) != row.sha256:
                raise StoredRequestError(
                    f"model call {row.pk}: the stored request does not rebuild to the bytes "
                    f"sent (sha256 {row.sha256})"
                )
            out[row.pk] = body
    return out


class RequestChain:
    """A run's requests as it appends them, each stored as what the one before lacks.

    A run's first request extends the conversation's latest one, or the latest of the run that
    answered last on the active path when that holds more of it: after a switch back to a
    long version, the request extends the path it continues, not the branch left.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.bases: list[ModelCall] = []
        self._read = False

    def save(self, call: ModelCall, body: Any, sha256: str) -> None:
        if not self._read:
            self._read = True
            self.bases = self._latest()
        store(call, body, sha256, bases=self.bases)
        call.save(force_insert=True)
        self.bases = [call]

    def _latest(self) -> list[ModelCall]:
        """The conversation's latest call and the latest of the path's last other run."""
        from .conversations import Message
        from .runs import ModelCall

        calls = ModelCall.objects.defer("raw_stream_zlib").order_by("-pk")
        latest = calls.filter(run__conversation_id=self.run.conversation_id).first()
        answered = (
            Message.objects.filter(conversation_id=self.run.conversation_id, run__isnull=False)
            .active()
            .exclude(run_id=self.run.pk)
            .order_by("-index")
            .values_list("run_id", flat=True)
            .first()
        )
        on_path = calls.filter(run_id=answered).first() if answered else None
        found = [call for call in (latest, on_path) if call is not None]
        found = list({call.pk: call for call in found}.values())
        attach(found)  # both chains in one query
        return found
