"""A pending URL flow is never silent: `mcp-elicit call` against a real stdio server that never announces the
flow's completion, with a person at a real pseudo-terminal (the live status line, its retry and cancel keys)
or a script answering the pending-flow prompt (`done`, `stop`), on 2025-11-25 (`-32042`) and on 2026-07-28
(still-waiting rounds). Nor is a 2026-07-28 call the server keeps in still-waiting rounds with no URL flow
of its own, while an identical call carries the question it waits on (at the end of this file).

The flow is completed out of band, the way the decision page's callback completes it: transitions on the
server's store by the decision's owner (`tests.helpers.server.complete`), either by the test or by the
"browser" the kit opens (`$BROWSER`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_elicit.client import Pacing, ScriptError, parse_script
from mcp_elicit.model import DecisionStatus
from tests.helpers.cli_terminal import CHOICE, COMMAND, Terminal, terminal_env
from tests.helpers.commands import command
from tests.helpers.records import decision_status
from tests.helpers.server import CONNECTED, MESSAGE, NAME, complete, rounds
from tests.helpers.server_commands import PENDING_COMMAND, ROUNDS_COMMAND, TEST_SERVER

SERVER = shlex.join(PENDING_COMMAND)
NO_OP_BROWSER = f"{shlex.quote(sys.executable)} -c pass %s"
"""A browser that opens nothing and completes nothing: the person has not finished yet."""
COMPLETING_BROWSER = f"{shlex.quote(sys.executable)} {shlex.quote(str(TEST_SERVER))} complete %s"
"""A browser in which the person finishes the flow at once (the store comes from MCP_ELICIT_STORE)."""
WAITING = rf"Waiting for the browser: {MESSAGE} \({NAME}\)"
TIMES = r"(\d+)s elapsed · deadline \d\d:\d\d:\d\d \((\d+)m \d\ds left\)"
STATUS = rf"{WAITING} · {TIMES}"
"""The wait as a script run prints it, on one line; the live status line puts the times on a line of their own."""
KEYS = "[r] I'm done: retry now   [c] cancel"
CONSENT = "[o] open"


@pytest.fixture
def store_file(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'elicit.db'}"


def assert_status_line(terminal: Terminal) -> None:
    """The live line: elapsed seconds, and a deadline as a time of day about 30 minutes (`Pacing.max_wait`) ahead."""
    terminal.search(WAITING)
    shown = terminal.search(TIMES)
    assert int(shown.group(1)) < 30
    assert 28 <= int(shown.group(2)) <= 29, shown.group(0)
    terminal.see(KEYS)


def test_at_2025_11_25_the_status_line_shows_and_r_retries_until_the_flow_is_done(store_file: str) -> None:
    terminal = Terminal(
        ["call", SERVER, "connect_later", "--era", "2025-11-25"],
        terminal_env(MCP_ELICIT_STORE=store_file, BROWSER=NO_OP_BROWSER),
    )
    try:
        terminal.see("Request to open a web page", MESSAGE)
        terminal.answer(CONSENT, "o")
        terminal.see("Opening the page was allowed.")
        assert_status_line(terminal)

        terminal.press("r")
        terminal.see("Retrying now: the server is asked again.")
        assert_status_line(terminal)  # the server answered -32042 again: the flow is not done

        complete(store_file)
        time.sleep(1.5)
        assert CONNECTED not in terminal.text, "no notification comes: only the person's retry finishes the call"
        terminal.press("r")
        terminal.see("Retrying now: the server is asked again.", CONNECTED)
        assert terminal.finish() == 0
    finally:
        terminal.close()
    assert decision_status(store_file) is DecisionStatus.EXTERNAL_COMPLETED


def test_c_at_the_status_line_cancels_the_flow_and_stops_the_call(store_file: str) -> None:
    terminal = Terminal(
        ["call", SERVER, "connect_later", "--era", "2025-11-25"],
        terminal_env(MCP_ELICIT_STORE=store_file, BROWSER=NO_OP_BROWSER),
    )
    try:
        terminal.answer(CONSENT, "o")
        assert_status_line(terminal)
        terminal.press("c")
        terminal.see(
            "Cancelled.",
            f"the URL flow 'flow-1' ('{MESSAGE}') was cancelled: cancelled at the terminal; the call stopped",
        )
        assert terminal.finish() == 1
    finally:
        terminal.close()


def test_at_2026_07_28_a_still_waiting_wait_shows_the_same_line(store_file: str) -> None:
    terminal = Terminal(
        ["call", SERVER, "connect_later", "--era", "2026-07-28"],
        terminal_env(MCP_ELICIT_STORE=store_file, BROWSER=NO_OP_BROWSER),
    )
    try:
        terminal.see("protocol 2026-07-28")
        terminal.answer(CONSENT, "o")
        assert_status_line(terminal)
        time.sleep(1.5)
        assert decision_status(store_file) is DecisionStatus.ACCEPTED_URL, "the server waits for the flow"
        complete(store_file)
        terminal.press("r")
        terminal.see(CONNECTED)
        assert terminal.finish() == 0
    finally:
        terminal.close()
    assert decision_status(store_file) is DecisionStatus.EXTERNAL_COMPLETED


# -- a script answers the pending-flow prompt -----------------------------------------------------------------


def run_with_script(
    tmp_path: Path, store_file: str, era: str, script: list[dict[str, str]], browser: str
) -> subprocess.CompletedProcess[str]:
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps(script))
    env = {**os.environ, "COLUMNS": "200", "MCP_ELICIT_STORE": store_file, "BROWSER": browser}
    env.pop("DISPLAY", None)
    return command(["call", SERVER, "connect_later", "--era", era, "--script", str(answers)], env=env, timeout=90)


def test_a_script_says_done_and_the_call_is_retried(tmp_path: Path, store_file: str) -> None:
    script = [{"match": "Connect your", "reply": "consent"}, {"match": "Connect your", "reply": "done"}]
    done = run_with_script(tmp_path, store_file, "2025-11-25", script, COMPLETING_BROWSER)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(STATUS, done.stdout), done.stdout
    assert "Answered by the script: done (retry now)" in done.stdout
    assert CONNECTED in done.stdout
    assert decision_status(store_file) is DecisionStatus.EXTERNAL_COMPLETED


def test_a_script_says_stop_and_the_call_stops(tmp_path: Path, store_file: str) -> None:
    script = [{"match": "Connect your", "reply": "consent"}, {"match": "Example account", "reply": "stop"}]
    stopped = run_with_script(tmp_path, store_file, "2026-07-28", script, NO_OP_BROWSER)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert re.search(STATUS, stopped.stdout), stopped.stdout
    assert "Answered by the script: stop (cancel the flow)" in stopped.stdout
    assert "was cancelled: stopped by the script; the call stopped" in stopped.stderr


def test_pending_flow_replies_take_no_content() -> None:
    assert [entry.reply for entry in parse_script([{"reply": "done"}, {"match": "x", "reply": "stop"}])] == [
        "done",
        "stop",
    ]
    with pytest.raises(ScriptError, match="'content' goes with 'accept' only"):
        parse_script([{"reply": "done", "content": {}}])


# -- still-waiting rounds with no URL flow of the call's own ----------------------------------------------------
#
# Two identical `approve` calls through `ROUNDS_COMMAND`, each with its own server process on one store: the
# first (the carrier) shows the question at its terminal and the person takes their time; the second gets
# still-waiting rounds, and a status line of its own.

ROUND_SERVER = shlex.join(ROUNDS_COMMAND)
APPROVE = ["call", ROUND_SERVER, "approve", "--arg", "n=1", "--era", "2026-07-28"]
ROUND_WAITING = rf"Waiting for the server: the tool approve is still waiting \({NAME}\)"
ROUND_STATUS = rf"{ROUND_WAITING} · {TIMES}"
SERVER_KEYS = "[r] retry now   [c] stop the call"
RETRIED = "Retrying now: the server is asked again."
IN_FLIGHT = "The server is being asked right now"
JOB_RUN = "job 1 run"


def carrier(store_file: str) -> Terminal:
    """The call that carries the question: its form is on screen, unanswered."""
    terminal = Terminal(APPROVE, terminal_env(MCP_ELICIT_STORE=store_file))
    terminal.see("Form request", "Run job 1?")
    terminal.see(CHOICE)
    return terminal


def answer_the_carrier(terminal: Terminal) -> None:
    terminal.press("1", "\r")
    terminal.review("s\r")
    terminal.see("Submitted.", JOB_RUN)
    assert terminal.finish() == 0
    assert "Waiting for the server" not in terminal.text, "the carrier asked: it never waited on the server"


def wait_for_rounds(log: Path, count: int, seconds: float = 30) -> list[float]:
    deadline = time.monotonic() + seconds
    while len(found := rounds(log)) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"the server saw {len(found)} rounds, not {count}")
        time.sleep(0.02)
    return found


def assert_round_status_line(terminal: Terminal) -> None:
    terminal.search(ROUND_WAITING)
    shown = terminal.search(TIMES)
    assert int(shown.group(1)) < 30
    assert 28 <= int(shown.group(2)) <= 29, shown.group(0)
    terminal.see(SERVER_KEYS)


def paced(rounds_sent: int) -> float:
    """The least time the kit's pacing alone takes to send `rounds_sent` still-waiting rounds in a row."""
    pacing = Pacing()
    return sum(min(pacing.first * pacing.factor**index, pacing.cap) for index in range(rounds_sent))


def test_a_call_waiting_on_another_calls_question_shows_the_line_and_r_sends_the_next_round_now(
    store_file: str, tmp_path: Path
) -> None:
    log = tmp_path / "rounds.log"
    first = carrier(store_file)
    waiter = Terminal(APPROVE, terminal_env(MCP_ELICIT_STORE=store_file, ROUNDS_LOG=str(log)))
    try:
        waiter.see("protocol 2026-07-28")
        assert_round_status_line(waiter)
        assert "Form request" not in waiter.text, "the question is out once, at the carrier's terminal"

        retries = 6
        for sent in range(2, retries + 2):
            while True:
                waiter.press("r")
                said = waiter.search(rf"{re.escape(RETRIED)}|{IN_FLIGHT}").group(0)
                waiter.see(SERVER_KEYS)
                if said == RETRIED:
                    break
            wait_for_rounds(log, sent)
        times = rounds(log)
        assert times[retries] - times[0] < paced(retries), "the rounds came sooner than the pacing sends them"
        assert decision_status(store_file) is DecisionStatus.REQUESTED

        answer_the_carrier(first)
        waiter.see(JOB_RUN)
        assert waiter.finish() == 0
        after = waiter.text[waiter.text.index(JOB_RUN) :]
        assert "still waiting" not in after and SERVER_KEYS not in after, "the line vanishes with the wait"
    finally:
        first.close()
        waiter.close()
    assert decision_status(store_file) is DecisionStatus.ACCEPTED


def test_c_at_a_round_wait_stops_the_call_and_the_carrier_still_finishes(store_file: str) -> None:
    first = carrier(store_file)
    waiter = Terminal(APPROVE, terminal_env(MCP_ELICIT_STORE=store_file))
    try:
        assert_round_status_line(waiter)
        waiter.press("c")
        waiter.see(
            "Stopped: the call ends here; nothing is withdrawn on the server.",
            "the tool 'approve' was stopped while the server was still waiting (cancelled at the terminal); "
            "nothing was withdrawn on the server",
        )
        assert waiter.finish() == 1
        assert decision_status(store_file) is DecisionStatus.REQUESTED, "the question is still out"
        answer_the_carrier(first)
    finally:
        first.close()
        waiter.close()
    assert decision_status(store_file) is DecisionStatus.ACCEPTED
    again = command(APPROVE, env=script_env(store_file), timeout=90)
    assert again.returncode == 0, again.stdout + again.stderr
    assert JOB_RUN in again.stdout, "the same call made again gets the result the carrier's call recorded"


def script_env(store_file: str) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200", "MCP_ELICIT_STORE": store_file}
    env.pop("DISPLAY", None)
    return env


def waiter_with_script(tmp_path: Path, store_file: str, script: list[dict[str, str]]) -> subprocess.Popen[str]:
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps(script))
    return subprocess.Popen(
        [COMMAND, *APPROVE, "--script", str(answers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=script_env(store_file),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_script_says_done_at_a_round_wait_and_the_call_goes_on(tmp_path: Path, store_file: str) -> None:
    first = carrier(store_file)
    try:
        waiter = waiter_with_script(tmp_path, store_file, [{"match": "approve is still waiting", "reply": "done"}])
        try:
            assert waiter.stdout is not None
            line = waiter.stdout.readline()
            while "Answered by the script" not in line:
                assert line, "the run ended before the script was asked"
                shown = line
                line = waiter.stdout.readline()
            assert re.search(ROUND_STATUS, shown), shown
            assert "Answered by the script: done (retry now)" in line
            answer_the_carrier(first)
            out, err = waiter.communicate(timeout=90)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
    finally:
        first.close()
    assert waiter.returncode == 0, out + err
    assert JOB_RUN in out


def test_a_script_says_stop_at_a_round_wait_and_the_call_stops(tmp_path: Path, store_file: str) -> None:
    first = carrier(store_file)
    try:
        waiter = waiter_with_script(tmp_path, store_file, [{"match": "is still waiting", "reply": "stop"}])
        out, err = waiter.communicate(timeout=90)
        assert waiter.returncode == 1, out + err
        assert re.search(ROUND_STATUS, out), out
        assert "Answered by the script: stop (stop the call)" in out
        assert "was stopped while the server was still waiting (stopped by the script)" in err
        assert decision_status(store_file) is DecisionStatus.REQUESTED
        answer_the_carrier(first)
    finally:
        first.close()
    assert decision_status(store_file) is DecisionStatus.ACCEPTED
