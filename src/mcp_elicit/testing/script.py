"""What the scripted person answers, question by question key, and how a script that does not fit fails.

A tool names its questions by key (`flow.ask(..., key="approve_production")`, or the default key of what is
asked: the model's name, or the kind of one value, `yes_no` for a bool). A test scripts the answers by those
keys, so it states what matters (this question gets this answer) and not how the message happens to be
worded. A question the script does not cover fails the test with `UnscriptedQuestion`, naming the question:
an unexpected question is a behaviour change, and answering it with anything would hide that.

Replies reuse the client kit's script entries (`mcp_elicit.client.ScriptEntry`), so an answer here is
checked and submitted exactly as `mcp-elicit call --script` submits it: content values are strings, finite
numbers, booleans or lists of strings, and fields the content leaves out keep the form's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Literal, TypeAlias

from mcp_elicit.client import JsonValue, ScriptEntry, parse_script

UrlOutcome: TypeAlias = Literal["completed", "failed", "abandoned"]
"""What the scripted browser does after a consent: finish the external flow, fail it, or leave it to expire."""


class ScriptFailure(AssertionError):
    """The script and the tool disagree; an `AssertionError`, so pytest reports it as the test's failure."""


class UnscriptedQuestion(ScriptFailure):
    """A question arrived whose key the script does not cover (or that no open decision of the store explains)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer of the scripted person; build it with `accept`, `decline`, `cancel` or `consent`."""

    entry: ScriptEntry
    outcome: UrlOutcome | None = None
    """For a consent: what the browser then does with the flow."""
    delay: timedelta = timedelta(0)
    """How long the person takes to answer: the clock moves on by this much before the answer goes out."""

    @property
    def mode(self) -> Literal["form", "url", "any"]:
        """Which questions this reply can answer: accept a form, consent to a URL, decline or cancel either."""
        if self.entry.reply == "accept":
            return "form"
        if self.entry.reply == "consent":
            return "url"
        return "any"

    @property
    def action(self) -> str:
        """What the person does: `accept`, `decline`, `cancel` or `consent`."""
        return self.entry.reply

    def after(self, delay: timedelta) -> Reply:
        """The same answer given `delay` later: past the question's TTL, the answer comes too late and expires it.

        Needs the app on a `ControlledClock` (the harness moves it; no test waits in real time).
        """
        if delay < timedelta(0):
            raise ValueError(f"a person answers after a delay of zero or more: got {delay}")
        return replace(self, delay=delay)

    def __str__(self) -> str:
        shown = self.action if self.outcome is None else f"consent ({self.outcome})"
        if self.entry.content:
            shown += f" {dict(self.entry.content)}"
        return shown + (f" after {self.delay}" if self.delay else "")


def accept(content: Mapping[str, JsonValue] | None = None, /, **fields: JsonValue) -> Reply:
    """Submit the form with these values (`accept(approve=True)`, or a mapping for keys that are no names)."""
    answer = {**(content or {}), **fields}
    [entry] = parse_script([{"reply": "accept", "content": answer}])
    return Reply(entry)


def decline() -> Reply:
    """The person's explicit "no", to a form or a URL."""
    return Reply(ScriptEntry("decline"))


def cancel() -> Reply:
    """Nobody decided: the dialog was dismissed."""
    return Reply(ScriptEntry("cancel"))


def consent(outcome: UrlOutcome = "completed") -> Reply:
    """Consent to a URL question; the scripted browser then completes the flow, fails it, or abandons it.

    `completed` and `failed` are what the decision's page records when the external step (an OAuth
    provider, an API-key form) succeeds or fails; `abandoned` starts the flow and never finishes it, and the
    clock moves past the decision's TTL so that it expires (the lost-notification path).
    """
    if outcome not in ("completed", "failed", "abandoned"):
        raise ValueError(f"a consent's outcome is completed, failed or abandoned: got {outcome!r}")
    return Reply(ScriptEntry("consent"), outcome=outcome)


Answers: TypeAlias = Mapping[str, Reply | Sequence[Reply]]
"""Replies by question key: one reply answers the key every time it is asked, a sequence answers in turn."""


@dataclass
class Script:
    """The replies of one or more calls; pass the same `Script` to several calls to share its sequences."""

    answers: Answers = field(default_factory=dict)
    _used: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for key, replies in self.answers.items():
            listed = [replies] if isinstance(replies, Reply) else list(replies)
            if not listed or not all(isinstance(reply, Reply) for reply in listed):
                raise TypeError(
                    f"the script's entry for {key!r} must be a reply (accept(...), decline(), cancel(), consent()) "
                    "or a non-empty sequence of them"
                )

    @property
    def keys(self) -> list[str]:
        """The question keys the script answers, for the message of a question it does not."""
        return sorted(self.answers)

    def covers(self, key: str) -> str | None:
        """The script key answering the question key `key`: itself, or the key it re-asks (`approve#2`)."""
        for candidate in (key, key.split("#", 1)[0]):
            if candidate in self.answers:
                return candidate
        return None

    def take(self, key: str) -> Reply:
        """The reply for the next asking of `key`; raises `ScriptFailure` when its sequence is used up."""
        scripted = self.covers(key)
        if scripted is None:
            raise UnscriptedQuestion(f"no reply scripted for {key!r}")
        replies = self.answers[scripted]
        if isinstance(replies, Reply):
            return replies
        count = self._used.get(scripted, 0)
        if count >= len(replies):
            raise ScriptFailure(
                f"the question {key!r} was asked {count + 1} times, and the script has {len(replies)} "
                f"repl{'y' if len(replies) == 1 else 'ies'} for it"
            )
        self._used[scripted] = count + 1
        return replies[count]
