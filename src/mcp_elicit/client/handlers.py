"""Two ready-made handlers: one for hosts with nobody to ask, one that answers from a script.

`NoPersonHandler` declares no elicitation mode at all, so servers fall back (or refuse) instead of asking
into the void; it is what a batch job or a CI pipeline should use.

`ScriptedHandler` answers from a list of entries, for demos (`mcp-elicit demo --script FILE`) and tests.
The script is plain JSON, a list of objects:

    [
      {"match": "Deploy payments", "reply": "accept", "content": {"approve": true}},
      {"match": "staging only", "reply": "decline"},
      {"match": "Connect your", "reply": "consent"},
      {"reply": "cancel"}
    ]

- `reply`: `accept` (forms; with `content`, an object), `consent` (URL mode), `decline` or `cancel` (both),
  `done` or `stop` (the pending-flow prompt, see below);
- `match` (optional): a substring the question's message must contain; absent or empty matches anything;
- `content` (optional, `accept` only): the answer, strings, finite numbers, booleans and lists of strings
  (no `null`: a field left unanswered is left out); fields it leaves out get the schema's defaults.

The defaults are this handler's choice, the way a form pre-fills them for a person to keep or change: the
kit itself never adds anything to an answer. A script stands for a person who kept every default it does
not mention.

Each question takes the first unused entry whose `match` fits and whose `reply` fits the mode; an entry is
used once. A question no entry fits is answered `cancel`, since nobody decided; a host for which that would
wrongly end a question asks `answers` first (`mcp-elicit call --script` stops the call). What a `consent` opens is
the client's opener's business: without a browser, pass `ElicitingClient(opener=...)` a callable that
completes the flow (the demo's opener does that).

After a consent, the kit may wait on the flow (a server's completion notification is optional, and a
2026-07-28 server just says "still waiting"). `follow` puts each such wait to the script as a person at
a terminal gets it, the pending-flow prompt: an entry with `done` ("I'm done in the browser") retries the
call now, one with `stop` cancels the flow and stops the call, matched on the flow's message like any
question. A wait no entry fits goes on as it would with nobody at the keyboard, until it ends or its
deadline. Each stretch of waiting is one prompt: a server answering `-32042` again after a `done` asks again.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

import anyio

from mcp_elicit.client.handler import (
    Accept,
    Cancel,
    Consent,
    Decline,
    FormReply,
    FormRequest,
    JsonValue,
    Mode,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.pending import Wait, WaitSource
from mcp_elicit.model.form_schema import UnsupportedSchema, parse_form

log = logging.getLogger(__name__)

Reply = Literal["accept", "decline", "cancel", "consent", "done", "stop"]
WaitReply = Literal["done", "stop"]
FORM_REPLIES = frozenset({"accept", "decline", "cancel"})
URL_REPLIES = frozenset({"consent", "decline", "cancel"})
WAIT_REPLIES = frozenset(get_args(WaitReply))
ENTRY_KEYS = frozenset({"match", "reply", "content"})
WAIT_POLL = 0.1
"""Seconds between two looks for new waits while following them."""


class NoPersonHandler:
    """Declares no mode; if a server asks anyway, the kit refuses before this is ever called."""

    @property
    def modes(self) -> frozenset[Mode]:
        return frozenset()

    async def form(self, request: FormRequest) -> FormReply:
        return Cancel()

    async def url(self, request: UrlRequest) -> UrlReply:
        return Cancel()


class ScriptError(ValueError):
    """A script that is not a list of valid entries; the message names the entry."""


@dataclass(frozen=True, slots=True)
class ScriptEntry:
    reply: Reply
    match: str = ""
    content: Mapping[str, JsonValue] = field(default_factory=dict)

    def fits(self, message: str, replies: frozenset[str]) -> bool:
        return self.reply in replies and self.match in message


def parse_script(data: Any) -> list[ScriptEntry]:
    """Entries from decoded JSON, refused whole at the first bad entry."""
    if not isinstance(data, list):
        raise ScriptError("a script is a JSON list of entries")
    return [_entry(index, item) for index, item in enumerate(data, start=1)]


def load_script(path: str | Path) -> list[ScriptEntry]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ScriptError(f"{path} is not JSON: {error}") from None
    return parse_script(data)


class ScriptedHandler:
    """Answers each question from the script; `asked` keeps every request it was shown, in order."""

    def __init__(
        self, script: Iterable[ScriptEntry | Mapping[str, Any]], *, modes: Iterable[Mode] = ("form", "url")
    ) -> None:
        self._entries = [
            item if isinstance(item, ScriptEntry) else _entry(index, item) for index, item in enumerate(script, 1)
        ]
        self._used = [False] * len(self._entries)
        self._modes = frozenset(modes)
        self.asked: list[FormRequest | UrlRequest] = []

    @classmethod
    def from_file(cls, path: str | Path, *, modes: Iterable[Mode] = ("form", "url")) -> ScriptedHandler:
        return cls(load_script(path), modes=modes)

    @property
    def modes(self) -> frozenset[Mode]:
        return self._modes

    @property
    def remaining(self) -> list[ScriptEntry]:
        return [entry for entry, used in zip(self._entries, self._used, strict=True) if not used]

    def answers(self, message: str, mode: Mode) -> bool:
        """Whether an unused entry fits a question of `mode` asking `message`, so that it is not answered
        `cancel` for want of one: a host that must not cancel for nobody asks before handing it over."""
        replies = FORM_REPLIES if mode == "form" else URL_REPLIES
        return any(
            not used and entry.fits(message, replies) for entry, used in zip(self._entries, self._used, strict=True)
        )

    async def form(self, request: FormRequest) -> FormReply:
        self.asked.append(request)
        entry = self._take(request.message, FORM_REPLIES)
        if entry is None or entry.reply == "cancel":
            return Cancel()
        if entry.reply == "decline":
            return Decline()
        return Accept(_prefilled(entry.content, request.requested_schema))

    async def url(self, request: UrlRequest) -> UrlReply:
        self.asked.append(request)
        entry = self._take(request.message, URL_REPLIES)
        if entry is None or entry.reply == "cancel":
            return Cancel()
        if entry.reply == "decline":
            return Decline()
        return Consent()

    async def follow(self, *sources: WaitSource, shown: Callable[[Wait, WaitReply | None], None] | None = None) -> None:
        """Until cancelled: the pending-flow prompt of every new stretch of waiting in `sources`, answered.

        `shown` hears of each prompt and the script's answer (None: no entry fits, the wait goes on).
        """
        prompted: set[tuple[int, str, float]] = set()
        while True:
            for number, source in enumerate(sources):
                for wait in source.waits():
                    if (number, wait.id, wait.started) in prompted:
                        continue
                    prompted.add((number, wait.id, wait.started))
                    entry = self._take(wait.message, WAIT_REPLIES, unanswered="the wait goes on")
                    reply = cast(WaitReply, entry.reply) if entry is not None else None
                    if shown is not None:
                        shown(wait, reply)
                    if reply == "done":
                        source.retry_now(wait.id)
                    elif reply == "stop":
                        source.cancel(wait.id, "stopped by the script")
            await anyio.sleep(WAIT_POLL)

    def _take(
        self, message: str, replies: frozenset[str], *, unanswered: str = "answering cancel"
    ) -> ScriptEntry | None:
        for index, entry in enumerate(self._entries):
            if not self._used[index] and entry.fits(message, replies):
                self._used[index] = True
                return entry
        log.info("no script entry fits %r; %s", message, unanswered)
        return None


def _entry(index: int, item: object) -> ScriptEntry:
    where = f"script entry {index}"
    if not isinstance(item, Mapping):
        raise ScriptError(f"{where} is not an object")
    unknown = sorted(set(item) - ENTRY_KEYS)
    if unknown:
        raise ScriptError(f"{where} has unknown keys: {', '.join(map(str, unknown))}")
    reply = item.get("reply")
    if reply not in get_args(Reply):
        raise ScriptError(f"{where}: 'reply' must be one of {', '.join(get_args(Reply))}")
    match = item.get("match", "")
    if not isinstance(match, str):
        raise ScriptError(f"{where}: 'match' must be a string")
    content = item.get("content", {})
    if "content" in item and reply != "accept":
        raise ScriptError(f"{where}: 'content' goes with 'accept' only")
    if not isinstance(content, Mapping) or not all(_is_answer_value(v) for v in content.values()):
        raise ScriptError(
            f"{where}: 'content' must be an object of strings, finite numbers, booleans or lists of strings"
        )
    return ScriptEntry(cast(Reply, reply), match, dict(content))


def _is_answer_value(value: object) -> bool:
    """A value an answer may hold: JSON has no NaN or infinity, and an unanswered field is left out, not null."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str | int | bool):
        return True
    return isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value)


def _prefilled(content: Mapping[str, JsonValue], schema: Mapping[str, Any]) -> dict[str, JsonValue]:
    """The form as a person would submit it after typing `content` into fields pre-filled with the defaults.

    The kit never hands a handler a schema the form reader refuses; one given directly has no defaults to
    keep, so `content` is the answer as it is.
    """
    try:
        fields = parse_form(schema).fields
    except UnsupportedSchema:
        fields = ()
    filled: dict[str, JsonValue] = {field.name: field.default for field in fields if field.default is not None}
    filled.update(content)
    return filled
