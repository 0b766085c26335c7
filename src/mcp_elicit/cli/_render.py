"""Turning records into what a person reads (rich), what a pipe reads (tab-separated lines) or JSON.

Content shown here passes through the model's redaction: the CLI is an output like a log. Stored text
is no more trusted than a server's: a tool's message may quote file names or arguments. So every stored
text goes through `printable` and is printed as a `Text`, never read as rich markup: a record cannot move
the cursor, colour or clear the screen, plant a terminal hyperlink, ring the bell or reorder what is read.
JSON escapes the same characters (`\\u202e`), so a script parses back exactly what is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.table import Table
from rich.text import Text

from mcp_elicit.model import (
    AuditEntry,
    Decision,
    DecisionStatus,
    Grant,
    GrantStatus,
    JSONValue,
    Vote,
    redact_content,
    redact_url,
)
from mcp_elicit.printable import hidden, printable

SHORT_ID = 8
"""Tables show ids shortened like git's, never below this; every command accepts a unique prefix."""
MESSAGE_PREVIEW = 120
"""Characters of a message a listing shows; `show` prints the whole message."""
PLAIN_COLUMNS = (
    "elicitation_id", "status", "mode", "key", "principal_id", "client_id", "created_at", "expires_at", "task",
    "message", "about",
)  # fmt: skip
"""The fields of `ls` when stdout is not a terminal: a header line of these names, then one line per decision.
A field added later goes at the end, so a script that cuts fields by number keeps working."""
GRANT_COLUMNS = (
    "grant_id", "status", "kind", "tool", "scope", "principal_id", "client_id", "created_at", "expires_at",
    "revoked_at", "revoked_by", "decision_id",
)  # fmt: skip
"""The fields of `grants ls` when stdout is not a terminal, as `PLAIN_COLUMNS` are of decisions."""
AUDIT_COLUMNS = ("seq", "at", "from_status", "to_status", "actor", "reason", "details")
"""The fields of `audit` when stdout is not a terminal; `details` is compact JSON."""

GRANT_STYLE: dict[GrantStatus, str] = {
    GrantStatus.ACTIVE: "green",
    GrantStatus.EXPIRED: "dim",
    GrantStatus.REVOKED: "magenta",
}
STATUS_STYLE: dict[DecisionStatus, str] = {
    DecisionStatus.REQUESTED: "yellow",
    DecisionStatus.ACCEPTED_URL: "yellow",
    DecisionStatus.EXTERNAL_PENDING: "yellow",
    DecisionStatus.ACCEPTED: "green",
    DecisionStatus.EXTERNAL_COMPLETED: "green",
    DecisionStatus.DECLINED: "magenta",
    DecisionStatus.CANCELLED: "magenta",
    DecisionStatus.EXPIRED: "dim",
    DecisionStatus.EXTERNAL_FAILED: "red",
}
_LINE_BREAK = re.compile(r"[ \t]*\r?\n[ \t]*")


def decision_json(
    decision: Decision, task: str | None = None, votes: Sequence[Vote] | None = None
) -> dict[str, JSONValue]:
    """The decision as JSON; `task`, when its operation is a task, is that task's status; `votes`, when it has
    approvers and they were read, who voted how (redacted as answers are)."""
    shown: dict[str, JSONValue] = {
        "elicitation_id": decision.elicitation_id,
        "operation_id": decision.operation_id,
        "key": decision.key,
        "principal_id": decision.principal_id,
        "client_id": decision.client_id,
        "origin_method": decision.origin_method,
        "origin_request_digest": decision.origin_request_digest,
        "mode": decision.mode.value,
        "status": decision.status.value,
        "resume_policy": decision.resume_policy.value,
        "message": decision.message,
        "about": decision.about,
        "requested_schema": decision.requested_schema,
        "url": None if decision.url is None else redact_url(decision.url),
        "content": None if decision.content is None else redact_content(decision.content, decision.sensitive_fields),
        "completion_version": decision.completion_version,
        "created_at": decision.created_at.isoformat(),
        "updated_at": decision.updated_at.isoformat(),
        "expires_at": decision.expires_at.isoformat(),
    }
    if decision.approvers is not None:
        shown["approvers"] = decision.approvers.dumped()
    if votes is not None:
        shown["votes"] = [
            {
                "approver": vote.approver_id,
                "verdict": vote.verdict.value,
                "proposal": vote.proposal,
                "roles": list(vote.roles),
                "content": redact_content(vote.content, decision.sensitive_fields),
                "cast_at": vote.cast_at.isoformat(),
            }
            for vote in votes
        ]
    if task is not None:
        shown["task"] = task
    return shown


def audit_json(entry: AuditEntry) -> dict[str, JSONValue]:
    return {
        "seq": entry.seq,
        "subject_kind": entry.subject_kind.value,
        "subject_id": entry.subject_id,
        "from_status": entry.from_status,
        "to_status": entry.to_status,
        "actor": entry.actor,
        "reason": entry.reason,
        "details": entry.details,
        "at": entry.at.isoformat(),
    }


def json_text(value: Any) -> str:
    """Indented JSON in which every character `printable` would show is escaped instead of written."""
    dumped = json.dumps(value, ensure_ascii=False, indent=2)
    return "".join(
        _escaped(character) if character != "\n" and hidden(character) else character for character in dumped
    )


def _escaped(character: str) -> str:
    code = ord(character)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def print_json(console: Console, value: Any) -> None:
    console.print(JSONHighlighter()(Text(json_text(value))), soft_wrap=True)


def relative(moment: datetime, now: datetime) -> str:
    seconds = int((moment - now).total_seconds())
    magnitude = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if magnitude >= size:
            amount = f"{magnitude // size}{unit}"
            break
    else:
        amount = f"{magnitude}s"
    return f"in {amount}" if seconds >= 0 else f"{amount} ago"


def status_text(status: DecisionStatus) -> Text:
    return Text(status.value, style=STATUS_STYLE[status])


def short_ids(ids: Sequence[str], minimum: int = SHORT_ID) -> dict[str, str]:
    """Each id cut to its shortest prefix, `minimum` characters at least, that no other of `ids` starts with.

    Only the ids given are compared: a prefix shown for a filtered listing may also start an id left out,
    which `show` then reports as ambiguous, naming both.
    """
    ordered = sorted(set(ids))
    shown: dict[str, str] = {}
    for index, full in enumerate(ordered):
        length = minimum
        for neighbour in ordered[max(index - 1, 0) : index + 2]:
            if neighbour != full:
                length = max(length, _common_length(full, neighbour) + 1)
        shown[full] = full[:length]
    return shown


def _common_length(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def preview(message: str) -> str:
    """The message on one line, cut to `MESSAGE_PREVIEW` characters, made printable."""
    joined = _LINE_BREAK.sub(" ", message.strip())
    if len(joined) > MESSAGE_PREVIEW:
        joined = joined[: MESSAGE_PREVIEW - 1].rstrip() + "…"
    return printable(joined)


def decisions_table(decisions: list[Decision], now: datetime, tasks: Mapping[str, str] | None = None) -> Table:
    """The listing for a person: short ids, then each question (its key in bold, the start of its message)
    wrapped in what the terminal's width leaves; `tasks` gives the task status of operations that are tasks
    (a `task` column, shown only when the listing has any)."""
    tasks = tasks or {}
    ids = short_ids([decision.elicitation_id for decision in decisions])
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, expand=True, padding=(0, 1, 0, 0))
    table.add_column("id", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("expires", no_wrap=True)
    table.add_column("principal", overflow="fold", max_width=16)
    if tasks:
        table.add_column("task", no_wrap=True)
    table.add_column("question", overflow="fold", ratio=1)
    for decision in decisions:
        task = [tasks.get(decision.operation_id, "—")] if tasks else []
        table.add_row(
            Text(ids[decision.elicitation_id]),
            status_text(decision.status),
            "—" if decision.is_terminal else relative(decision.expires_at, now),
            Text(printable(decision.principal_id)),
            *task,
            Text.assemble((printable(decision.key), "bold"), " ", preview(decision.message)),
        )
    return table


def plain_lines(decisions: list[Decision], tasks: Mapping[str, str] | None = None) -> Iterator[str]:
    """The listing for a pipe: `PLAIN_COLUMNS`, tab-separated, one decision a line, full ids and UTC times.

    Values are printable and on one line (a tab shown as a space, a newline as `<U+000A>`), so a tab only
    ever separates fields and a line is always one decision.
    """
    tasks = tasks or {}
    yield "\t".join(PLAIN_COLUMNS)
    for decision in decisions:
        yield plain_line(
            decision.elicitation_id, decision.status.value, decision.mode.value, decision.key, decision.principal_id,
            decision.client_id, decision.created_at.isoformat(timespec="seconds"),
            decision.expires_at.isoformat(timespec="seconds"), tasks.get(decision.operation_id, ""), decision.message,
            decision.about,
        )  # fmt: skip


def audit_plain_lines(entries: list[AuditEntry]) -> Iterator[str]:
    """The audit trail for a pipe: `AUDIT_COLUMNS`, tab-separated, one transition a line, as `plain_lines`."""
    yield "\t".join(AUDIT_COLUMNS)
    for entry in entries:
        yield plain_line(
            str(entry.seq), entry.at.isoformat(timespec="seconds"), entry.from_status or "", entry.to_status,
            entry.actor, entry.reason, json.dumps(entry.details, ensure_ascii=False, sort_keys=True),
        )  # fmt: skip


def plain_line(*values: str) -> str:
    """One line of tab-separated fields: each printable and on one line, so a tab only ever separates fields."""
    return "\t".join(printable(value) for value in values)


def decision_table(decision: Decision, now: datetime, votes: Sequence[Vote] | None = None) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    shown = decision_json(decision, votes=votes)
    for name, value in shown.items():
        if name == "status":
            table.add_row(name, status_text(decision.status))
        elif name == "expires_at":
            suffix = "" if decision.is_terminal else f" ({relative(decision.expires_at, now)})"
            table.add_row(name, Text(f"{value}{suffix}"))
        elif isinstance(value, dict | list):
            table.add_row(name, Text(printable(json.dumps(value, ensure_ascii=False, indent=2), multiline=True)))
        elif isinstance(value, str):
            table.add_row(name, Text(printable(value, multiline=True)))
        else:
            table.add_row(name, Text("—" if value is None else str(value)))
    return table


def audit_table(entries: list[AuditEntry]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for column in ("seq", "at (UTC)", "transition", "actor", "reason", "details"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(
            str(entry.seq),
            entry.at.strftime("%Y-%m-%d %H:%M:%S"),
            Text(f"{printable(entry.from_status or '∅')} → {printable(entry.to_status)}"),
            Text(printable(entry.actor)),
            Text(printable(entry.reason, multiline=True)),
            Text(_details(entry.details)),
        )
    return table


def _details(details: dict[str, JSONValue]) -> str:
    return "\n".join(
        printable(f"{name}: {json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value}")
        for name, value in sorted(details.items())
    )


def grant_json(grant: Grant, now: datetime) -> dict[str, JSONValue]:
    """The grant as JSON, with its status at `now` (active, expired, revoked)."""
    return {
        "grant_id": grant.grant_id,
        "status": grant.status(now).value,
        "kind": grant.kind.value,
        "tool": grant.tool,
        "scope": grant.scope,
        "principal_id": grant.principal_id,
        "client_id": grant.client_id,
        "created_at": grant.created_at.isoformat(),
        "expires_at": grant.expires_at.isoformat(),
        "revoked_at": None if grant.revoked_at is None else grant.revoked_at.isoformat(),
        "revoked_by": grant.revoked_by,
        "decision_id": grant.decision_id,
    }


def grants_table(grants: list[Grant], now: datetime) -> Table:
    """The grant listing for a person: short ids, what each lets through (tool, scope), for whom, until when."""
    ids = short_ids([grant.grant_id for grant in grants])
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, expand=True, padding=(0, 1, 0, 0))
    table.add_column("id", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("until", no_wrap=True)
    table.add_column("principal", overflow="fold", max_width=16)
    table.add_column("client", overflow="fold", max_width=16)
    table.add_column("lets through", overflow="fold", ratio=1)
    for grant in grants:
        status = grant.status(now)
        until = relative(grant.expires_at, now) if status is GrantStatus.ACTIVE else "—"
        scope = f" with {grant.scope}" if grant.scope is not None else ""
        table.add_row(
            Text(ids[grant.grant_id]),
            Text(status.value, style=GRANT_STYLE[status]),
            grant.kind.value,
            until,
            Text(printable(grant.principal_id)),
            Text(printable(grant.client_id)),
            Text.assemble((printable(grant.tool), "bold"), printable(scope)),
        )
    return table


def grant_plain_lines(grants: list[Grant], now: datetime) -> Iterator[str]:
    """The grant listing for a pipe: `GRANT_COLUMNS`, tab-separated, one grant a line, as `plain_lines`."""
    yield "\t".join(GRANT_COLUMNS)
    for grant in grants:
        yield plain_line(
            grant.grant_id, grant.status(now).value, grant.kind.value, grant.tool, grant.scope or "",
            grant.principal_id, grant.client_id, grant.created_at.isoformat(timespec="seconds"),
            grant.expires_at.isoformat(timespec="seconds"),
            "" if grant.revoked_at is None else grant.revoked_at.isoformat(timespec="seconds"), grant.revoked_by or "",
            grant.decision_id,
        )  # fmt: skip
