"""What `mcp-elicit decisions` prints: stored text that cannot act on the terminal, 80 columns, stable pipes.

The installed command runs in a subprocess (stdout a pipe) or in a real pseudo-terminal, against a real
SQLite file whose records carry what a hostile tool could put in a message, a key or an answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.cells import cell_len

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    DecisionStatus,
    JSONObject,
    Operation,
    Principal,
    new_form_decision,
    new_operation,
    new_url_decision,
)
from mcp_elicit.printable import hidden
from mcp_elicit.store import Store, open_store
from tests.helpers.cli_terminal import Terminal, terminal_env
from tests.helpers.commands import command as forked

HOSTILE = (
    "\x1b[2J\x1b[31mAPPROVED\x1b[0m \x1b]8;;https://evil.example/x\x07click\x1b]8;;\x07 bell\x07 \u202eexe.txt"
    " c1\x9b31m del\x7f [bold]bold[/bold] [link=https://evil.example/y]link[/link] :smile:"
)
ACTS_ON_A_TERMINAL = ("\x1b[2J", "\x1b[31mAPPROVED", "\x1b]8;;", "\x07", "\u202e", "\x9b", "\x7f")
TWIN = "4d8972ab"
PIPE_COLUMNS = [
    "elicitation_id", "status", "mode", "key", "principal_id", "client_id", "created_at", "expires_at", "task",
    "message", "about",
]  # fmt: skip
"""The fields of `ls` to a pipe, in order: what a script reading it relies on (a change breaks such scripts)."""
LITERAL = ("[bold]bold[/bold]", "[link=https://evil.example/y]link[/link]", ":smile:")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}
    for name in ("MCP_ELICIT_STORE", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)
    return forked(args, env=env, timeout=60)


def at_terminal(*args: str, columns: int = 140) -> tuple[int, Terminal]:
    terminal = Terminal(list(args), terminal_env(COLUMNS=str(columns)), dimensions=(50, columns))
    try:
        return terminal.finish(), terminal
    finally:
        terminal.close()


class Made:
    """Records written straight to a store, with the ids, texts and clock each test needs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.now = datetime.now(UTC) - timedelta(minutes=5)

    def operation(self, principal: Principal) -> Operation:
        return self.store.create_operation(
            new_operation(
                principal, method="tools/call", target="deploy", request_digest="sha256:" + uuid.uuid4().hex,
                now=self.now, ttl=timedelta(days=1),
            )
        )  # fmt: skip

    def form(
        self,
        principal: Principal,
        *,
        key: str,
        message: str,
        elicitation_id: str | None = None,
        description: str = "",
        about: str = 'deploy(service="payments-api")',
    ) -> Decision:
        operation = self.operation(principal)
        origin = DecisionOrigin(
            operation_id=operation.operation_id, key=key, principal=principal, origin_method="tools/call",
            origin_request_digest=operation.request_digest, about=about,
        )  # fmt: skip
        note: JSONObject = {"type": "string", "description": description} if description else {"type": "string"}
        schema: JSONObject = {"type": "object", "properties": {"note": note}}
        decision = new_form_decision(
            origin, message=message, requested_schema=schema, now=self.now, ttl=timedelta(hours=2)
        )
        if elicitation_id is not None:
            decision = replace(decision, elicitation_id=elicitation_id)
        self.now += timedelta(seconds=1)
        return self.store.create_decision(decision)

    def url(self, principal: Principal, *, key: str, message: str) -> Decision:
        operation = self.operation(principal)
        origin = DecisionOrigin(
            operation_id=operation.operation_id, key=key, principal=principal, origin_method="tools/call",
            origin_request_digest=operation.request_digest,
        )  # fmt: skip
        decision = new_url_decision(
            origin, message=message, url="https://elicit.example/elicit/x", now=self.now, ttl=timedelta(hours=2)
        )
        self.now += timedelta(seconds=1)
        return self.store.create_decision(decision)


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[str, Decision]:
    """One answered decision whose every stored text (key, principal, message, schema, answer, reason, call summary)
    is hostile: a summary is rendered printable, but a row another program wrote need not be."""
    url = f"sqlite://{tmp_path / 'hostile.db'}"
    store = open_store(url)
    try:
        principal = Principal(f"alice{HOSTILE}", f"client{HOSTILE}")
        decision = Made(store).form(
            principal, key=f"key{HOSTILE}", message=f"Deploy? {HOSTILE}", description=HOSTILE, about=f"run({HOSTILE})"
        )
        answered = store.transition(
            decision, DecisionStatus.ACCEPTED, caller=principal, content={"note": HOSTILE}, reason=f"because{HOSTILE}"
        )
    finally:
        store.close()
    return url, answered


def acting(output: str) -> list[str]:
    return [sequence for sequence in ACTS_ON_A_TERMINAL if sequence in output]


def test_stored_text_reaches_a_pipe_escaped_and_never_as_markup(hostile: tuple[str, Decision]) -> None:
    url, decision = hostile
    for command in (["ls"], ["show", decision.elicitation_id[:8]], ["audit", decision.elicitation_id]):
        result = cli("decisions", *command, "--store", url)
        assert result.returncode == 0, result.stderr
        assert [c for c in result.stdout if hidden(c) and c not in "\n\t"] == [], command
        assert "<U+001B>[2J" in result.stdout and "<U+202E>" in result.stdout and "<U+009B>" in result.stdout
        for text in LITERAL:
            assert text in result.stdout, (command, text)


def test_json_escapes_what_could_act_and_parses_back_to_the_stored_text(hostile: tuple[str, Decision]) -> None:
    url, decision = hostile
    shown = cli("decisions", "show", decision.elicitation_id, "--json", "--store", url)
    trail = cli("decisions", "audit", decision.elicitation_id, "--json", "--store", url)
    for result in (shown, trail):
        assert result.returncode == 0, result.stderr
        assert [c for c in result.stdout if hidden(c) and c != "\n"] == []
        assert "\\u202e" in result.stdout and "\\u009b" in result.stdout
    parsed = json.loads(shown.stdout)
    assert parsed["message"] == decision.message and parsed["key"] == decision.key
    assert parsed["principal_id"] == decision.principal_id and parsed["content"] == {"note": HOSTILE}
    assert parsed["about"] == f"run({HOSTILE})"
    assert json.loads(trail.stdout)[-1]["reason"].startswith("because\x1b[2J")


def test_at_a_terminal_stored_text_cannot_act_on_it(hostile: tuple[str, Decision]) -> None:
    url, decision = hostile
    for command in (["ls"], ["show", decision.elicitation_id], ["audit", decision.elicitation_id]):
        status, terminal = at_terminal("decisions", *command, "--store", url, columns=400)
        assert status == 0, terminal.text
        assert acting(terminal.raw) == [], command
        assert "<U+001B>[2J" in terminal.text and "<U+202E>exe.txt" in terminal.text
        assert "[bold]bold[/bold]" in terminal.text
    assert "→ accepted" in terminal.text, "the audit trail at a terminal is the table"


def test_error_messages_escape_what_they_quote(hostile: tuple[str, Decision]) -> None:
    url, _ = hostile
    result = cli("decisions", "show", "ab\x1b[2J\u202e", "--store", url)
    assert result.returncode == 1
    assert acting(result.stderr) == [] and "<U+001B>[2J<U+202E>" in result.stderr


@pytest.fixture
def busy(tmp_path: Path) -> tuple[str, list[Decision]]:
    """Decisions with long principals, keys and messages, a multi-line one, two whose ids share 9 characters,
    and an ended URL one (last)."""
    url = f"sqlite://{tmp_path / 'busy.db'}"
    store = open_store(url)
    made = Made(store)
    long_principal = Principal("https://issuer.example/realms/engineering-production#alice.liddell", "claude-desktop")
    try:
        decisions = [
            made.form(
                Principal("alice", "cli"), key="approve_production", message="Deploy payments-api to production?"
            ),
            made.form(
                long_principal,
                key="confirm_delete_of_build_artifacts",
                message="Delete these 3 files?\n  - /srv/builds/2026-11/payments-api.tar.gz (1.2 GB)\n"
                "  - /srv/builds/2026-11/ledger.tar.gz (800 MB)\n  - /srv/builds/2026-11/notes.txt (2 kB)",
            ),
            made.form(Principal("bob", "cli"), key="pick", message="Which offer? " + "word " * 60 + "ENDMARK"),
        ]
        dave = Principal("dave", "cli")
        for n in (1, 2):
            decisions.append(
                made.form(dave, key=f"twin{n}", message="Twin?", elicitation_id=f"{TWIN}-{n}000-4000-8000-0")
            )
        connect = made.url(Principal("carol", "cli"), key="connect_account", message="Connect your GitHub account")
        for status in (DecisionStatus.ACCEPTED_URL, DecisionStatus.EXTERNAL_PENDING, DecisionStatus.EXTERNAL_COMPLETED):
            connect = store.transition(connect, status, caller=connect.principal)
        decisions.append(connect)
    finally:
        store.close()
    return url, decisions


def test_ls_fits_80_columns_with_short_ids_and_wrapped_messages(busy: tuple[str, list[Decision]]) -> None:
    url, decisions = busy
    status, terminal = at_terminal("decisions", "ls", "--store", url, columns=80)
    assert status == 0, terminal.text
    lines = [line for line in terminal.text.splitlines() if line.strip()]
    assert max(cell_len(line) for line in lines) <= 80, terminal.text
    header = next(line for line in lines if "question" in line)
    start = header.index("question")
    rows = lines[lines.index(header) + 2 :]
    ids = [line[:start].split()[0] for line in rows if line[:start].strip() and not line.startswith(" " * 4)]
    short = {decision.elicitation_id[:8] for decision in decisions if not decision.elicitation_id.startswith(TWIN)}
    # Each id cut to its shortest prefix, 8 characters at least, that no other id listed starts with.
    assert sorted(ids) == sorted(short | {f"{TWIN}-1", f"{TWIN}-2"})
    assert all(decision.elicitation_id not in terminal.text for decision in decisions)
    statuses = " ".join(line[:start] for line in rows)
    assert "requested" in statuses.split() and "external_completed" in statuses.split()
    questions = " ".join(" ".join(line[start:].split()) for line in rows)
    assert "approve_production Deploy payments-api to production?" in questions
    assert "Delete these 3 files? -" in questions and "(1.2 GB) -" in questions
    assert "Which offer? word word" in questions and "ENDMARK" not in questions and "…" in questions


def test_ls_to_a_pipe_is_a_header_then_one_tab_separated_line_per_decision(busy: tuple[str, list[Decision]]) -> None:
    url, decisions = busy
    result = cli("decisions", "ls", "--store", url)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split("\t") == PIPE_COLUMNS
    fields = [row.split("\t") for row in rows]
    assert all(len(row) == len(PIPE_COLUMNS) for row in fields)
    newest_first = sorted(decisions, key=lambda d: d.created_at, reverse=True)
    assert [row[0] for row in fields] == [d.elicitation_id for d in newest_first]
    by_id = {row[0]: dict(zip(PIPE_COLUMNS, row, strict=True)) for row in fields}
    deleting = by_id[decisions[1].elicitation_id]
    assert deleting["message"].startswith("Delete these 3 files?<U+000A>  - /srv/builds/")
    assert (
        deleting["principal_id"] == decisions[1].principal_id and deleting["about"] == 'deploy(service="payments-api")'
    )
    assert deleting["created_at"] == decisions[1].created_at.isoformat(timespec="seconds")
    assert by_id[decisions[-1].elicitation_id]["status"] == "external_completed"

    empty = cli("decisions", "ls", "--status", "declined", "--store", url)
    assert empty.returncode == 0 and empty.stdout == header + "\n"
    assert "No decisions in" in empty.stderr


def test_an_ambiguous_prefix_exits_1_naming_the_decisions_it_starts(busy: tuple[str, list[Decision]]) -> None:
    url, decisions = busy
    twins = [decision for decision in decisions if decision.elicitation_id.startswith(TWIN)]
    ambiguous = cli("decisions", "show", TWIN, "--store", url)
    assert ambiguous.returncode == 1, ambiguous.stderr
    assert "ambiguous id" in ambiguous.stderr
    assert all(twin.elicitation_id in ambiguous.stderr for twin in twins)
    picked = cli("decisions", "show", f"{TWIN}-2", "--json", "--store", url)
    assert picked.returncode == 0 and json.loads(picked.stdout)["key"] == "twin2"
