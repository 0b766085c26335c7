"""`mcp-elicit call` as installed, where a tool author needs to know why: a server that does not speak the pinned
era, a tool that asks in a way the negotiated era lacks, a tool that crashed (the server's log), and a result
that was replayed rather than computed. Real servers throughout: stdio servers that speak one era only, a
plain SDK `MCPServer` over stdio, and the reference server (`mcp-elicit serve`)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli_terminal import COMMAND
from tests.helpers.commands import command
from tests.helpers.peers.sdk_server import CRASH_LOG

ROOT = Path(__file__).resolve().parents[2]
PYTHON = shlex.quote(sys.executable)
HANDSHAKE_ONLY = f"{PYTHON} -m tests.helpers.peers.one_era_server"
MODERN_ONLY = f"{PYTHON} -m tests.helpers.peers.one_era_server --era 2026-07-28"
SDK_SERVER = f"{PYTHON} -m tests.helpers.peers.sdk_server"
SEATS_SCRIPT = [{"match": "How many seats", "reply": "accept", "content": {"seats": 2}}]
HEADER = re.compile(r"^the server's log \((?P<path>.+)\) ends with:$", re.MULTILINE)


def run(*args: str, tmp: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command with its own temporary directory, so that what it leaves there can be seen."""
    tmp.mkdir(exist_ok=True)
    full_env = {**os.environ, "COLUMNS": "200", "TMPDIR": str(tmp), **(env or {})}
    for name in ("MCP_ELICIT_STORE", "MCP_ELICIT_TOKEN"):
        if env is None or name not in env:
            full_env.pop(name, None)
    return command(args, env=full_env, timeout=120, cwd=ROOT)


def only_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def left_logs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("mcp-elicit-call-*"))


# -- eras ------------------------------------------------------------------------------------------------------


def test_a_pinned_era_the_server_does_not_speak_is_said_in_one_line(tmp_path: Path) -> None:
    refused = run("call", HANDSHAKE_ONLY, "echo", "--era", "2026-07-28", tmp=tmp_path / "tmp")
    assert refused.returncode == 2, refused.stderr
    line = only_line(refused.stderr)
    assert line.startswith(
        f"error: {HANDSHAKE_ONLY} does not speak protocol 2026-07-28; it offers 2025-11-25: use --era 2025-11-25"
    ), line
    assert "ValidationError" not in line

    refused = run("call", MODERN_ONLY, "echo", "--era", "2025-11-25", tmp=tmp_path / "tmp")
    assert refused.returncode == 2, refused.stderr
    assert only_line(refused.stderr).startswith(
        f"error: {MODERN_ONLY} does not speak protocol 2025-11-25; it offers 2026-07-28: use --era 2026-07-28"
    ), refused.stderr


def test_a_tool_asking_on_the_live_call_is_sent_to_the_handshake_era(tmp_path: Path) -> None:
    script = tmp_path / "seats.json"
    script.write_text(json.dumps(SEATS_SCRIPT))
    arguments = ("call", SDK_SERVER, "book", "--arg", "city=Oslo", "--script", str(script))

    refused = run(*arguments, tmp=tmp_path / "tmp")
    assert refused.returncode == 1, refused.stderr
    assert "protocol 2026-07-28" in refused.stderr
    assert (
        "error: the tool asks with a server-initiated request, which protocol 2026-07-28 does not have; "
        "call it with --era 2025-11-25 (the server said: Cannot send 'elicitation/create'"
    ) in refused.stderr

    done = run(*arguments, "--era", "2025-11-25", tmp=tmp_path / "tmp")
    assert done.returncode == 0, done.stderr
    assert "booked 2 to Oslo" in done.stdout


def test_a_tool_error_saying_the_era_has_no_server_requests_is_read_the_same_way(tmp_path: Path) -> None:
    reported = run("call", SDK_SERVER, "reserve", "--arg", "city=Oslo", tmp=tmp_path / "tmp")
    assert reported.returncode == 1, reported.stderr
    assert "elicitation via server-initiated requests is unavailable on 2026-07-28 connections." in reported.stdout
    assert "the tool reserve reported an error" in reported.stderr
    assert (
        "the tool asks with a server-initiated request, which protocol 2026-07-28 does not have; "
        "call it with --era 2025-11-25"
    ) in reported.stderr


# -- the server's log ------------------------------------------------------------------------------------------


def test_a_crashed_tool_shows_the_end_of_the_servers_log_and_keeps_it(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    fine = run("call", HANDSHAKE_ONLY, "echo", tmp=tmp)
    assert fine.returncode == 0, fine.stderr
    assert left_logs(tmp) == [], "a call that went well leaves no log behind"

    crashed = run("call", SDK_SERVER, "crash", tmp=tmp)
    assert crashed.returncode == 1, crashed.stderr
    assert "Error executing tool crash" in crashed.stdout
    header = HEADER.search(crashed.stderr)
    assert header is not None, crashed.stderr
    kept = Path(header["path"])
    assert left_logs(tmp) == [kept]
    log = kept.read_text()
    assert CRASH_LOG in log and "KeyError: 'read-only ledger'" in log
    shown = crashed.stderr[header.end() :].strip("\n").splitlines()
    assert len(shown) == 20, crashed.stderr
    assert [line.strip() for line in shown] == [line.strip() for line in log.splitlines() if line.strip()][-20:]
    assert "UnexpectedToolError" in shown[-2] + shown[-1]


def test_the_servers_log_goes_where_it_is_asked_to(tmp_path: Path) -> None:
    tmp, chosen = tmp_path / "tmp", tmp_path / "server.log"
    crashed = run("call", SDK_SERVER, "crash", "--server-log", str(chosen), tmp=tmp)
    assert crashed.returncode == 1, crashed.stderr
    assert f"the server's log ({chosen}) ends with:" in crashed.stderr
    assert "KeyError: 'read-only ledger'" in chosen.read_text()
    assert left_logs(tmp) == []


def test_a_server_log_for_an_http_target_is_refused(tmp_path: Path) -> None:
    refused = run("call", "http://127.0.0.1:9/mcp", "echo", "--server-log", str(tmp_path / "x.log"), tmp=tmp_path)
    assert refused.returncode == 2
    assert "--server-log applies to a stdio server only" in only_line(refused.stderr)


# -- a replayed result -----------------------------------------------------------------------------------------


def test_a_result_replayed_from_an_identical_call_says_so(tmp_path: Path) -> None:
    store = {"MCP_ELICIT_STORE": f"sqlite://{tmp_path / 'elicit.db'}"}
    serve = f"{shlex.quote(COMMAND)} serve --workspace {shlex.quote(str(tmp_path / 'workspace'))}"
    arguments = ("call", serve, "create_ticket", "--arg", "title=Printer on fire", "--arg", "priority=high")

    first = run(*arguments, tmp=tmp_path / "tmp", env=store)
    assert first.returncode == 0, first.stderr
    assert "replayed" not in first.stderr

    again = run(*arguments, tmp=tmp_path / "tmp", env=store)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    note = re.search(
        r"^replayed the result recorded (\d+ s|\d+ min) ago by an identical call \(operation [0-9a-f-]+\); "
        r"the tool did not run again$",
        again.stderr,
        re.MULTILINE,
    )
    assert note is not None, again.stderr
    assert len(list((tmp_path / "workspace" / "tickets").glob("*.json"))) == 1
