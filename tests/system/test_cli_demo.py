"""`mcp-elicit demo` as installed, in a real pseudo-terminal: the reference server over HTTP and the stand-in
provider as real processes, the scenarios answered by the example script (with a scripted browser for URL
mode) or by a person's keystrokes and a browser walking the printed page, and everything stopped at the end.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import time
from pathlib import Path

import httpx2
import pytest

from mcp_elicit.model import Decision, DecisionStatus, Operator, Principal
from mcp_elicit.store import open_store
from mcp_elicit.web import Vault, VaultKeyRing
from tests.helpers.cli_terminal import CHOICE, TEXT_PROMPT, Terminal, terminal_env
from tests.helpers.commands import command
from tests.helpers.demo_terminal import DEMO_TIMEOUT, PROVIDER, SERVER, listening, ports
from tests.helpers.oauth_client import hidden_fields

EXAMPLE = Path(__file__).parents[2] / "examples" / "demo-script.json"
SIGN_IN = r"sign in as\s+(\S+)\s+password (\S+)"


def vault_keys() -> str:
    return "test:" + base64.urlsafe_b64encode(os.urandom(32)).decode()


def stored(store_url: str) -> list[Decision]:
    store = open_store(store_url)
    try:
        return list(reversed(store.list_decisions(Operator())))
    finally:
        store.close()


def only_run_dir(data: Path) -> Path:
    [run_dir] = (data / "mcp-elicit" / "demo").iterdir()
    return run_dir


def test_the_example_script_runs_every_scenario_end_to_end(tmp_path: Path) -> None:
    data, keys = tmp_path / "data", vault_keys()
    store_url = f"sqlite://{tmp_path / 'elicit.db'}"
    terminal = Terminal(
        ["demo", "--script", str(EXAMPLE)],
        terminal_env(XDG_DATA_HOME=str(data), MCP_ELICIT_STORE=store_url, MCP_ELICIT_VAULT_KEYS=keys),
        timeout=DEMO_TIMEOUT,
    )
    try:
        started = ports(terminal)
        terminal.see(
            "1/5  Deploy approval",
            "Deploy payments to production? The change scope is:",
            "- production: add migrations.sql; change app.py",
            "Deployed payments to staging and production (4 file changes). Note: approved in the demo",
            "(approve_production, form mode): accepted",
            "2/5  Procurement choice",
            "2 offer(s) for 'laptop' fit your budget of 1500.00",
            "Ordered 14-inch laptop, 32 GB from Contoso for 1490.00",
            "(choose_offer, form mode): accepted",
            "3/5  Delete confirmation",
            "Delete these 5 file(s), 5.3 kB in all?",
            "- logs/app-2026-11-05.log (1.8 kB)",
            "Deleted 5 file(s) (5.3 kB).",
            "(confirm_delete, form mode): accepted",
            "4/5  Connect an account in the browser",
            "Answered by the script: consent",
            "pressed Allow at the provider; the server's page says 'Done'",
            "Connected as ada (Ada Lovelace).",
            "(connect_account, url mode): external_completed",
            "5/5  Pay an invoice",
            "Answered by the script: consent",
            "pressed Pay at the provider's",
            "Paid invoice INV-1042 from Northwind: EUR 482.50.",
            "(pay_invoice, url mode): external_completed",
            "List them with: mcp-elicit decisions ls",
        )
        assert terminal.finish() == 0, terminal.text[-3000:]
    finally:
        terminal.close()
    assert not any(listening(port) for port in started), "the demo left a process running"

    decisions = stored(store_url)
    assert [(d.key, d.status) for d in decisions] == [
        ("approve_production", DecisionStatus.ACCEPTED),
        ("choose_offer", DecisionStatus.ACCEPTED),
        ("confirm_delete", DecisionStatus.ACCEPTED),
        ("connect_account", DecisionStatus.EXTERNAL_COMPLETED),
        ("pay_invoice", DecisionStatus.EXTERNAL_COMPLETED),
    ]
    assert decisions[1].content == {"offer": "LAP-14-B"}
    principal = decisions[0].principal_id
    assert {d.principal_id for d in decisions} == {principal} and re.fullmatch(
        r"http://127\.0\.0\.1:\d+#demo-\w+", principal
    )

    run_dir = only_run_dir(data)
    workspace = run_dir / "workspace"
    release = workspace / "services" / "payments" / "release"
    for environment in ("staging", "production"):
        deployed = workspace / "deployed" / environment / "payments"
        assert {p.name: p.read_bytes() for p in deployed.iterdir()} == {
            p.name: p.read_bytes() for p in release.iterdir()
        }
    [order] = (workspace / "orders").glob("*.json")
    assert json.loads(order.read_text())["sku"] == "LAP-14-B"
    assert sorted(p.name for p in (workspace / "files").rglob("*") if p.is_file()) == ["keep.txt"]

    store = open_store(store_url)
    try:
        token = Vault(store, VaultKeyRing.from_text(keys)).get(Principal(principal, "any client"), "example-token")
    finally:
        store.close()
    assert token
    assert token not in terminal.raw
    for log in run_dir.glob("*.log"):
        assert token not in log.read_text(errors="replace"), log.name


def test_declines_and_cancels_on_postgresql_at_2025_11_25(tmp_path: Path, pg_schema_url: str) -> None:
    script = tmp_path / "no.json"
    script.write_text(
        json.dumps(
            [
                {"match": "Deploy payments to production?", "reply": "decline"},
                {"match": "staging only", "reply": "accept", "content": {"deploy_staging": True}},
                {"match": "Which one should I order?", "reply": "cancel"},
                {"match": "Delete these", "reply": "accept", "content": {"delete": False}},
                {"match": "Connect your", "reply": "decline"},
                {"match": "Pay invoice", "reply": "decline"},
            ]
        )
    )
    workspace = tmp_path / "mine"
    terminal = Terminal(
        [
            "demo",
            "--script",
            str(script),
            "--store",
            pg_schema_url,
            "--workspace",
            str(workspace),
            "--era",
            "2025-11-25",
        ],
        terminal_env(XDG_DATA_HOME=str(tmp_path / "data")),
        timeout=DEMO_TIMEOUT,
    )
    try:
        terminal.see(
            "Deployed payments to staging only (2 file changes); production unchanged.",
            "No order placed (cancelled).",
            "Nothing deleted (not confirmed).",
            "Answered by the script: decline",
            "Not connected (declined).",
            "Invoice INV-1042 is not paid (declined).",
            f"mcp-elicit decisions ls --store {pg_schema_url}",
        )
        assert terminal.finish() == 0, terminal.text[-3000:]
    finally:
        terminal.close()
    assert [(d.key, d.status) for d in stored(pg_schema_url)] == [
        ("approve_production", DecisionStatus.DECLINED),
        ("staging_only", DecisionStatus.ACCEPTED),
        ("choose_offer", DecisionStatus.CANCELLED),
        ("confirm_delete", DecisionStatus.ACCEPTED),
        ("connect_account", DecisionStatus.DECLINED),
        ("pay_invoice", DecisionStatus.DECLINED),
    ]
    release = (workspace / "services" / "payments" / "release" / "app.py").read_text()
    assert (workspace / "deployed" / "staging" / "payments" / "app.py").read_text() == release
    assert (workspace / "deployed" / "production" / "payments" / "app.py").read_text() != release
    assert not list((workspace / "orders").glob("*.json"))
    assert len(list((workspace / "files" / "logs").glob("*.log"))) == 5


def walk_as_a_person(url: str, user: tuple[str, str], provider_user: tuple[str, str]) -> str:
    """What a person does in the browser: sign in, Continue, sign in at the provider, Allow; the last page."""
    with httpx2.Client(timeout=30, follow_redirects=False) as browser:
        page = browser.get(url)
        assert page.status_code == 303, page.text
        sign_in_page = browser.get(httpx2.URL(url).join(page.headers["location"]))
        signed = browser.post(
            httpx2.URL(url).join("/signin"),
            data={**hidden_fields(sign_in_page.text), "username": user[0], "password": user[1]},
        )
        assert signed.status_code == 303, signed.text
        decision_page = browser.get(url)
        started = browser.post(f"{url}/continue", data=hidden_fields(decision_page.text, f"{urlpath(url)}/continue"))
        assert started.status_code == 303, started.text
        authorize = started.headers["location"]
        form = browser.get(authorize)
        provider = authorize.split("?")[0]
        consent = browser.post(
            provider,
            data={
                **hidden_fields(form.text, "/authorize"),
                "username": provider_user[0],
                "password": provider_user[1],
            },
        )
        allowed = browser.post(
            f"{provider}/consent", data={**hidden_fields(consent.text, "/authorize/consent"), "action": "allow"}
        )
        assert allowed.status_code == 302, allowed.text
        return browser.get(allowed.headers["location"]).text


def pay_as_a_person(url: str, user: tuple[str, str]) -> str:
    """What a person does in the browser to pay: sign in, Continue, Pay at the checkout, back on the server's page
    (reloaded until the provider's webhook has arrived); that page."""
    with httpx2.Client(timeout=30, follow_redirects=False) as browser:
        sign_in_page = browser.get(httpx2.URL(url).join(browser.get(url).headers["location"]))
        signed = browser.post(
            httpx2.URL(url).join("/signin"),
            data={**hidden_fields(sign_in_page.text), "username": user[0], "password": user[1]},
        )
        assert signed.status_code == 303, signed.text
        decision_page = browser.get(url)
        assert "EUR 482.50" in decision_page.text
        started = browser.post(f"{url}/continue", data=hidden_fields(decision_page.text, f"{urlpath(url)}/continue"))
        assert started.status_code == 303, started.text
        checkout = started.headers["location"]
        page = browser.get(checkout)
        paid = browser.post(checkout, data={**hidden_fields(page.text, urlpath(checkout)), "action": "pay"})
        assert paid.status_code == 303 and paid.headers["location"] == url, paid.text
        deadline = time.monotonic() + 15
        while "<h1>Done</h1>" not in (back := browser.get(url).text) and time.monotonic() < deadline:
            time.sleep(0.1)
        return back


def urlpath(url: str) -> str:
    return httpx2.URL(url).path


def test_a_person_answers_at_the_terminal_and_connects_in_the_browser_at_2025_11_25(tmp_path: Path) -> None:
    store_url = f"sqlite://{tmp_path / 'elicit.db'}"
    terminal = Terminal(
        ["demo", "--no-browser", "--era", "2025-11-25"],
        terminal_env(XDG_DATA_HOME=str(tmp_path / "data"), MCP_ELICIT_STORE=store_url),
        timeout=DEMO_TIMEOUT,
    )
    try:
        started = [int(terminal.search(SERVER).group(1))]
        user = terminal.search(SIGN_IN).groups()
        started.append(int(terminal.search(PROVIDER).group(1)))
        provider_user = terminal.search(SIGN_IN).groups()
        terminal.see("Deploy payments to production?", "[1/2] Approve (required)")
        terminal.answer(CHOICE, "1", "\r")
        terminal.see("[2/2] Note (optional)")
        terminal.answer(TEXT_PROMPT, "by hand\r")
        terminal.review("s\r")
        terminal.see("Deployed payments to staging and production (4 file changes). Note: by hand")
        terminal.see("Which one should I order?", "[1/1] Offer (required)")
        terminal.answer(CHOICE, "1", "\r")
        terminal.review("s\r")
        terminal.see("Ordered 14-inch laptop, 16 GB from Northwind for 1149.00")
        terminal.see("Delete these 5 file(s)", "[1/1] Delete these files (required)")
        terminal.answer(CHOICE, "2", "\r")
        terminal.review("s\r")
        terminal.see("Nothing deleted (not confirmed).")
        terminal.see(
            "Request to open a web page", "Open this page in your browser? Nothing has been loaded from it yet."
        )
        terminal.answer("[o] open", "o")
        terminal.see("Opening the page was allowed.", "Open this page in your browser:")
        url = terminal.search(r"http://127\.0\.0\.1:\d+/elicit/[0-9a-f-]+").group(0)
        terminal.see("Waiting for the browser")
        assert "Done" in walk_as_a_person(url, (user[0], user[1]), (provider_user[0], provider_user[1]))
        terminal.see("The server announced the flow's completion.", "Connected as ada (Ada Lovelace).")
        terminal.see("external_completed")
        terminal.see("Pay invoice INV-1042 from Northwind: EUR 482.50.", "Open this page in your browser?")
        terminal.answer("[o] open", "o")
        url = terminal.search(r"http://127\.0\.0\.1:\d+/elicit/[0-9a-f-]+").group(0)
        terminal.see("Waiting for the browser: sign in as", "then Pay at the Example Pay checkout")
        assert "Done" in pay_as_a_person(url, (user[0], user[1]))
        terminal.see("Paid invoice INV-1042 from Northwind: EUR 482.50.", "external_completed")
        assert terminal.finish() == 0, terminal.text[-3000:]
    finally:
        terminal.close()
    assert not any(listening(port) for port in started)
    assert [(d.key, d.status, d.content) for d in stored(store_url)] == [
        ("approve_production", DecisionStatus.ACCEPTED, {"approve": True, "note": "by hand"}),
        ("choose_offer", DecisionStatus.ACCEPTED, {"offer": "LAP-14-A"}),
        ("confirm_delete", DecisionStatus.ACCEPTED, {"delete": False}),
        ("connect_account", DecisionStatus.EXTERNAL_COMPLETED, None),
        ("pay_invoice", DecisionStatus.EXTERNAL_COMPLETED, None),
    ]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_demo_stops_everything_it_started(stop: signal.Signals, tmp_path: Path) -> None:
    terminal = Terminal(["demo"], terminal_env(XDG_DATA_HOME=str(tmp_path / "data")), timeout=DEMO_TIMEOUT)
    try:
        started = ports(terminal)
        terminal.see("Deploy payments to production?", CHOICE)
        assert all(listening(port) for port in started)
        terminal.signal(stop)
        terminal.see("interrupted: the reference server and the provider are stopped; logs in")
        assert terminal.finish() == 130
    finally:
        terminal.close()
    assert not any(listening(port) for port in started)


def test_without_a_terminal_or_a_script_it_says_how_to_run(tmp_path: Path) -> None:
    done = command(["demo"], env={**os.environ, "XDG_DATA_HOME": str(tmp_path)}, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: no terminal to ask you at: run with --script examples/demo-script.json"
    assert not (tmp_path / "mcp-elicit" / "demo").exists()


def test_a_server_that_cannot_start_is_reported_with_its_log_and_nothing_is_left_running(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = command(
        ["demo", "--script", str(EXAMPLE)],
        env={**terminal_env(XDG_DATA_HOME=str(data)), "MCP_ELICIT_VAULT_KEYS": "broken"},
        timeout=DEMO_TIMEOUT,
    )
    assert done.returncode == 2, done.stdout
    run_dir = only_run_dir(data)
    first, second = done.stderr.strip().splitlines()
    assert first.startswith("error: the demo could not start: the reference server exited with status 2")
    assert "MCP_ELICIT_VAULT_KEYS" in first and str(run_dir / "server.log") in first
    assert second == f"the logs of the reference server and the provider are in {run_dir}"
    issuer = re.search(r"issuer http://127\.0\.0\.1:(\d+)", (run_dir / "provider.log").read_text())
    assert issuer is not None, "the provider had started before the server failed"
    assert not listening(int(issuer.group(1)))


def test_a_store_it_cannot_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = command(
        ["demo", "--script", str(EXAMPLE), "--store", "bogus://nowhere"],
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot use the store: unknown store URL scheme 'bogus'")
    assert not (tmp_path / "mcp-elicit" / "demo").exists()
