"""Every code block of README.md and of the pages of docs/ runs as written, or is marked `<!-- fragment -->` on
the line before it.

Complete Python blocks run for real in a subprocess: a server block is started and a real client (the SDK's, or
the client kit) lists its tools and answers what they ask; a plain program runs against a store the test
prepared. Complete shell blocks run line by line with a fresh shell whose PATH lacks the virtual environment,
JSON blocks are host configurations whose server is started and listed, TOML blocks are the gateway's
configuration files, read by its parser, and the deployment guide's files
(included from docs/config/) are checked by the programs that read them. Fragments are only syntax-checked,
and continue a complete example of their page: a page whose first block is a fragment fails. The same program
shown on two pages runs once.
"""

from __future__ import annotations

import ast
import base64
import inspect
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_elicit.client import ElicitingClient, ScriptedHandler, Stdio
from mcp_elicit.gateway.config import parse_config
from mcp_elicit.model import Operator, Principal
from mcp_elicit.reference.demo_stack import (
    Credentials,
    DemoStack,
    sign_in,
    sign_in_as,
    start_logged,
    stop_all,
    wait_listening,
)
from mcp_elicit.server.notifications import DecisionLinks, LinkCheck, WebhookSecret, verify
from mcp_elicit.server.tasks.state import task_status
from mcp_elicit.store import open_store
from mcp_elicit.web import Vault, VaultKeyRing
from tests.helpers.balancer import HAPROXY, RECIPE, USER, Tls, haproxy_config, make_tls, shared_settings
from tests.helpers.environment import IN_CI
from tests.helpers.http_harness import free_port, wait_for_port
from tests.helpers.mailbox import HOST as MAIL_HOST
from tests.helpers.mailbox import mailbox
from tests.helpers.person import Person, accept
from tests.helpers.receiver import Receiver
from tests.helpers.results import text

NOTIFY_PUBLIC = "https://elicit.example"
"""The public URL the notification examples are given: their links point there, and are checked, not opened."""
ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
REFERENCE = DOCS / "reference"
"""API reference pages: docstrings rendered by mkdocstrings, no examples of their own."""
VENV = Path(sys.executable).parent.parent
COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))
FRAGMENT = "<!-- fragment -->"
TIMEOUT = 60
NGINX = "/usr/sbin/nginx"
_OPENING = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
_INCLUDED = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')
"""A block whose body is this one line shows a file of the repository (pymdownx.snippets, from the root)."""


@dataclass(frozen=True, slots=True)
class Block:
    document: str
    line: int
    lang: str
    code: str
    fragment: bool
    source: str | None = None
    """The repository file the block shows, when it includes one."""

    def __str__(self) -> str:
        return f"{self.document}:{self.line} ({self.lang or 'no language'})"


def blocks(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    name = document.relative_to(ROOT).as_posix()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _OPENING.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, start = opening["indent"], index
        index += 1
        body: list[str] = []
        while lines[index].strip() != "```":
            assert index + 1 < len(lines), f"{name}:{start + 1}: the code block is never closed"
            body.append(lines[index].removeprefix(indent))
            index += 1
        fragment = start > 0 and lines[start - 1].strip() == FRAGMENT
        included = _INCLUDED.match(body[0].strip()) if len(body) == 1 else None
        if included is None:
            found.append(Block(name, start + 1, opening["lang"], "\n".join(body) + "\n", fragment))
        else:
            source = included["path"]
            found.append(Block(name, start + 1, opening["lang"], (ROOT / source).read_text(), fragment, source))
        index += 1
    return found


ALL = [block for page in PAGES for block in blocks(page)]
EXAMPLES_RUN = (ROOT / "tests" / "system" / "test_examples.py").read_text()
"""What runs the examples a page includes whole: an included example must be named there."""


def once(found: Iterable[Block]) -> list[Block]:
    """Each program once, at its first place: the same example on two pages is one test."""
    seen: dict[tuple[str, str], Block] = {}
    for block in found:
        seen.setdefault((block.lang, block.code), block)
    return list(seen.values())


def complete(lang: str) -> list[Block]:
    return once(block for block in ALL if block.lang == lang and not block.fragment and block.source is None)


def test_the_pages_have_blocks_of_each_kind() -> None:
    assert len(complete("python")) >= 2 and complete("sh") and len(complete("json")) >= 2
    assert any(block.fragment for block in ALL)
    # An included file is run where it is the subject: the deployment's files below, the examples by
    # tests/system/test_examples.py.
    included = {block.source for block in ALL if block.source}
    assert {Path(source).name for source in included if not source.startswith("examples/")} == {
        path.name for path in CONFIGURATIONS
    }
    assert all((ROOT / source).is_file() for source in included)


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", [page for page in PAGES if REFERENCE not in page.parents], ids=page_id)
def test_a_page_opens_with_a_complete_example(page: Path) -> None:
    """A fragment continues an example of its page, so none comes first (a page may show no code at all)."""
    found = blocks(page)
    assert not found or not found[0].fragment, f"{found[0]} is the page's first block: open with a complete one"


def test_the_readme_starts_with_a_short_quick_start() -> None:
    """A newcomer meets a complete, short program on the first screen, and a README they can read at once."""
    first = next(block for block in blocks(README) if block.lang == "python")
    assert not first.fragment and first.line <= 80, first
    assert len(first.code.splitlines()) <= 16, f"{first}: {len(first.code.splitlines())} lines"
    assert len(README.read_bytes()) < 10_000


@pytest.mark.parametrize("block", [b for b in ALL if b.fragment], ids=str)
def test_fragment_parses(block: Block) -> None:
    parses(block)


@pytest.mark.parametrize("block", blocks(CONTRIBUTING), ids=str)
def test_the_contributing_page_shows_commands_that_parse(block: Block) -> None:
    """Its blocks run the suite itself, so they are shown, not run: each is a marked fragment that parses."""
    assert block.fragment, f"{block}: mark it {FRAGMENT}"
    parses(block)


def parses(block: Block) -> None:
    if block.lang == "python":
        compile(block.code, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    elif block.lang == "sh":
        checked = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True, check=False)
        assert checked.returncode == 0, f"{block}: {checked.stderr}"
    elif block.lang == "json":
        json.loads(block.code)
    elif block.lang == "toml":
        tomllib.loads(block.code)


@pytest.mark.parametrize("block", [b for b in ALL if not b.fragment], ids=str)
def test_unmarked_blocks_are_of_a_kind_the_test_runs(block: Block) -> None:
    if block.source is None:
        runnable = block.lang in ("python", "sh", "json", "toml")
    else:
        runnable = block.source in CHECKS or Path(block.source).name in EXAMPLES_RUN
    assert runnable, f"{block} is not run: mark it {FRAGMENT} or make it runnable"


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    return {**env, "MCP_ELICIT_STORE": f"sqlite://{tmp_path / 'readme.db'}", "XDG_DATA_HOME": str(tmp_path), **extra}


def b64_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


# -- complete Python blocks: each is recognized by what it defines, and run accordingly -------------------


async def run_stdio_server(path: Path, tmp_path: Path) -> None:
    """The tool-author example: started as written, its tool asked and answered on both eras."""
    env = environment(tmp_path, MCP_ELICIT_STATE_KEYS=f"{b64_key()},{b64_key()}")
    for era in ("legacy", "2026-07-28"):
        person = Person([accept(approve=True)])
        parameters = StdioServerParameters(command=sys.executable, args=[str(path)], env=env, cwd=str(tmp_path))
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters, mode=era, elicitation_callback=person) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert tools == {"deploy"}, tools
                result = await client.call_tool("deploy", {"service": f"payments-{era}"})
        assert text(result) == "deployed"
        [question] = person.asked
        assert question.message == f"Deploy payments-{era} 2.4.0 to production (2 file changes)?"
        declined = Person([accept(approve=False)])
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters, mode=era, elicitation_callback=declined) as client:
                result = await client.call_tool("deploy", {"service": f"billing-{era}"})
        assert text(result) == "nothing changed"


async def run_fastmcp_server(path: Path, tmp_path: Path) -> None:
    """The FastMCP example: started over stdio as written, its flow tool asked and answered on both eras."""
    env = environment(tmp_path, MCP_ELICIT_STATE_KEYS=b64_key())
    for era in ("legacy", "2026-07-28"):
        person = Person([accept(confirm=True)])
        parameters = StdioServerParameters(command=sys.executable, args=[str(path)], env=env, cwd=str(tmp_path))
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters, mode=era, elicitation_callback=person) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert tools == {"rollback", "status"}, tools
                result = await client.call_tool("rollback", {"service": f"web-{era}"})
        assert text(result) == f"rolled back to web-{era} 2.3.9"
        [question] = person.asked
        assert question.message == f"Roll web-{era} back to web-{era} 2.3.9?"


def run_reseal(path: Path, tmp_path: Path) -> None:
    """The vault re-seal: an entry sealed under the old key comes out under the new one."""
    env = environment(tmp_path)
    old, new = f"old:{b64_key()}", f"new:{b64_key()}"
    alice = Principal("alice", "client-a")
    store = open_store(env["MCP_ELICIT_STORE"])
    try:
        Vault(store, VaultKeyRing.from_text(old)).put(alice, "github", "s3cret-token")
    finally:
        store.close()
    ran = subprocess.run(
        [sys.executable, str(path)],
        env={**env, "MCP_ELICIT_VAULT_KEYS": f"{new},{old}"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "re-sealed 1 entries; the older keys can go\n"
    store = open_store(env["MCP_ELICIT_STORE"])
    try:
        assert Vault(store, VaultKeyRing.from_text(new)).get(alice, "github") == "s3cret-token"
    finally:
        store.close()


async def run_http_server(path: Path, tmp_path: Path) -> None:
    """The sign-in example: served over HTTP on a free port, a user signs in, a real client calls and answers."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    alice = Credentials("alice", secrets.token_urlsafe(12), "Alice Liddell")
    env = environment(
        tmp_path,
        PORT=str(port),
        PUBLIC_URL=public,
        MCP_ELICIT_USERS=f"{alice.username}:{alice.password}:{alice.display_name}",
        MCP_ELICIT_STATE_KEYS=b64_key(),
        MCP_ELICIT_AUTH_KEYS=f"{b64_key()},{b64_key()}",
    )
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, str(path)], env=env, cwd=tmp_path, stdout=sink, stderr=sink)
    try:
        wait_for_port(port, process, timeout=TIMEOUT)
        stack = DemoStack(public, public, env["MCP_ELICIT_STORE"], tmp_path, alice, alice, log, log)
        with anyio.fail_after(TIMEOUT):
            token = await sign_in(stack)
        for era in ("legacy", "2026-07-28"):
            person = Person([accept(value="db")])
            with anyio.fail_after(TIMEOUT):
                async with (
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
                    Client(
                        streamable_http_client(f"{public}/mcp", http_client=http), mode=era, elicitation_callback=person
                    ) as client,
                ):
                    tools = {tool.name for tool in (await client.list_tools()).tools}
                    assert tools == {"page_oncall"}, tools
                    result = await client.call_tool("page_oncall", {"incident": f"disk-full-{era}"})
            assert text(result) == f"{public}#alice paged db about disk-full-{era}"
            [question] = person.asked
            assert question.message == f"Which team gets disk-full-{era}?"
        async with httpx2.AsyncClient(timeout=10) as http:
            refused = await http.post(f"{public}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode in (0, -15), log.read_text()


def run_plugin_tests(path: Path, tmp_path: Path) -> None:
    """The testing example: a test module run by pytest as written, the plugin loaded by its entry point."""
    module = tmp_path / "test_readme_example.py"
    module.write_text(path.read_text())
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-W", "error", module.name],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 3,
        check=False,
    )
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    summary = ran.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"=+ \d+ passed in [\d.]+s =+", summary), summary
    for era in ("2025-06-18", "2025-11-25", "2026-07-28"):
        assert f"[{era}] PASSED" in ran.stdout, f"nothing ran on {era}:\n{ran.stdout}"


async def run_quickstart(path: Path, tmp_path: Path) -> None:
    """The quick start: started over stdio as written, its tool called twice on both eras and asked once; the
    decisions land in the embedded store's default file, which `mcp-elicit decisions` reads too."""
    env = environment(tmp_path)
    del env["MCP_ELICIT_STORE"]
    for era in ("legacy", "2026-07-28"):
        person = Person([accept(value=True)])
        parameters = StdioServerParameters(command=sys.executable, args=[str(path)], env=env, cwd=str(tmp_path))
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters, mode=era, elicitation_callback=person) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert tools == {"deploy"}, tools
                first = await client.call_tool("deploy", {"service": f"payments-{era}"})
                again = await client.call_tool("deploy", {"service": f"payments-{era}"})
        assert text(first) == text(again) == f"payments-{era} deployed"
        [question] = person.asked
        assert question.message == f"Deploy payments-{era} to production?"
    store = open_store(f"sqlite://{tmp_path / 'mcp-elicit' / 'elicit.db'}")
    try:
        assert [decision.status for decision in store.list_decisions(Operator())] == ["accepted", "accepted"]
    finally:
        store.close()


def run_client_program(path: Path, tmp_path: Path) -> None:
    """The client kit example: run as written, it starts the reference server over stdio and its own handler
    answers the question the tool asks."""
    ran = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=environment(tmp_path, PATH=f"{VENV / 'bin'}:/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    asked, result = ran.stdout.splitlines()
    assert asked.endswith(" asks, for create_ticket: Which priority for the ticket 'Printer on fire'?"), asked
    assert re.fullmatch(r"Created ticket \S+ \(high\): Printer on fire", result), result


async def run_task_server(path: Path, tmp_path: Path) -> None:
    """The tasks example: served over stdio as written, its tool called by the client kit asking for a task, on
    both eras that have tasks; each call runs as a task to its end, its question asked once."""
    for era in ("2025-11-25", "2026-07-28"):
        handler = ScriptedHandler([{"match": "Deploy", "reply": "accept", "content": {"approve": True}}])
        with anyio.fail_after(TIMEOUT):
            async with ElicitingClient(
                Stdio(sys.executable, [str(path)], cwd=tmp_path), handler, era=era, tasks=True
            ) as client:
                await client.list_tools()  # on 2025-11-25 the kit asks for a task for a tool listed as taking one
                result = await client.call_tool("deploy", {"service": f"payments-{era}"})
        assert text(result) == f"payments-{era} deployed"
        assert [request.message for request in handler.asked] == [f"Deploy payments-{era}?"]
    store = open_store(f"sqlite://{tmp_path / 'tasks.db'}")
    try:
        decisions = store.list_decisions(Operator())
        assert [task_status(store, decision.operation_id, Operator()) for decision in decisions] == ["completed"] * 2
    finally:
        store.close()


async def notify_and_answer(
    path: Path, tmp_path: Path, page_key: bytes, arrived: Callable[[], Awaitable[object]], **env: str
) -> None:
    """A notification example started over stdio as written, its question answered yes, held open until what it
    sends has `arrived` (its deliverer runs in the server's lifespan)."""
    environ = environment(tmp_path, PUBLIC_URL=NOTIFY_PUBLIC, PAGE_KEY=page_key.hex(), **env)
    parameters = StdioServerParameters(command=sys.executable, args=[str(path)], env=environ, cwd=str(tmp_path))
    with anyio.fail_after(TIMEOUT):
        async with Client(parameters, mode="legacy", elicitation_callback=Person([accept(value=True)])) as client:
            assert text(await client.call_tool("deploy", {"service": "payments"})) == "deployed"
            await arrived()


def valid_link(link: str, page_key: bytes) -> str:
    """The decision id of a link the pages given `page_key` accept."""
    parts = urlsplit(link)
    decision_id = parts.path.removeprefix("/elicit/")
    assert f"{parts.scheme}://{parts.netloc}/elicit/{decision_id}" == f"{NOTIFY_PUBLIC}/elicit/{decision_id}", link
    checked = DecisionLinks(NOTIFY_PUBLIC, page_key).check(decision_id, dict(parse_qsl(parts.query)), datetime.now(UTC))
    assert checked is LinkCheck.VALID, link
    return decision_id


async def run_standard_notifier(path: Path, tmp_path: Path) -> None:
    """The Standard Webhooks example: both events arrive signed with the example's secret, the waiting one with
    the summary and a link the pages accept."""
    page_key, secret = secrets.token_bytes(32), "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    with Receiver() as receiver:
        await notify_and_answer(
            path, tmp_path, page_key, lambda: receiver.until(2), WEBHOOK_URL=receiver.url, WEBHOOK_SECRET=secret
        )
    events = receiver.by_event()
    assert set(events) == {"decision.waiting", "decision.ended"}
    for posted in events.values():
        verify(WebhookSecret(secret), posted.headers, posted.body)
    data = events["decision.waiting"].json["data"]
    assert (data["target"], data["about"]) == ("deploy", 'deploy(service="payments")')
    assert valid_link(data["link"], page_key) == data["elicitation_id"]
    assert events["decision.ended"].json["data"]["status"] == "accepted"


async def run_slack_notifier(path: Path, tmp_path: Path) -> None:
    """The Slack example: one message, for the waiting decision only, with the summary and a button the pages
    accept."""
    page_key = secrets.token_bytes(32)
    with Receiver() as receiver:
        await notify_and_answer(path, tmp_path, page_key, lambda: receiver.until(1), SLACK_WEBHOOK_URL=receiver.url)
        await anyio.sleep(1.5)  # a poll and more: an ended event would have come by now
    [posted] = receiver.posted()
    message = posted.json
    assert message["text"].startswith("deploy is waiting for a decision (until ")
    fields = [field["text"] for field in message["blocks"][1]["fields"]]
    assert fields[:2] == ["*Tool*\ndeploy", '*Call*\n`deploy(service="payments")`']
    [actions] = [block for block in message["blocks"] if block["type"] == "actions"]
    [button] = actions["elements"]
    valid_link(button["url"], page_key)


async def run_mail_notifier(path: Path, tmp_path: Path) -> None:
    """The mail example: STARTTLS to aiosmtpd with a certificate of the test's own CA (trusted through
    SSL_CERT_FILE, as the page says), a login, one message to on-call with a link the pages accept."""
    page_key, password = secrets.token_bytes(32), secrets.token_urlsafe(12)
    tls = make_tls(tmp_path / "tls")
    with mailbox(starttls=tls, login=("elicit", password)) as box:

        async def arrived() -> None:
            while not box.messages():
                await anyio.sleep(0.05)

        await notify_and_answer(
            path, tmp_path, page_key, arrived, SMTP_HOST=MAIL_HOST, SMTP_PORT=str(box.port), SMTP_PASSWORD=password,
            SSL_CERT_FILE=str(tls.ca),
        )  # fmt: skip
    [taken] = box.messages()
    assert (taken.sender, taken.recipients, taken.login) == ("elicit@example.com", ["oncall@example.com"], "elicit")
    message = taken.message
    assert message["Subject"].startswith("deploy is waiting for a decision (until ")
    body = message.get_body(("plain",))
    assert body is not None
    [link] = [line.split()[1] for line in body.get_content().splitlines() if line.startswith("Open:")]
    valid_link(link, page_key)


RUNNERS: dict[str, Callable[[Path, Path], Any]] = {
    "Elicitation(request_state=RequestState(single_process=True))": run_quickstart,
    'key="approve_production"': run_stdio_server,
    "Vault(store, ring).rotate()": run_reseal,
    "async def page_oncall(flow: Flow": run_http_server,
    "from mcp_elicit.testing import": run_plugin_tests,
    "FastMCPFlows(": run_fastmcp_server,
    "async with ElicitingClient(": run_client_program,
    "task=TaskPolicy.OPTIONAL": run_task_server,
    'secret=os.environ["WEBHOOK_SECRET"]': run_standard_notifier,
    'format="slack"': run_slack_notifier,
    "Mail(": run_mail_notifier,
}


@pytest.mark.parametrize("block", complete("python"), ids=str)
def test_complete_python_block_runs(block: Block, tmp_path: Path) -> None:
    compile(block.code, str(block), "exec", dont_inherit=True)
    runners = [runner for marker, runner in RUNNERS.items() if marker in block.code]
    assert len(runners) == 1, f"{block}: no runner recognizes this block; add one to RUNNERS or mark it {FRAGMENT}"
    path = tmp_path / "block.py"
    path.write_text(block.code)
    runner = runners[0]
    if inspect.iscoroutinefunction(runner):
        anyio.run(runner, path, tmp_path)
    else:
        runner(path, tmp_path)


# -- complete shell blocks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block", complete("sh"), ids=str)
def test_complete_shell_block_runs(block: Block, tmp_path: Path) -> None:
    """Run from a directory holding `.venv`, with a PATH that does not hold it: the block must find the command."""
    (tmp_path / ".venv").symlink_to(VENV, target_is_directory=True)
    env = environment(tmp_path, PATH="/usr/bin:/bin")
    env.pop("VIRTUAL_ENV", None)
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, f"{block} failed:\n{ran.stdout}\n{ran.stderr}"
    if "mcp-elicit --version" in block.code:
        assert f"mcp-elicit {version('mcp-elicit')}\n" in ran.stdout


# -- JSON blocks: host configurations ------------------------------------------------------------------


def configured_servers(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    servers: dict[str, dict[str, Any]] = config.get("mcpServers") or config.get("servers") or {}
    return servers


@pytest.mark.anyio
@pytest.mark.parametrize("block", complete("json"), ids=str)
async def test_host_configuration_starts_the_server(block: Block, tmp_path: Path) -> None:
    servers = configured_servers(json.loads(block.code))
    assert servers, f"{block} configures no server"
    for name, entry in servers.items():
        assert entry.get("type", "stdio") == "stdio", f"{block}: {name} is not a stdio server"
        assert Path(entry["command"]).name == "mcp-elicit", f"{block}: {name} does not run mcp-elicit"
        configured_env: dict[str, str] = entry.get("env", {})
        assert set(configured_env) <= {"MCP_ELICIT_STORE"}, configured_env
        args = [*entry["args"]]
        workspace = ["--workspace", str(tmp_path / "workspace")]
        if args[0] == "gateway":
            # The server a gateway relays is mcp-elicit's own: the placeholder path in its command line becomes
            # this environment's command too, and the workspace is the server's.
            at = args.index("--upstream") + 1
            program, *rest = shlex.split(args[at])
            assert Path(program).name == "mcp-elicit", f"{block}: {name} relays something other than mcp-elicit"
            args[at] = shlex.join([COMMAND, *rest, *workspace])
        else:
            args += workspace
        # The placeholder path, resolved to this environment's command.
        parameters = StdioServerParameters(command=COMMAND, args=args, env=environment(tmp_path))
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"deploy", "procure", "delete_files", "create_ticket"} <= tools


# -- TOML blocks: the gateway's configuration files --------------------------------------------------------


@pytest.mark.parametrize("block", complete("toml"), ids=str)
def test_a_gateway_configuration_is_accepted_by_the_gateway(block: Block, tmp_path: Path) -> None:
    """Read as `mcp-elicit gateway --config` reads it, from a directory that holds the directories it names."""
    for table in tomllib.loads(block.code).get("upstream", []):
        if "cwd" in table:
            (tmp_path / table["cwd"]).mkdir(parents=True, exist_ok=True)
    config = parse_config(block.code, tmp_path / "gateway.toml")
    assert config.upstreams or config.gate, f"{block} names no upstream and no gate"
    for index, gate in enumerate(config.gate):  # as the gateway assigns them (a gates-only file: --upstream's)
        names = [upstream.name for upstream in config.upstreams] or [gate.upstream or "--upstream"]
        assert gate.upstream is None or gate.upstream in names, f"{block}: gate[{index}] names no upstream of it"


# -- the deployment guide's files, checked by the programs that read them -----------------------------------


def require(program: str | None, package: str) -> str:
    """The program's path; Debian's package is mandatory under CI=true (.ci/run installs it), else skip."""
    if program is not None and Path(program).is_file():
        return program
    missing = f"{package} is not installed (Debian package {package})"
    if IN_CI:
        pytest.fail(f"{missing}; .ci/run installs it (mandatory under CI=true)")
    pytest.skip(missing)


def checked(command: list[str], block: Block) -> None:
    """The program accepts the file, and says nothing about it (a warning is a finding too)."""
    ran = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert ran.returncode == 0 and not ran.stdout.strip() and not ran.stderr.strip(), (
        f"{block.source}: {' '.join(command)} said:\n{ran.stdout}{ran.stderr}"
    )


def with_certificate(block: Block, tls: Tls) -> str:
    site, replaced = re.subn(r"(ssl_certificate(?:_key)?\s+)\S+;", rf"\g<1>{tls.chain};", block.code)
    assert replaced == 2, f"{block.source}: expected ssl_certificate and ssl_certificate_key"
    return site


def nginx_main(tmp_path: Path, site: str, *, serving: bool = False) -> Path:
    """A main configuration around the site: everything nginx writes stays in `tmp_path`."""
    (tmp_path / "site.conf").write_text(site)
    main = tmp_path / "nginx.conf"
    foreground = "daemon off;\nmaster_process off;\n" if serving else ""
    main.write_text(
        f"{foreground}pid {tmp_path}/nginx.pid;\nerror_log stderr;\nevents {{}}\nhttp {{\n    access_log off;\n"
        f"    client_body_temp_path {tmp_path}/body;\n    proxy_temp_path {tmp_path}/proxy;\n"
        f"    include {tmp_path}/site.conf;\n}}\n"
    )
    return main


def check_nginx(block: Block, tmp_path: Path) -> None:
    """`nginx -t` on the site, included in a minimal main configuration, its certificate paths made real."""
    nginx = require(shutil.which("nginx") or NGINX, "nginx")
    main = nginx_main(tmp_path, with_certificate(block, make_tls(tmp_path / "tls")))
    checked([nginx, "-t", "-q", "-p", str(tmp_path), "-e", "stderr", "-c", str(main)], block)


def check_haproxy(block: Block, tmp_path: Path) -> None:
    """`haproxy -c` on the file as shown, its certificate made real, and on what the balancer tests run from it."""
    haproxy = require(HAPROXY, "haproxy")
    tls = make_tls(tmp_path / "tls")
    shown, replaced = re.subn(r"(\bcrt\s+)\S+", rf"\g<1>{tls.chain}", block.code)
    assert replaced == 1, f"{block.source}: expected one TLS bind line"
    (tmp_path / "shown.cfg").write_text(shown)
    checked([haproxy, "-c", "-q", "-f", str(tmp_path / "shown.cfg")], block)
    tested = haproxy_config(free_port(), tls, [free_port(), free_port()], tmp_path / "stats.sock")
    (tmp_path / "tested.cfg").write_text(tested)
    checked([haproxy, "-c", "-q", "-f", str(tmp_path / "tested.cfg")], block)


def check_systemd_unit(block: Block, tmp_path: Path) -> None:
    """`systemd-analyze verify` on an instance of the template, its command this environment's `mcp-elicit`."""
    analyze = require(shutil.which("systemd-analyze"), "systemd")
    unit, replaced = re.subn(r"^ExecStart=\S+", f"ExecStart={COMMAND}", block.code, flags=re.MULTILINE)
    assert replaced == 1, f"{block.source}: expected one ExecStart= running mcp-elicit"
    name = Path(block.source or "").name
    (tmp_path / name).write_text(unit)
    checked([analyze, "verify", str(tmp_path / name.replace("@.", "@8001."))], block)


def check_postgresql_settings(block: Block, tmp_path: Path) -> None:
    """PostgreSQL's own parser reads the settings as a server starting would (`postgres -C`, which loads the
    configuration and refuses an unknown name or a bad value), without starting one or touching the machine's."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    postgres = require(str(versions[-1]) if versions else None, "postgresql")
    names = re.findall(r"^(\w+)\s*=", block.code, flags=re.MULTILINE)
    assert names, f"{block.source} sets nothing"
    with readable_by_postgres() as data:
        (data / "postgresql.conf").write_text(block.code)
        for name in names:
            command = [postgres, "-D", str(data), "-C", name]
            if os.geteuid() == 0:
                command = ["runuser", "-u", "postgres", "--", *command]
            ran = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
            assert ran.returncode == 0 and ran.stdout.strip(), f"{block.source}: {name}:\n{ran.stderr}"


@contextmanager
def readable_by_postgres() -> Iterator[Path]:
    """A directory the `postgres` user can read (pytest's own are its owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="mcp-elicit-pgconf-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_the_guides_nginx_site_serves_an_instance_over_tls(tmp_path: Path) -> None:
    """nginx runs the guide's site in front of a real `mcp-elicit serve --transport http` (only the ports and the
    certificate are this run's): a person signs in through it and an MCP client lists the tools, so the Host
    header, the forwarded requests and the public URL line up as the guide says."""
    nginx = require(shutil.which("nginx") or NGINX, "nginx")
    [block] = [b for b in ALL if b.source == "docs/config/nginx.conf"]
    front, port = free_port(), free_port()
    public = f"https://127.0.0.1:{front}"
    tls = make_tls(tmp_path / "tls")
    site = with_certificate(block, tls)
    for shown, here in (("listen 443 ssl;", f"listen 127.0.0.1:{front} ssl;"), (":8000;", f":{port};")):
        assert shown in site, f"{block.source}: expected {shown!r}"
        site = site.replace(shown, here)
    main = nginx_main(tmp_path, site, serving=True)
    env = {**environment(tmp_path), **shared_settings(None)}
    serve = [COMMAND, "serve", "--transport", "http", "--port", str(port), "--public-url", public,
             "--workspace", str(tmp_path / "workspace")]  # fmt: skip
    with ExitStack() as cleanup:
        started: list[subprocess.Popen[bytes]] = []
        cleanup.callback(stop_all, started)
        for command, listening, log in (
            (serve, port, tmp_path / "serve.log"),
            ([nginx, "-p", str(tmp_path), "-e", "stderr", "-c", str(main)], front, tmp_path / "nginx.log"),
        ):
            started.append(start_logged(cleanup, command, env, log))
            wait_listening(listening, started[-1], log, timeout=TIMEOUT)
        anyio.run(list_tools_through, public, tls, tmp_path / "serve.log")


async def list_tools_through(public: str, tls: Tls, log: Path) -> None:
    with anyio.fail_after(TIMEOUT):
        token = await sign_in_as(
            Credentials(*USER), public, f"{public}/mcp", log=log, verify=tls.context(), client_name="nginx"
        )
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(verify=tls.context(), headers=headers, timeout=30) as http,
            Client(streamable_http_client(f"{public}/mcp", http_client=http)) as client,
        ):
            tools = {tool.name for tool in (await client.list_tools()).tools}
    assert {"deploy", "create_ticket"} <= tools, tools


CONFIGURATIONS = sorted((DOCS / "config").iterdir())
CHECKS: dict[str, Callable[[Block, Path], None]] = {
    "docs/config/nginx.conf": check_nginx,
    "docs/config/haproxy.cfg": check_haproxy,
    "docs/config/mcp-elicit@.service": check_systemd_unit,
    "docs/config/postgresql.conf": check_postgresql_settings,
}


def test_the_balancer_tests_run_the_guides_haproxy_file() -> None:
    assert RECIPE == ROOT / "docs" / "config" / "haproxy.cfg" and RECIPE.relative_to(ROOT).as_posix() in CHECKS


@pytest.mark.parametrize("block", [b for b in ALL if b.source is not None and b.source in CHECKS], ids=str)
def test_deployment_file_is_accepted_by_its_program(block: Block, tmp_path: Path) -> None:
    assert not block.fragment, f"{block}: a file the guide shows is complete; do not mark it {FRAGMENT}"
    CHECKS[block.source or ""](block, tmp_path)
