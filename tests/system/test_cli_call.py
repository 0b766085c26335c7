"""`mcp-elicit call` as installed, against real servers: `mcp-elicit serve` over stdio, over HTTP on loopback
(unauthenticated development mode, and the reference deployment with its own sign-in), a person at a real
pseudo-terminal or a script answering, and every way the command can fail with its exit code and message."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.reference import demo_stack
from mcp_elicit.reference.demo_stack import DemoStack, running_stack, sign_in
from mcp_elicit.store import open_store
from tests.helpers.cli_terminal import CHOICE, COMMAND, ESC, TEXT_PROMPT, Terminal, terminal_env
from tests.helpers.commands import run, spawn
from tests.helpers.http_harness import free_port, stop, wait_for_port

ERAS = ["2025-11-25", "2026-07-28"]
SERVE = f"{shlex.quote(COMMAND)} serve"
PRIORITY_SCRIPT = [{"match": "Which priority", "reply": "accept", "content": {"priority": "high"}}]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("connected to ")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def store_file(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'elicit.db'}"


@pytest.fixture
def stdio_server(tmp_path: Path) -> str:
    """The stdio target as a person types it; the store comes from the environment the server inherits."""
    return f"{SERVE} --workspace {shlex.quote(str(tmp_path / 'workspace'))}"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(PRIORITY_SCRIPT))
    return path


@pytest.fixture
def dev_http(tmp_path: Path, store_file: str) -> Iterator[str]:
    port = free_port()
    process = spawn(
        ["serve", "--transport", "http", "--dev-loopback", "--single-process", "--port", str(port),
         "--store", store_file, "--workspace", str(tmp_path / "workspace")],
        env=os.environ, output=tmp_path / "serve.log",
    )  # fmt: skip
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


@pytest.fixture
def reference_http(tmp_path: Path, store_file: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[DemoStack]:
    monkeypatch.setattr(demo_stack, "free_port", free_port)  # ports locked for this test process
    with running_stack(tmp_path / "run", store_url=store_file, workspace=tmp_path / "workspace") as stack:
        yield stack


def decisions(store_url: str) -> dict[str, tuple[DecisionStatus, object]]:
    store = open_store(store_url)
    try:
        return {d.key: (d.status, d.content) for d in store.list_decisions(Operator())}
    finally:
        store.close()


# -- a script answers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_stdio_server_asks_and_the_script_answers(era: str, stdio_server: str, script: Path, store_file: str) -> None:
    done = run(
        "call", stdio_server, "create_ticket", "--arg", "title=Printer on fire", "--script", str(script),
        "--era", era, env={"MCP_ELICIT_STORE": store_file},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Which priority for the ticket 'Printer on fire'?" in done.stdout
    assert 'Answered by the script: accept {"priority": "high"}' in done.stdout
    assert "(high): Printer on fire" in done.stdout
    assert f"protocol {era}" in done.stderr
    assert "INFO" not in done.stderr, "the server's log belongs in its own file, not in the person's terminal"
    assert decisions(store_file) == {"priority": (DecisionStatus.ACCEPTED, {"priority": "high"})}


@pytest.mark.parametrize("era", ERAS)
def test_a_question_the_script_misses_stops_the_call_naming_it(
    era: str, stdio_server: str, tmp_path: Path, store_file: str
) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"match": "Which offer", "reply": "accept", "content": {"offer": "A"}}]))
    stopped = run(
        "call", stdio_server, "create_ticket", "--arg", "title=Unscripted", "--script", str(other), "--era", era,
        env={"MCP_ELICIT_STORE": store_file},
    )  # fmt: skip
    assert stopped.returncode == 1, stopped.stderr
    assert (
        "error: the script has no answer for the question \"Which priority for the ticket 'Unscripted'?\" "
        "(form fields: priority): the call stopped and left it unanswered;" in one_line(stopped.stderr)
    )
    assert "--on-missing cancel" in stopped.stderr
    assert "The script has no answer for this question: the call stops" in stopped.stdout
    assert decisions(store_file) == {"priority": (DecisionStatus.REQUESTED, None)}, "nobody's answer was recorded"


def test_on_missing_cancel_answers_the_missed_question_cancel(
    stdio_server: str, tmp_path: Path, store_file: str
) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"match": "Which offer", "reply": "accept", "content": {"offer": "A"}}]))
    done = run(
        "call", stdio_server, "create_ticket", "--arg", "title=Unscripted", "--script", str(other),
        "--on-missing", "cancel", env={"MCP_ELICIT_STORE": store_file},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Answered by the script: cancel (nobody decided)" in done.stdout
    assert "No ticket created (cancelled)." in done.stdout
    assert decisions(store_file) == {"priority": (DecisionStatus.CANCELLED, None)}


@pytest.mark.parametrize("era", ERAS)
def test_http_dev_loopback_with_json_arguments(era: str, dev_http: str, tmp_path: Path, store_file: str) -> None:
    answers = tmp_path / "offer.json"
    answers.write_text(json.dumps([{"match": "Which one", "reply": "accept", "content": {"offer": "MON-32-B"}}]))
    done = run(
        "call", dev_http, "procure", "--arg", "item=monitor", "--arg", "budget=700", "--script", str(answers),
        "--era", era,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 offer(s) for 'monitor' fit your budget of 700.00" in done.stdout
    assert "Ordered 32-inch 4K monitor from Contoso for 649.00" in done.stdout
    assert f"protocol {era}" in done.stderr
    assert decisions(store_file) == {"choose_offer": (DecisionStatus.ACCEPTED, {"offer": "MON-32-B"})}
    assert len(list((tmp_path / "workspace" / "orders").glob("*.json"))) == 1

    nobody = run("call", dev_http, "procure", "--arg", "item=monitor", "--arg", "budget=800", "--era", era)
    assert nobody.returncode == 1, nobody.stderr
    assert "form elicitation" in nobody.stdout + nobody.stderr, "the server's own words (on 2026-07-28, HTTP 400)"
    assert "HTTP 400" not in nobody.stderr


def test_the_reference_deployment_needs_its_token(reference_http: DemoStack, script: Path, store_file: str) -> None:
    refused = run("call", reference_http.mcp_url, "create_ticket", "--arg", "title=x", "--script", str(script))
    assert refused.returncode == 2
    assert (
        f"requires authorization (HTTP 401: Authentication required): sign in with mcp-elicit login "
        f"{reference_http.mcp_url}, or pass --token" in one_line(refused.stderr)
    ), "the status with the server's error_description"

    elsewhere = reference_http.mcp_url.removesuffix("/mcp") + "/nothere"
    missing = run("call", elsewhere, "create_ticket")
    assert missing.returncode == 2
    assert one_line(missing.stderr) == f"error: no MCP endpoint at {elsewhere} (HTTP 404)", (
        "a bare Not Found adds nothing"
    )

    forged = run("call", reference_http.mcp_url, "create_ticket", "--arg", "title=x", "--token", "not-a-token")
    assert forged.returncode == 2
    assert "refused the token (HTTP 401: " in one_line(forged.stderr)
    assert "): it is invalid or has expired" in one_line(forged.stderr)

    token = anyio.run(sign_in, reference_http)
    token_file = script.with_name("token")  # as a secret store mounts it: the token alone, for this user alone
    token_file.write_text(f"{token}\n")
    token_file.chmod(0o600)
    done = run(
        "call", reference_http.mcp_url, "create_ticket", "--arg", "title=Signed in", "--script", str(script),
        env={"MCP_ELICIT_TOKEN_FILE": str(token_file)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "(high): Signed in" in done.stdout
    assert token not in done.stdout + done.stderr
    store = open_store(store_file)
    try:
        [decision] = store.list_decisions(Operator())
    finally:
        store.close()
    assert decision.principal_id == reference_http.principal_id


# -- a person at the terminal -------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_a_person_answers_the_form_with_keystrokes(era: str, stdio_server: str, store_file: str) -> None:
    terminal = Terminal(
        ["call", stdio_server, "deploy", "--arg", "service=payments", "--era", era],
        terminal_env(MCP_ELICIT_STORE=store_file),
    )
    try:
        terminal.see("Form request", "Tool:   deploy", "production: add migrations.sql; change app.py")
        terminal.see("[1/2] Approve (required)", "Deploy to production now")
        terminal.answer(CHOICE, "1", "\r")
        terminal.see("[2/2] Note (optional)")
        terminal.answer(TEXT_PROMPT, "ship it\r")
        terminal.see("Your answers")
        terminal.review("s\r")
        terminal.see("Submitted.", "Deployed payments to staging and production (4 file changes). Note: ship it")
        assert terminal.finish() == 0
    finally:
        terminal.close()
    assert decisions(store_file) == {
        "approve_production": (DecisionStatus.ACCEPTED, {"approve": True, "note": "ship it"})
    }


def test_decline_and_cancel_at_the_terminal_stay_distinct(stdio_server: str, store_file: str, tmp_path: Path) -> None:
    terminal = Terminal(
        ["call", stdio_server, "deploy", "--arg", "service=payments"], terminal_env(MCP_ELICIT_STORE=store_file)
    )
    try:
        terminal.see("Deploy payments to production?")
        terminal.answer(CHOICE, "1", "\r")
        terminal.answer(TEXT_PROMPT, "\r")
        terminal.review("d\r")
        terminal.see("Declined: the server is told you refused.", "Deploy payments to staging only?")
        terminal.answer(CHOICE, ESC)
        terminal.see("Cancelled: no answer was sent.", "Nothing deployed for payments.")
        assert terminal.finish() == 0
    finally:
        terminal.close()
    assert decisions(store_file) == {
        "approve_production": (DecisionStatus.DECLINED, None),
        "staging_only": (DecisionStatus.CANCELLED, None),
    }
    release = (tmp_path / "workspace" / "services" / "payments" / "release" / "app.py").read_text()
    for environment in ("staging", "production"):
        assert (tmp_path / "workspace" / "deployed" / environment / "payments" / "app.py").read_text() != release


# -- failures: exit codes and one-line messages ---------------------------------------------------------------


def test_a_tool_error_exits_1(stdio_server: str, store_file: str) -> None:
    done = run("call", stdio_server, "deploy", "--arg", "service=nope", env={"MCP_ELICIT_STORE": store_file})
    assert done.returncode == 1
    assert "no pending release for service 'nope'" in done.stdout
    assert "the tool deploy reported an error" in done.stderr


def test_with_nobody_to_ask_the_server_names_the_missing_capability(stdio_server: str, store_file: str) -> None:
    done = run("call", stdio_server, "create_ticket", "--arg", "title=x", env={"MCP_ELICIT_STORE": store_file})
    assert done.returncode == 1
    message = one_line(done.stderr)
    assert "form elicitation capability (code -32021)" in message
    assert "no terminal" in message and "--script FILE" in message


def test_an_unknown_tool_exits_2_naming_the_tools(stdio_server: str, store_file: str) -> None:
    done = run("call", stdio_server, "launch_rockets", env={"MCP_ELICIT_STORE": store_file})
    assert done.returncode == 2
    assert "has no tool 'launch_rockets'; its tools: create_ticket, delete_files, deploy, procure" in one_line(
        done.stderr
    )


def test_a_server_that_dies_is_quoted(tmp_path: Path) -> None:
    done = run("call", f"{SERVE} --store bogus://nowhere", "deploy")
    assert done.returncode == 2
    message = one_line(done.stderr)
    assert "closed the connection before answering" in message
    assert "unknown store URL scheme 'bogus'" in message


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("no-such-command-xyz --flag", [], "command not found: no-such-command-xyz"),
        ("ws://127.0.0.1:9/mcp", [], "unsupported target 'ws://127.0.0.1:9/mcp'"),
        ("'unbalanced", [], "cannot split the command"),
        ("  ", [], "the target is empty"),
        (SERVE, ["--token", "t0k"], "--token applies to an http(s) target only"),
        (SERVE, ["--arg", "service"], "--arg 'service' is not KEY=VALUE"),
        (SERVE, ["--arg", "=x"], "--arg '=x' is not KEY=VALUE"),
        (SERVE, ["--arg", "a=1", "--arg", "a=2"], "--arg a is given twice"),
        (SERVE, ["--script", "/nonexistent/answers.json"], "cannot use the script"),
        (SERVE, ["--on-missing", "cancel"], "--on-missing applies with --script only"),
    ],
)
def test_usage_errors_exit_2_with_one_line(target: str, extra: list[str], message: str) -> None:
    done = run("call", target, "deploy", *extra)
    assert done.returncode == 2, done.stdout
    assert message in one_line(done.stderr)
    assert done.stdout == ""


def test_an_unreachable_url_exits_2() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    done = run("call", url, "deploy")
    assert done.returncode == 2
    assert f"cannot reach {url}: nothing answers there" in one_line(done.stderr)


def test_a_bad_script_is_refused_before_connecting(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"reply": "maybe"}]))
    done = run("call", SERVE, "deploy", "--script", str(bad))
    assert done.returncode == 2
    assert "script entry 1: 'reply' must be one of" in one_line(done.stderr)


def test_help_lists_call_and_demo() -> None:
    shown = run("--help")
    assert shown.returncode == 0
    assert "call" in shown.stdout and "demo" in shown.stdout
