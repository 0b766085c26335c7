"""Every server in examples/ runs as its docstring says, as its own process, and does what the guide claims.

One process per example (the stand-in provider aside), driven by the SDK's client or the client kit over
stdio or HTTP: the form tool and the FastMCP tool answered on one era each, the account connect walked
through the server's pages and the provider's over HTTP, the web fallback answered on the page the inbox
lists, the long pause run as a task.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_elicit import ElicitingClient, Http, ScriptedHandler, Stdio
from mcp_elicit.reference.demo_stack import Credentials, sign_in_as
from mcp_elicit.reference.scripted_browser import ScriptedBrowser, Walked
from tests.helpers.commands import cli
from tests.helpers.http_harness import free_port, stop, wait_for_port
from tests.helpers.pages_site import PROVIDER_CLIENT, PROVIDER_SECRET, hidden, provider_process
from tests.helpers.person import Person, accept
from tests.helpers.results import error_text, text
from tests.helpers.web_answers import page_url, submit

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT = 60
PROVIDER_USER = Credentials("alice", "wonderland", "Alice Liddell")  # the provider_process user


def key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment (its PYTHONPATH included) without its mcp-elicit settings, a store of the test's own."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MCP_ELICIT_")}
    return {**env, "MCP_ELICIT_STORE": f"sqlite://{tmp_path / 'examples.db'}", **extra}


def stdio(name: str, tmp_path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(EXAMPLES / name)], env=environment(tmp_path), cwd=str(tmp_path)
    )


@contextmanager
def http_example(
    name: str, tmp_path: Path, user: Credentials, port: int, *others: Credentials, **settings: str
) -> Iterator[str]:
    """The example served over HTTP on `port`, as its docstring runs it, for `user` and `others`; its public URL."""
    public = f"http://127.0.0.1:{port}"
    env = environment(
        tmp_path,
        PORT=str(port),
        PUBLIC_URL=public,
        MCP_ELICIT_USERS=",".join(f"{u.username}:{u.password}:{u.display_name}" for u in (user, *others)),
        MCP_ELICIT_AUTH_KEYS=key(),
        MCP_ELICIT_STATE_KEYS=key(),
        **settings,
    )
    log = tmp_path / f"{name}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLES / name)], env=env, cwd=tmp_path, stdout=sink, stderr=sink
        )
    try:
        wait_for_port(port, process, timeout=TIMEOUT)
        yield public
    finally:
        stop(process)
    assert process.returncode in (0, -15), log.read_text()


def test_every_example_says_how_to_run_it() -> None:
    found = sorted(path.name for path in EXAMPLES.glob("*.py"))
    assert found == [
        "approval_gate.py", "connect_account.py", "fastmcp_approval.py", "fastmcp_tool.py", "form_tool.py",
        "inbox_fallback.py", "long_pause_task.py", "release_approvers.py",
    ]  # fmt: skip
    for name in found:
        docstring = ast.get_docstring(ast.parse((EXAMPLES / name).read_text())) or ""
        assert f"examples/{name}" in docstring, f"{name}'s docstring does not say how to run it"


async def test_form_tool_asks_then_acts(tmp_path: Path) -> None:
    person = Person([accept(attendees=4, projector=True)])
    with anyio.fail_after(TIMEOUT):
        async with Client(stdio("form_tool.py", tmp_path), mode="legacy", elicitation_callback=person) as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == {"book_room"}
            result = await client.call_tool("book_room", {"room": "Lovelace"})
    assert text(result) == "Lovelace booked for 4 with a projector"
    [question] = person.asked
    assert question.message == "Book Lovelace: how many people, and a projector?"


async def test_fastmcp_tool_asks_on_2026_07_28(tmp_path: Path) -> None:
    person = Person([accept(value=True)])
    with anyio.fail_after(TIMEOUT):
        async with Client(stdio("fastmcp_tool.py", tmp_path), mode="2026-07-28", elicitation_callback=person) as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == {"refund", "order_total"}
            result = await client.call_tool("refund", {"order": "A-1042", "amount": 49.5})
    assert text(result) == "refunded 49.50 EUR for A-1042"
    [question] = person.asked
    assert question.message == "Refund 49.50 EUR for order A-1042?"


async def test_approval_gate_runs_what_was_approved_and_small_payments_without_asking(tmp_path: Path) -> None:
    person = Person([accept(amount=900)])
    with anyio.fail_after(TIMEOUT):
        async with Client(stdio("approval_gate.py", tmp_path), mode="legacy", elicitation_callback=person) as client:
            edited = await client.call_tool("pay_invoice", {"invoice": "INV-7", "amount": 1200})
            small = await client.call_tool("pay_invoice", {"invoice": "INV-8", "amount": 40})
    assert [block.text for block in edited.content] == [  # type: ignore[union-attr]
        "The user changed the arguments before approving (amount: 1200 → 900); the tool ran with the changes.",
        "paid 900 on INV-7",
    ]
    assert text(small) == "paid 40 on INV-8"
    [question] = person.asked
    assert question.message.startswith('Approve this call?\n\nTool: pay_invoice\ninvoice: "INV-7"\namount: 1200')


async def test_approval_gate_lets_later_orders_from_the_vendor_through_until_revoked(tmp_path: Path) -> None:
    person = Person([accept(approval_grant="always"), accept()])
    parameters = stdio("approval_gate.py", tmp_path)
    store = parameters.env["MCP_ELICIT_STORE"] if parameters.env else ""
    with anyio.fail_after(TIMEOUT):
        async with Client(parameters, mode="legacy", elicitation_callback=person) as client:
            first = await client.call_tool("reorder", {"vendor": "acme", "item": "paper", "boxes": 5})
            later = await client.call_tool("reorder", {"vendor": "acme", "item": "toner", "boxes": 2})
            [grant] = json.loads(cli("grants", "ls", "--json", store=store).stdout)
            revoked = cli("grants", "revoke", grant["grant_id"], "--reason", "budget review", store=store)
            asked = await client.call_tool("reorder", {"vendor": "acme", "item": "pens", "boxes": 1})
    told, ordered = (block.text for block in first.content)  # type: ignore[union-attr]
    assert told.startswith("The user always allows reorder calls with vendor=acme from this app, until ")
    assert ordered == "ordered 5 boxes of paper from acme"
    let_through, later_ordered = (block.text for block in later.content)  # type: ignore[union-attr]
    assert let_through.startswith("Ran without asking: the user's standing approval of reorder calls with vendor=acme")
    assert later_ordered == "ordered 2 boxes of toner from acme"
    assert (grant["tool"], grant["scope"], grant["kind"]) == ("reorder", "vendor=acme", "always")
    assert revoked.returncode == 0, revoked.stderr
    assert text(asked) == "ordered 1 boxes of pens from acme"
    assert len(person.asked) == 2, "asked for the first order and, once revoked, for the third; not the second"


async def test_fastmcp_approval_rejects_with_the_persons_reason(tmp_path: Path) -> None:
    person = Person([accept(approval_reject=True, approval_note="freeze until Monday"), accept(region="us")])
    with anyio.fail_after(TIMEOUT):
        parameters = stdio("fastmcp_approval.py", tmp_path)
        async with Client(parameters, mode="2026-07-28", elicitation_callback=person) as client:
            rejected = await client.call_tool("deploy", {"service": "web", "region": "eu"})
            moved = await client.call_tool("deploy", {"service": "web", "region": "eu"})
    assert error_text(rejected) == "The user rejected this call; nothing ran. Note from the user: freeze until Monday"
    assert [block.text for block in moved.content] == [  # type: ignore[union-attr]
        'The user changed the arguments before approving (region: "eu" → "us"); the tool ran with the changes.',
        "web deployed to us",
    ]
    assert all(question.message.startswith("Deploy to production?\n\nTool: deploy") for question in person.asked)


async def test_connect_account_walks_the_pages_and_keeps_the_token_on_the_server(tmp_path: Path) -> None:
    bob = Credentials("bob", secrets.token_urlsafe(12), "Bob")
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    with provider_process(free_port(), f"{public}/elicit/callback") as provider:
        settings = {
            "MCP_ELICIT_VAULT_KEYS": f"v1:{key()}",
            "MCP_ELICIT_PROVIDER_URL": provider,
            "MCP_ELICIT_PROVIDER_CLIENT_ID": PROVIDER_CLIENT,
            "MCP_ELICIT_PROVIDER_CLIENT_SECRET": PROVIDER_SECRET,
        }
        with http_example("connect_account.py", tmp_path, bob, port, **settings) as server:
            assert server == public
            token = await sign_in_as(bob, server, f"{server}/mcp", log=tmp_path / "connect_account.py.log")
            browser = ScriptedBrowser(server, provider, bob, PROVIDER_USER)
            walks: list[Walked] = []
            handler = ScriptedHandler([{"match": "Connect your Example account", "reply": "consent"}])
            with anyio.fail_after(TIMEOUT):
                async with anyio.create_task_group() as background:

                    async def open_in_background(url: str) -> bool:
                        async def walk() -> None:
                            walks.append(await browser.walk(url))

                        background.start_soon(walk)
                        return True

                    async with ElicitingClient(
                        Http(f"{server}/mcp", bearer_token=token), handler, opener=open_in_background
                    ) as client:
                        first = await client.call_tool("example_profile", {})
                        second = await client.call_tool("example_profile", {"field": "login"})
    assert text(first) == "Alice Liddell (Example account alice)"
    assert text(second) == "alice (Example account alice)"
    assert len(handler.asked) == 1, "the second call found the token in the vault and asked nothing"
    [walked] = walks
    assert walked.steps[-1] == "the server's page says 'Done'"


async def test_inbox_lists_the_question_a_client_without_forms_could_not_show(tmp_path: Path) -> None:
    alice = Credentials("alice", secrets.token_urlsafe(12), "Alice Liddell")
    with http_example("inbox_fallback.py", tmp_path, alice, free_port()) as server:
        token = await sign_in_as(alice, server, f"{server}/mcp", log=tmp_path / "inbox_fallback.py.log")

        async def call() -> str | None:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
                Client(streamable_http_client(f"{server}/mcp", http_client=http), mode="legacy") as client,
            ):
                result = await client.call_tool("order_supplies", {"item": "toner"})
            return page_url(result) if result.is_error else text(result)

        with anyio.fail_after(TIMEOUT):
            url = await call()
            assert url is not None and url.startswith(f"{server}/elicit/")
            async with httpx2.AsyncClient(timeout=30) as browser:
                form = await browser.get(f"{server}/signin", params={"next": "/inbox"})
                signed_in = await browser.post(
                    f"{server}/signin",
                    data={
                        "username": "alice",
                        "password": alice.password,
                        "next": "/inbox",
                        "csrf": hidden(form.text, "csrf"),
                    },
                )
                assert signed_in.status_code == 303, signed_in.text
                inbox = await browser.get(f"{server}/inbox")
                assert inbox.status_code == 200
                assert "How many toner should I order?" in inbox.text
                assert url.removeprefix(server) in inbox.text
                page = await browser.get(url)
                done = await submit(browser, url, page.text, "accept", quantity="3", urgent="true")
                assert done.status_code == 200 and "Done" in done.text, done.text
                emptied = await browser.get(f"{server}/inbox")
                assert "How many toner should I order?" not in emptied.text
            assert await call() == "ordered 3 x toner, arriving tomorrow"


async def test_long_pause_runs_as_a_task(tmp_path: Path) -> None:
    env = environment(tmp_path)
    handler = ScriptedHandler(
        [{"match": "Approve 1200 EUR for conference?", "reply": "accept", "content": {"approve": True, "note": "go"}}]
    )
    server = Stdio(sys.executable, [str(EXAMPLES / "long_pause_task.py")], env=env, cwd=tmp_path)
    with anyio.fail_after(TIMEOUT):
        async with ElicitingClient(server, handler, era="2026-07-28", tasks=True) as client:
            result = await client.call_tool("approve_expense", {"amount": 1200, "reason": "conference"})
    assert text(result) == "approved 1200 EUR: go"
    listed = cli("decisions", "ls", "--json", store=env["MCP_ELICIT_STORE"])
    assert listed.returncode == 0, listed.stderr
    [decision] = json.loads(listed.stdout)
    assert (decision["status"], decision["task"]) == ("accepted", "completed"), decision
    assert decision["key"] == "approval", decision


async def test_release_approvers_runs_what_two_release_managers_approved_never_the_requesters_own(
    tmp_path: Path,
) -> None:
    alice, bob, carol = (Credentials(who, secrets.token_urlsafe(12), who.title()) for who in ("alice", "bob", "carol"))
    roles = {"MCP_ELICIT_APPROVER_ROLES": "release-managers=bob,carol"}
    with http_example("release_approvers.py", tmp_path, alice, free_port(), bob, carol, **roles) as server:
        log = tmp_path / "release_approvers.py.log"
        token = await sign_in_as(alice, server, f"{server}/mcp", log=log)
        results: list[str] = []

        async def release() -> None:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
                Client(streamable_http_client(f"{server}/mcp", http_client=http), mode="legacy") as client,
            ):
                result = await client.call_tool("release", {"service": "api", "version": "2.4.0"})
            results.extend(block.text for block in result.content)  # type: ignore[union-attr]

        async def sign_in(browser: httpx2.AsyncClient, user: Credentials) -> None:
            form = await browser.get(f"{server}/signin", params={"next": "/inbox"})
            fields = {"username": user.username, "password": user.password, "next": "/inbox"}
            done = await browser.post(f"{server}/signin", data={**fields, "csrf": hidden(form.text, "csrf")})
            assert done.status_code == 303, done.text

        async def approve(browser: httpx2.AsyncClient, canary: str) -> tuple[str, str]:
            while "/elicit/" not in (inbox := (await browser.get(f"{server}/inbox")).text):
                await anyio.sleep(0.1)
            url = server + "/elicit/" + inbox.split("/elicit/", 1)[1].split('"', 1)[0]
            page = await browser.get(url)
            assert "Release to production?" in page.text
            done = await submit(browser, url, page.text, "approve", canary_percent=canary)
            assert done.status_code == 200, done.text
            return url, done.text

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                group.start_soon(release)
                async with (
                    httpx2.AsyncClient(timeout=30) as requester,
                    httpx2.AsyncClient(timeout=30) as first,
                    httpx2.AsyncClient(timeout=30) as second,
                ):
                    for browser, user in ((requester, alice), (first, bob), (second, carol)):
                        await sign_in(browser, user)
                    while (
                        "Waiting for approval by release-managers (0 of 2)"
                        not in (await requester.get(f"{server}/inbox")).text
                    ):
                        await anyio.sleep(0.1)
                    url, recorded = await approve(first, "5")
                    assert "1 of 2" in recorded
                    refused = await requester.get(url)
                    assert refused.status_code == 403 and "another person must approve it" in refused.text
                    assert "runs with canary_percent 5 (changed from 10)" in (await approve(second, "5"))[1]
    assert results == [
        "The approvers changed the arguments before approving (canary_percent: 10 → 5); the tool ran with the changes.",
        "api 2.4.0 released to 5% of traffic",
    ]
