"""`mcp_elicit.testing`: the pytest plugin as a user meets it, and the harness on this project's own tools.

The plugin tests (`pytester`) run an inner pytest session over a small app of their own, with the plugin
loaded by its entry point as a user's session loads it. The harness tests use the plugin here too: the
`elicit_app` fixture below is the test server's `flow` tools (`tests/helpers/server.py`) on both stores, and
each scripted outcome is checked against what the store recorded, on every era the outcome exists on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from importlib.metadata import entry_points
from pathlib import Path

import anyio
import pytest
from fastmcp import FastMCP
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field, field_validator

from mcp_elicit.client import ScriptError
from mcp_elicit.fastmcp import FastMCPFlows, in_process
from mcp_elicit.model import DecisionStatus
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.store import open_store
from mcp_elicit.testing import (
    ERAS,
    ControlledClock,
    EraName,
    Harness,
    Script,
    ScriptFailure,
    UnscriptedQuestion,
    UrlOutcome,
    accept,
    cancel,
    consent,
    decline,
)
from tests.helpers.server import Counter, flow_tools

pytest_plugins = ["pytester"]

URL_ERAS = pytest.mark.elicit_eras("2025-11-25", "2026-07-28")
"""2025-06-18 has no URL mode: the kit declares form mode only there."""
LEGACY_ERAS = pytest.mark.elicit_eras("2025-06-18", "2025-11-25")


# -- the plugin, as a user's pytest session loads it ---------------------------------------------------------

INNER_CONFTEST = """
import pytest
from pydantic import BaseModel, Field

from mcp_elicit.server import Accepted, Declined, Elicitation, Flow, RequestState


class Approval(BaseModel):
    approve: bool = Field(description="Deploy now")


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def elicit_app(elicit_store_url, elicit_clock):
    app = Elicitation(elicit_store_url, request_state=RequestState(single_process=True), clock=elicit_clock)
    app.server("inner")

    @app.tool()
    async def deploy(flow: Flow, service: str) -> str:
        plan = await flow.step("plan", lambda: f"{service} 1.2")
        answer = await flow.ask(f"Deploy {plan}?", Approval, key="approve")
        if isinstance(answer, Accepted) and answer.data.approve:
            note = await flow.ask("Release note?", str, key="note")
            return f"deployed {plan}" + (f": {note.data}" if isinstance(note, Accepted) else "")
        return "declined" if isinstance(answer, Declined) else "kept"

    yield app
    app.close()
"""

INNER_IMPORTS = """
import pytest

from mcp_elicit.testing import Harness, accept, decline
"""


INNER_OFF = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
"""Plugins an inner session goes without. Hypothesis's imports all of hypothesis at the session's end, with its
assertions rewritten (pytest rewrites every module of a plugin's package); pytester drops what an inner session
imported, so each inner session paid for that again, seconds each on a busy machine."""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    off = " ".join(INNER_OFF)
    pytester.makeini(f"[pytest]\naddopts = --strict-markers {off}\nfilterwarnings = error\n")
    pytester.makeconftest(INNER_CONFTEST)
    return pytester


def test_the_plugin_is_registered_by_its_entry_point() -> None:
    [plugin] = [point for point in entry_points(group="pytest11") if point.name == "mcp_elicit"]
    assert plugin.value == "mcp_elicit.testing.plugin"


def test_a_test_runs_once_per_era_with_its_answers_scripted_by_key(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        INNER_IMPORTS
        + """
@pytest.mark.anyio
async def test_deploy(elicit: Harness, elicit_era: str) -> None:
    called = await elicit.call(
        "deploy", {"service": "api"}, answers={"approve": accept(approve=True), "note": accept(value="ship")}
    )
    assert called.text == "deployed api 1.2: ship"
    assert called.era == elicit_era
    elicit.assert_asked_once("approve")
    elicit.assert_audit("note", ["requested", "accepted"])
    elicit.assert_journal(called, {"plan": "api 1.2"})
"""
    )
    result = inner.runpytest("-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_deploy?2025-06-18? PASSED*",
            "*test_deploy?2025-11-25? PASSED*",
            "*test_deploy?2026-07-28? PASSED*",
        ]
    )


def test_the_marker_narrows_the_eras_and_refuses_one_it_does_not_know(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_modern=INNER_IMPORTS
        + """
@pytest.mark.anyio
@pytest.mark.elicit_eras("2026-07-28")
async def test_modern_only(elicit: Harness) -> None:
    assert (await elicit.call("deploy", {"service": "api"}, answers={"approve": decline()})).text == "declined"
""",
        test_unknown=INNER_IMPORTS
        + """
@pytest.mark.elicit_eras("2025-11-25", "2024-11-05")
def test_unknown_era(elicit: Harness) -> None:
    pass
""",
    )
    result = inner.runpytest("-v", "test_modern.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_modern_only?2026-07-28? PASSED*"])
    result = inner.runpytest("test_unknown.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_unknown_era: @pytest.mark.elicit_eras(...) takes one or more distinct eras of 2025-06-18, "
            "2025-11-25, 2026-07-28; got '2025-11-25', '2024-11-05'"
        ]
    )


def test_a_test_parametrizing_the_era_itself_keeps_its_own_eras(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        INNER_IMPORTS
        + """
@pytest.mark.anyio
@pytest.mark.parametrize("elicit_era", ["2025-11-25"], indirect=True)
async def test_pinned(elicit: Harness) -> None:
    assert elicit.era == "2025-11-25"
"""
    )
    inner.runpytest().assert_outcomes(passed=1)


def test_an_unscripted_question_fails_the_test_naming_it(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        INNER_IMPORTS
        + """
@pytest.mark.anyio
@pytest.mark.elicit_eras("2025-11-25", "2026-07-28")
async def test_deploy(elicit: Harness) -> None:
    await elicit.call("deploy", {"service": "api"}, answers={"approve": accept(approve=True)})
"""
    )
    result = inner.runpytest()
    result.assert_outcomes(failed=2)
    for era in ("2025-11-25", "2026-07-28"):
        result.stdout.fnmatch_lines(
            [
                f"*UnscriptedQuestion: the tool 'deploy' asked 'Release note?' (key 'note', a form question, on {era}),"
                " which the script does not cover; it scripts 'approve'"
            ]
        )


def test_without_an_app_the_test_says_what_to_define(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        INNER_IMPORTS
        + """
def test_nothing(elicit: Harness) -> None:
    pass
"""
    )
    result = pytester.runpytest(*INNER_OFF)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*define a fixture named elicit_app that returns your Elicitation*"])


def test_a_lowlevel_server_is_called_through_the_elicit_server_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
from typing import Any

import pytest
from mcp.server import Server
from mcp_types import CallToolResult, ListToolsResult, TextContent, Tool

from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.testing import Harness, accept


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def elicit_app(elicit_store_url, elicit_clock):
    app = Elicitation(elicit_store_url, request_state=RequestState(single_process=True), clock=elicit_clock)
    yield app
    app.close()


@pytest.fixture
def elicit_server(elicit_app):
    async def list_tools(context: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="approve_low", input_schema={"type": "object"})])

    async def call_tool(context: Any, params: Any) -> Any:
        async def body(flow: Flow) -> CallToolResult:
            answer = await flow.ask("Approve?", bool, key="ok")
            verdict = "approved" if isinstance(answer, Accepted) and answer.data else "refused"
            return CallToolResult(content=[TextContent(type="text", text=verdict)])

        return await elicit_app.run_tool(context, params, body)

    server = Server("lowlevel", on_list_tools=list_tools, on_call_tool=call_tool)
    elicit_app.install(server)
    return server


@pytest.mark.anyio
async def test_lowlevel(elicit: Harness) -> None:
    called = await elicit.call("approve_low", {"ticket": 7}, answers={"ok": accept(value=True)})
    assert called.text == "approved"
    replayed = await elicit.call("approve_low", {"ticket": 7}, modes=())
    assert replayed.replayed and replayed.operation_id == called.operation_id
    refused = await elicit.call("approve_low", {"ticket": 8}, modes=(), era="2025-11-25")
    assert refused.result.is_error
    assert elicit.decisions("ok", call=refused)[0].status.value == "requested"
"""
    )
    pytester.runpytest(*INNER_OFF).assert_outcomes(passed=3)


FASTMCP_APP = """
import pytest
from fastmcp.exceptions import ToolError
from pydantic import BaseModel, Field

from mcp_elicit.fastmcp import FastMCPFlows, in_process
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.testing import Harness, accept


class Approval(BaseModel):
    approve: bool = Field(description="Deploy now")


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def served(elicit_store_url, elicit_clock):
    app = Elicitation(elicit_store_url, request_state=RequestState(single_process=True), clock=elicit_clock)
    flows = FastMCPFlows(app)
    server = flows.server("fast")

    @flows.tool()
    async def deploy(flow: Flow, service: str, region: str = "eu") -> str:
        answer = await flow.ask(f"Deploy {service} to {region}?", Approval, key="approve")
        return f"deployed {service} to {region}" if isinstance(answer, Accepted) and answer.data.approve else "kept"

    @flows.tool()
    async def audit(flow: Flow, service: str, depth: int = 2) -> str:
        found = await flow.step("scan", lambda: f"{service}: {depth} levels clean")
        if service == "broken":
            raise ToolError("the scanner refused " + service)
        return found

    yield app, server
    app.close()


@pytest.fixture
def elicit_app(served):
    return served[0]


@pytest.fixture
def elicit_server(served):
    return served[1]


@pytest.mark.anyio
async def test_fastmcp(elicit: Harness, elicit_era: str) -> None:
    called = await elicit.call("deploy", {"service": "api"}, answers={"approve": accept(approve=True)})
    assert called.text == "deployed api to eu"
    again = await elicit.call("deploy", {"service": "api"})
    assert again.replayed and again.operation_id == called.operation_id
    elicit.assert_asked_once("approve")
    elicit.assert_audit("approve", ["requested", "accepted"])
    quiet = await elicit.call("audit", {"service": "db"})  # asks nothing: found by its digest, defaults filled in
    assert quiet.text == "db: 2 levels clean" and not quiet.replayed
    elicit.assert_journal(quiet, {"scan": "db: 2 levels clean"})
    assert elicit.operation(quiet).status.value == "completed"
    failed = await elicit.call("audit", {"service": "broken", "depth": 1})
    assert failed.error == "the scanner refused broken" and elicit.operation(failed).status.value == "failed"
"""


def test_a_fastmcp_server_of_the_flows_is_called_through_the_elicit_server_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FASTMCP_APP)
    pytester.runpytest(*INNER_OFF).assert_outcomes(passed=len(ERAS))


def test_turning_the_plugin_off_removes_its_fixtures(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        """
def test_nothing(elicit):
    pass
"""
    )
    result = inner.runpytest("-p", "no:mcp_elicit")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'elicit' not found*"])


# -- the harness on this project's tools -------------------------------------------------------------------


@pytest.fixture
def counter(tmp_path: Path) -> Counter:
    return Counter(tmp_path / "effects.json")


@pytest.fixture
def elicit_app(store_url: str, elicit_clock: ControlledClock, counter: Counter) -> Iterator[Elicitation]:
    app = Elicitation(
        open_store(store_url, clock=elicit_clock),
        request_state=RequestState(single_process=True),
        clock=elicit_clock,
        public_base_url="https://tools.example",
    )
    app.server("harness-server")
    flow_tools(app, counter)
    yield app
    app.close()


@URL_ERAS
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("outcome", "result", "last"),
    [("completed", "connected", "external_completed"), ("failed", "failed", "external_failed")],
)
@pytest.mark.parametrize("tool", ["connect", "connect_later"])
async def test_a_consented_flow_ends_as_the_scripted_browser_ends_it(
    elicit: Harness, tool: str, outcome: UrlOutcome, result: str, last: str
) -> None:
    """`connect` holds the call while the flow runs; `connect_later` is answered -32042 on 2025-11-25."""
    called = await elicit.call(tool, answers={"connect_account": consent(outcome)})
    assert called.text == result
    trail = elicit.assert_audit("connect_account", ["requested", "accepted_url", "external_pending", last])
    assert [entry.actor for entry in trail[2:]] == ["browser:local-user", "browser:local-user"]
    [question] = called.asked
    assert (question.key, question.mode, question.tool) == ("connect_account", "url", tool)


@URL_ERAS
@pytest.mark.anyio
@pytest.mark.parametrize("tool", ["connect", "connect_later"])
async def test_an_abandoned_flow_expires_at_its_ttl(elicit: Harness, tool: str) -> None:
    before = elicit.clock()
    called = await elicit.call(tool, answers={"connect_account": consent("abandoned")})
    assert called.text == "expired"
    trail = elicit.assert_audit("connect_account", ["requested", "accepted_url", "external_pending", "expired"])
    assert trail[-1].actor == "system:clock"
    assert elicit.clock() - before >= timedelta(minutes=30)  # the URL TTL's default, run out on the harness clock


@URL_ERAS
@pytest.mark.anyio
async def test_a_declined_consent_never_opens_the_url(elicit: Harness) -> None:
    called = await elicit.call("connect", answers={"connect_account": decline()})
    assert called.text == "declined"
    elicit.assert_audit("connect_account", ["requested", "declined"])


@pytest.mark.anyio
async def test_an_answer_after_the_ttl_expires_the_question_and_the_next_call_asks_again(
    elicit: Harness, counter: Counter
) -> None:
    late = await elicit.call(
        "approve", {"scope": "prod"}, answers={"approve_scope": accept(approve=True).after(timedelta(minutes=16))}
    )
    assert late.text == "expired"
    elicit.assert_audit("approve_scope", ["requested", "expired"], call=late)
    again = await elicit.call("approve", {"scope": "prod"}, answers={"approve_scope": accept(approve=True)})
    assert again.text == "applied prod"
    assert again.operation_id != late.operation_id
    assert elicit.times_asked("approve_scope") == 2
    assert counter.read() == {"plan": 2, "apply": 1}


@pytest.mark.anyio
async def test_sequences_answer_in_turn_across_calls_and_running_out_fails(elicit: Harness) -> None:
    script = Script({"name": [accept(name="Ada"), accept(name="Grace")], "seats": accept(seats=2)})
    assert (await elicit.call("greet_and_book", answers=script)).text == "2 seats for Ada"
    elicit.clock.advance(timedelta(minutes=3))  # past the replay window: the same call acts afresh
    assert (await elicit.call("greet_and_book", answers=script)).text == "2 seats for Grace"
    elicit.clock.advance(timedelta(minutes=3))
    with pytest.raises(ScriptFailure, match="'name' was asked 3 times, and the script has 2 replies for it"):
        await elicit.call("greet_and_book", answers=script)
    assert elicit.times_asked("seats") == 2


@pytest.mark.anyio
async def test_an_unscripted_question_is_cancelled_never_answered(elicit: Harness) -> None:
    asked = f"'How many seats for Ada?' (key 'seats', a form question, on {elicit.era})"
    with pytest.raises(UnscriptedQuestion, match=re.escape(asked)):
        await elicit.call("greet_and_book", answers={"name": accept(name="Ada")})
    assert elicit.decision("seats").status is DecisionStatus.CANCELLED
    assert elicit.times_asked("seats") == 0


@pytest.mark.anyio
async def test_a_reply_that_does_not_fit_the_question_fails_saying_why(elicit: Harness) -> None:
    with pytest.raises(
        ScriptFailure, match=r"'approve_scope', a form question, with consent .*: consent\(\) answers URL"
    ):
        await elicit.call("approve", {"scope": "prod"}, answers={"approve_scope": consent()})
    with pytest.raises(
        ScriptFailure, match="the client kit refused the scripted answer to 'seats': seats: must be at least 1"
    ):
        await elicit.call("greet_and_book", answers={"name": accept(name="Ada"), "seats": accept(seats=0)})
    assert elicit.decision("seats").status is DecisionStatus.CANCELLED


@URL_ERAS
@pytest.mark.anyio
async def test_an_accept_for_a_url_question_fails(elicit: Harness) -> None:
    with pytest.raises(
        ScriptFailure, match=re.escape("'connect_account', a URL question, with accept: accept(...) answers form")
    ):
        await elicit.call("connect", answers={"connect_account": accept()})


@pytest.mark.elicit_eras("2026-07-28")  # the assertions read the store, which every era writes alike
@pytest.mark.anyio
async def test_the_assertions_say_what_the_store_recorded(elicit: Harness, counter: Counter) -> None:
    first = await elicit.call("approve", {"scope": "prod"}, answers={"approve_scope": accept(approve=True)})
    replayed = await elicit.call("approve", {"scope": "prod"})
    assert replayed.replayed and replayed.text == "applied prod" and replayed.operation_id == first.operation_id
    elicit.assert_asked_once("approve_scope")
    elicit.assert_journal(first, {"plan": "plan for prod"})
    assert elicit.operation(first).result == "applied prod"
    with pytest.raises(AssertionError, match="the step 'plan' journaled 'plan for prod', not 'other'"):
        elicit.assert_journal(first, {"plan": "other"})
    with pytest.raises(AssertionError, match="journaled 'plan'"):
        elicit.assert_not_journaled(first, "plan")
    with pytest.raises(
        AssertionError, match=r"is \['requested', 'accepted'\], not \['requested'\]:\n  - -> requested by"
    ):
        elicit.assert_audit("approve_scope", ["requested"])

    declined = await elicit.call("approve", {"scope": "staging"}, answers={"approve_scope": cancel()})
    assert declined.text == "cancelled"
    elicit.assert_not_journaled(declined, "apply")
    with pytest.raises(AssertionError, match="the step 'apply' of the call of 'approve' was never journaled"):
        elicit.journal(declined, "apply")
    with pytest.raises(AssertionError, match=f"'approve_scope' was asked 2 times \\(approve on {elicit.era}; approve"):
        elicit.assert_asked_once("approve_scope")
    assert [d.status for d in elicit.decisions("approve_scope")] == [DecisionStatus.CANCELLED, DecisionStatus.ACCEPTED]
    with pytest.raises(
        AssertionError, match="no question 'nothing' was recorded; the store holds \\['approve_scope'\\]"
    ):
        elicit.decision("nothing")
    assert counter.read() == {"plan": 2, "apply": 1}


@pytest.mark.elicit_eras("2026-07-28")  # a request's digest is the same on every era
@pytest.mark.anyio
async def test_a_call_that_asks_nothing_is_found_by_its_digest(elicit: Harness) -> None:
    first = await elicit.call("book_with_fallback", {"city": "Oslo"}, modes=())
    assert "elicit_answers" in first.error
    [waiting] = elicit.decisions(call=first)
    assert (waiting.key, waiting.status) == ("seats", DecisionStatus.REQUESTED)
    done = await elicit.call(
        "book_with_fallback", {"city": "Oslo", "elicit_answers": {"seats": {"seats": 2}}}, modes=()
    )
    assert done.text == "booked 2 to Oslo"
    assert done.operation_id == first.operation_id
    assert elicit.times_asked("seats") == 0
    with pytest.raises(AssertionError, match=r"the tool 'book_with_fallback' on .* succeeded: booked 2 to Oslo"):
        _ = done.error


@LEGACY_ERAS
@pytest.mark.anyio
async def test_a_sweep_expires_what_the_clock_left_overdue(elicit: Harness) -> None:
    refused = await elicit.call("approve", {"scope": "prod"}, modes=())
    assert "form elicitation" in refused.error
    assert elicit.decision("approve_scope").status is DecisionStatus.REQUESTED
    elicit.clock.advance(timedelta(minutes=16))
    swept = await elicit.sweep()
    assert swept.decisions == 1
    trail = elicit.assert_audit("approve_scope", ["requested", "expired"])
    assert trail[-1].actor == "system:clock"


@pytest.mark.elicit_eras("2026-07-28")
@pytest.mark.anyio
async def test_a_client_that_cannot_be_asked_gets_the_servers_error_as_raised(elicit: Harness) -> None:
    with pytest.raises(MCPError) as raised:
        await elicit.call("approve", {"scope": "prod"}, modes=())
    assert raised.value.error.code == -32021


# -- direct use, without the fixtures --------------------------------------------------------------------------


def test_the_clock_only_moves_forward() -> None:
    clock = ControlledClock()
    start = clock()
    moved = clock.advance(timedelta(hours=2))
    assert moved - start >= timedelta(hours=2) and clock.offset == timedelta(hours=2)
    assert clock.advance_to(start) <= clock()  # a moment past changes nothing
    assert clock.offset == timedelta(hours=2)
    assert clock.advance_to(moved + timedelta(days=1)) >= moved + timedelta(days=1)
    assert clock.offset > timedelta(days=1)
    with pytest.raises(ValueError, match="a clock only moves forward"):
        clock.advance(timedelta(seconds=-1))


def test_replies_and_scripts_refuse_what_cannot_be_an_answer() -> None:
    with pytest.raises(ScriptError, match="'content' must be an object of strings, finite numbers"):
        accept(ratio=float("nan"))
    with pytest.raises(TypeError, match="the script's entry for 'approve' must be a reply"):
        Script({"approve": "yes"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="non-empty sequence"):
        Script({"approve": []})
    with pytest.raises(ValueError, match="completed, failed or abandoned"):
        consent("done")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a delay of zero or more"):
        accept().after(timedelta(seconds=-1))
    assert str(accept({"the-field": "x"}, approve=True).after(timedelta(minutes=1))) == (
        "accept {'the-field': 'x', 'approve': True} after 0:01:00"
    )


class Codename(BaseModel):
    codename: str = Field(description="The release's codename")

    @field_validator("codename")
    @classmethod
    def not_taken(cls, value: str) -> str:
        if value == "taken":
            raise ValueError("that codename is taken")
        return value


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_the_tools_validators_refuse_takes_the_next_reply(tmp_path: Path, era: EraName) -> None:
    app = Elicitation(f"sqlite://{tmp_path / 'names.db'}", request_state=RequestState(single_process=True))
    app.server("names")

    @app.tool()
    async def name_release(flow: Flow) -> str:
        answer = await flow.ask("Codename?", Codename)
        return answer.data.codename if isinstance(answer, Accepted) else type(answer).__name__

    try:
        harness = Harness(app, era=era)
        replies = [accept(codename="taken"), accept(codename="kestrel")]
        assert (await harness.call("name_release", answers={"codename": replies})).text == "kestrel"
        assert harness.times_asked("codename") == 2
        harness.assert_audit("codename", ["requested", "accepted"])
        assert harness.decision("codename").content == {"codename": "kestrel"}
    finally:
        app.close()


@pytest.mark.anyio
async def test_a_harness_calls_only_a_fastmcp_of_its_apps_flows_and_says_what_to_pass(tmp_path: Path) -> None:
    app = Elicitation(f"sqlite://{tmp_path / 'fast.db'}", request_state=RequestState(single_process=True))
    other = Elicitation(f"sqlite://{tmp_path / 'other.db'}", request_state=RequestState(single_process=True))
    try:
        for foreign in (FastMCPFlows(other).server("elsewhere"), FastMCP("plain")):
            with pytest.raises(ValueError, match=r"was not built by FastMCPFlows\(elicitation\)\.server\(\.\.\.\)"):
                Harness(app, server=foreign)
        with pytest.raises(TypeError, match=r"or the FastMCP of FastMCPFlows\(app\)\.server\(\.\.\.\), not str"):
            Harness(app, server="http://127.0.0.1:8000/mcp")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"in_process takes a FastMCP built with FastMCPFlows"):
            in_process(Harness, app)  # type: ignore[arg-type]
        FastMCPFlows(app).server("fast")
        with pytest.raises(RuntimeError, match=r"pass the server to call .* the FastMCP of FastMCPFlows"):
            await Harness(app).call("deploy")
    finally:
        app.close()
        other.close()


@pytest.mark.anyio
async def test_an_app_on_the_wall_clock_and_a_stuck_call_fail_clearly(tmp_path: Path) -> None:
    app = Elicitation(f"sqlite://{tmp_path / 'wall.db'}", request_state=RequestState(single_process=True))
    app.server("wall-clock")

    @app.tool()
    async def stall(flow: Flow) -> str:
        await anyio.sleep(60)
        return "never"

    flow_tools(app, Counter(tmp_path / "effects.json"))
    try:
        harness = Harness(app, era="2025-11-25", timeout=30)
        with pytest.raises(RuntimeError, match="runs on the wall clock, which no test can move"):
            _ = harness.clock
        with pytest.raises(ScriptFailure, match="needs the app on a ControlledClock"):
            await harness.call("approve", {"scope": "prod"}, answers={"approve_scope": decline().after(timedelta(1))})
        with pytest.raises(AssertionError, match=r"the call of 'stall' on 2026-07-28 did not end within 0\.5 s"):
            await harness.call("stall", era="2026-07-28", timeout=0.5)
        with pytest.raises(ValueError, match="an era is one of 2025-06-18, 2025-11-25, 2026-07-28: got 'auto'"):
            await harness.call("stall", era="auto")  # type: ignore[arg-type]
    finally:
        app.close()
