"""Turning records into what a person reads (rich) or a script parses (JSON).

Content shown here passes through the model's redaction: the CLI is an output like a log.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mcp_elicit.model import AuditEntry, Decision, DecisionStatus, JSONValue, redact_content, redact_url

SHORT_ID = 8
"""Tables show ids shortened like git's; every command accepts a unique prefix."""

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


def decision_json(decision: Decision) -> dict[str, JSONValue]:
    return {
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
        "requested_schema": decision.requested_schema,
        "url": None if decision.url is None else redact_url(decision.url),
        "content": None if decision.content is None else redact_content(decision.content, decision.sensitive_fields),
        "completion_version": decision.completion_version,
        "created_at": decision.created_at.isoformat(),
        "updated_at": decision.updated_at.isoformat(),
        "expires_at": decision.expires_at.isoformat(),
    }


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


def print_json(console: Console, value: Any) -> None:
    console.print_json(json.dumps(value, ensure_ascii=False))


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


def decisions_table(decisions: list[Decision], now: datetime) -> Table:
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True)
    for column in ("key", "mode", "status", "principal", "client", "expires", "created"):
        table.add_column(column, overflow="fold")
    for decision in decisions:
        table.add_row(
            Text(decision.elicitation_id[:SHORT_ID]),
            Text(decision.key),
            decision.mode.value,
            status_text(decision.status),
            Text(decision.principal_id),
            Text(decision.client_id),
            "—" if decision.is_terminal else relative(decision.expires_at, now),
            relative(decision.created_at, now),
        )
    return table


def decision_table(decision: Decision, now: datetime) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    shown = decision_json(decision)
    for name, value in shown.items():
        if name == "status":
            table.add_row(name, status_text(decision.status))
        elif name == "expires_at":
            suffix = "" if decision.is_terminal else f" ({relative(decision.expires_at, now)})"
            table.add_row(name, Text(f"{value}{suffix}"))
        elif isinstance(value, dict | list):
            table.add_row(name, Text(json.dumps(value, ensure_ascii=False, indent=2)))
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
            f"{entry.from_status or '∅'} → {entry.to_status}",
            Text(entry.actor),
            Text(entry.reason),
            Text(_details(entry.details)),
        )
    return table


def _details(details: dict[str, JSONValue]) -> str:
    return "\n".join(
        f"{name}: {json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value}"
        for name, value in sorted(details.items())
    )
