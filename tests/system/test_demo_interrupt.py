"""Ctrl-C in `mcp-elicit demo`, as installed, in a real pseudo-terminal with the reference server and the
provider as real processes: a first press cancels the question on screen and says how to stop, a second
within 2 s stops the demo, and a press while waiting for the browser leaves that decision cancelled in the
store (audited), with the same status line as every other wait.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from mcp_elicit.model import AuditEntry, Decision, DecisionStatus, Operator
from mcp_elicit.store import open_store
from tests.helpers.cli_terminal import CHOICE, COMMAND, ESC, Terminal, terminal_env
from tests.helpers.demo_terminal import DEMO_TIMEOUT, listening, ports

CTRL_C = "\x03"
AGAIN = "Press Ctrl-C again to stop the demo."
BROWSER_WAIT = r"Waiting for the browser: Connect your Example account.*\n  \d+s elapsed · deadline \d\d:\d\d:\d\d \("


def stored(store_url: str) -> dict[str, tuple[Decision, list[AuditEntry]]]:
    store = open_store(store_url)
    try:
        return {d.key: (d, store.audit_trail(d.elicitation_id, Operator())) for d in store.list_decisions(Operator())}
    finally:
        store.close()


IGNORING_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])"
)
"""Starts the command with SIGINT ignored, as it is inherited from `nohup`, some job runners, a pytest-xdist
worker: Python then leaves SIGINT ignored, and the event loop installs no handler of its own."""


def demo(tmp_path: Path, *args: str, sigint: str = "default") -> tuple[Terminal, str]:
    store_url = f"sqlite://{tmp_path / 'elicit.db'}"
    env = terminal_env(XDG_DATA_HOME=str(tmp_path / "data"), MCP_ELICIT_STORE=store_url)
    arguments = ["demo", "--no-browser", *args]
    if sigint == "ignored":
        launched = Terminal(
            ["-c", IGNORING_SIGINT, COMMAND, *arguments], env, command=sys.executable, timeout=DEMO_TIMEOUT
        )
        return launched, store_url
    return Terminal(arguments, env, timeout=DEMO_TIMEOUT), store_url


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_first_ctrl_c_cancels_the_question_a_second_within_2_s_stops_the_demo(tmp_path: Path, sigint: str) -> None:
    terminal, store_url = demo(tmp_path, sigint=sigint)
    try:
        started = ports(terminal)
        terminal.see("Deploy payments to production?")
        terminal.answer(CHOICE, CTRL_C)
        terminal.see(AGAIN, "Cancelled: no answer was sent.")
        terminal.see("Nothing changed: the production approval for payments was cancelled.")

        terminal.see("Which one should I order?")
        terminal.see(CHOICE)
        time.sleep(2.5)  # past the window: this press cancels again
        terminal.press(CTRL_C)
        terminal.see(AGAIN)
        terminal.press(CTRL_C)
        terminal.see("interrupted: the reference server and the provider are stopped")
        assert terminal.finish() == 130
    finally:
        terminal.close()
    assert not any(listening(port) for port in started)
    decisions = stored(store_url)
    assert decisions["approve_production"][0].status is DecisionStatus.CANCELLED
    assert decisions["choose_offer"][0].status is DecisionStatus.CANCELLED
    assert set(decisions) <= {"approve_production", "choose_offer", "confirm_delete"}, "the demo did not stop"
    assert all(d.is_terminal for d, _ in decisions.values()), "a stopped demo leaves no decision open"


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_ctrl_c_while_waiting_for_the_browser_cancels_that_decision(era: str, tmp_path: Path) -> None:
    terminal, store_url = demo(tmp_path, "--era", era)
    try:
        for question in ("Deploy payments to production?", "Which one should I order?", "Delete these 5 file(s)"):
            terminal.see(question)
            terminal.answer(CHOICE, ESC)
        terminal.see("Request to open a web page")
        terminal.answer("[o] open", "o")
        terminal.see("Open this page in your browser:", "Waiting for the browser: sign in as")
        terminal.search(BROWSER_WAIT)
        terminal.see("[r] I'm done: retry now   [c] cancel")
        terminal.press(CTRL_C)
        terminal.see(AGAIN, "(connect_account, url mode): cancelled; the server ends the step.")
        terminal.see("Not connected (cancelled).", "(connect_account, url mode): cancelled")
        terminal.see("Pay invoice INV-1042 from Northwind")  # the fifth scenario goes on; its page is declined
        terminal.answer("[o] open", ESC)
        assert terminal.finish() == 0, terminal.text[-3000:]
    finally:
        terminal.close()
    decision, trail = stored(store_url)["connect_account"]
    assert decision.status is DecisionStatus.CANCELLED
    last = trail[-1]
    assert (last.to_status, last.actor, last.reason) == (
        "cancelled",
        "operator:mcp-elicit demo",
        "cancelled at the terminal",
    )
