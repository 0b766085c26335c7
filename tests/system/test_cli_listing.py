"""`mcp-elicit decisions ls` on a store with more decisions than one listing shows, on both stores.

The installed command runs in a subprocess (stdout a pipe) or in a real pseudo-terminal; it is checked
against the store's own one-query listing, row for row.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import timedelta

from rich.cells import cell_len

from mcp_elicit.model import Decision, DecisionOrigin, DecisionStatus, Operator, new_form_decision
from mcp_elicit.printable import hidden
from mcp_elicit.store import Store, open_store
from tests.helpers.cli_terminal import Terminal, terminal_env
from tests.helpers.clock import FakeClock
from tests.helpers.commands import command
from tests.helpers.records import ALICE, BOB, FORM_SCHEMA, Records

NEXT = re.compile(r"^  --after (\S+)$", re.MULTILINE)


def ls(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160"}
    env.pop("MCP_ELICIT_STORE", None)
    return command(["decisions", "ls", "--store", url, *args], env=env, timeout=60)


def populate(records: Records, clock: FakeClock, count: int) -> list[Decision]:
    """`count` decisions, two at each instant (ties go by id), alternately Alice's and Bob's."""
    made = []
    for number in range(count):
        if number % 2 == 0:
            clock.advance(timedelta(seconds=1))
        made.append(records.form(records.operation(ALICE if number % 2 else BOB), ttl=timedelta(days=365)))
    return made


def listed_ids(result: subprocess.CompletedProcess[str]) -> list[str]:
    header, *rows = result.stdout.splitlines()
    assert header.split("\t")[0] == "elicitation_id"  # the whole header: test_cli_output
    return [row.split("\t")[0] for row in rows]


def test_a_cut_listing_says_how_many_of_how_many_and_its_cursor_lists_the_rest(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    populate(records, clock, 7)
    whole = [d.elicitation_id for d in store.list_decisions(Operator(), limit=100)]

    first = ls(store_url, "--limit", "3")
    assert first.returncode == 0, first.stderr
    assert listed_ids(first) == whole[:3]
    assert "Listed 3 of 7 decisions, newest first; the next page (same filters):" in first.stderr
    [cursor] = NEXT.findall(first.stderr)

    second = ls(store_url, "--limit", "3", "--after", cursor)
    assert second.returncode == 0, second.stderr
    assert listed_ids(second) == whole[3:6]
    assert "Listed 3 of 7 decisions (4 to 6), newest first" in second.stderr
    [cursor] = NEXT.findall(second.stderr)

    last = ls(store_url, "--limit", "3", "--after", cursor)
    assert listed_ids(last) == whole[6:]
    assert "Listed 1 of 7 decisions (7 to 7), newest first; that is the last page." in last.stderr
    assert NEXT.findall(last.stderr) == []

    whole_at_once = ls(store_url, "--limit", "7")
    assert listed_ids(whole_at_once) == whole and whole_at_once.stderr == ""  # nothing cut, nothing said


def test_filters_narrow_the_count_and_the_pages(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    made = populate(records, clock, 6)
    store.transition(made[0], DecisionStatus.DECLINED, caller=made[0].principal)
    bobs = [d.elicitation_id for d in store.list_decisions(Operator(), principal_id="bob", limit=100)]
    first = ls(store_url, "--principal", "bob", "--limit", "2")
    assert listed_ids(first) == bobs[:2] and "Listed 2 of 3 decisions" in first.stderr
    [cursor] = NEXT.findall(first.stderr)
    rest = ls(store_url, "--principal", "bob", "--after", cursor)
    assert listed_ids(rest) == bobs[2:] and "Listed 1 of 3 decisions (3 to 3)" in rest.stderr
    waiting = ls(store_url, "--status", "requested", "--limit", "5")
    assert "Listed 5 of 5 decisions" not in waiting.stderr and waiting.stderr == ""


def test_json_is_one_array_written_one_decision_a_line(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    populate(records, clock, 5)
    whole = [d.elicitation_id for d in store.list_decisions(Operator(), limit=100)]
    result = ls(store_url, "--json", "--limit", "4")
    assert result.returncode == 0, result.stderr
    assert [d["elicitation_id"] for d in json.loads(result.stdout)] == whole[:4]
    lines = result.stdout.splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 6
    assert [json.loads(line.rstrip(","))["elicitation_id"] for line in lines[1:-1]] == whole[:4]
    assert "Listed 4 of 5 decisions" in result.stderr
    [cursor] = NEXT.findall(result.stderr)
    rest = ls(store_url, "--json", "--after", cursor)
    assert [d["elicitation_id"] for d in json.loads(rest.stdout)] == whole[4:]
    nothing = ls(store_url, "--json", "--status", "cancelled")
    assert nothing.returncode == 0 and json.loads(nothing.stdout) == []


def test_json_lines_escape_what_could_act_on_a_terminal(sqlite_url: str, clock: FakeClock) -> None:
    store = open_store(sqlite_url, clock=clock)
    operation = Records(store, clock).operation()
    origin = DecisionOrigin(
        operation_id=operation.operation_id, key="odd", principal=ALICE, origin_method=operation.method,
        origin_request_digest=operation.request_digest,
    )  # fmt: skip
    message = "Deploy?\x1b[2J \u202eexe.txt \x9b31m \U000e0041 café"
    store.create_decision(
        new_form_decision(origin, message=message, requested_schema=FORM_SCHEMA, now=clock(), ttl=timedelta(days=1))
    )
    store.close()
    result = ls(sqlite_url, "--json")
    assert result.returncode == 0, result.stderr
    assert [c for c in result.stdout if hidden(c) and c != "\n"] == []
    assert "\\u001b[2J" in result.stdout and "\\u202e" in result.stdout and "\\u009b" in result.stdout
    assert "\\udb40\\udc41" in result.stdout and "café" in result.stdout  # readable text stays as it is
    [shown] = json.loads(result.stdout)
    assert shown["message"] == message


def test_a_text_that_is_no_cursor_is_refused_before_anything_is_written(sqlite_url: str, clock: FakeClock) -> None:
    open_store(sqlite_url, clock=clock).close()
    for args in (["--after", "nonsense"], ["--json", "--after", "~AAAA"]):
        result = ls(sqlite_url, *args)
        assert result.returncode == 2, result.stderr
        assert "--after" in result.stderr and "is not a cursor of a decision listing" in result.stderr
        assert result.stdout == ""


def test_at_a_terminal_the_count_and_the_cursor_follow_the_table_in_80_columns(
    sqlite_url: str, clock: FakeClock
) -> None:
    store = open_store(sqlite_url, clock=clock)
    populate(Records(store, clock), clock, 4)
    whole = [d.elicitation_id for d in store.list_decisions(Operator(), limit=100)]
    store.close()
    terminal = Terminal(
        ["decisions", "ls", "--store", sqlite_url, "--limit", "2"],
        terminal_env(COLUMNS="80"),
        dimensions=(50, 80),
    )
    try:
        status = terminal.finish()
    finally:
        terminal.close()
    assert status == 0, terminal.text
    lines = [line for line in terminal.text.splitlines() if line.strip()]
    assert max(cell_len(line) for line in lines) <= 80, terminal.text
    assert "Listed 2 of 4 decisions, newest first; the next page (same filters):" in terminal.text
    [cursor] = NEXT.findall(terminal.text)
    assert listed_ids(ls(sqlite_url, "--after", cursor)) == whole[2:]
