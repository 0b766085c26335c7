"""The client kit against real servers: the kit test server on loopback HTTP and as a stdio subprocess, the
reference server (`mcp-elicit serve`) as a stdio subprocess, both protocol eras.

URL-mode URLs point at a page server of the test's own that counts every request, so "nothing touched the
URL before consent" is a count, and the only client of that page server is the opener. A flow is finished
the way the page's callback would finish it: transitions on the server's store by the decision's owner.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import CallToolResult, ElicitRequestURLParams, TextContent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from mcp_elicit.client import (
    Accept,
    Asker,
    Cancel,
    Consent,
    Decline,
    ElicitingClient,
    FlowStatus,
    FormReply,
    FormRequest,
    Http,
    Pacing,
    PendingFlow,
    PendingFlows,
    ScriptedHandler,
    ServerSilent,
    Stdio,
    StillWaiting,
    Timeouts,
    TooManyRounds,
    UrlFlowStopped,
    UrlReply,
    UrlRequest,
    UrlStillRequired,
)
from mcp_elicit.client.handler import Mode
from mcp_elicit.client.session import Era, kit_http_client
from mcp_elicit.model import Decision, DecisionStatus, Operator, Principal
from mcp_elicit.server import Elicitation, waiting
from mcp_elicit.store import DecisionConflict, Store, open_store
from tests.helpers.http_harness import free_port, serving
from tests.helpers.server import NAME, VERSION, Options, build

pytestmark = pytest.mark.anyio
ERAS = ["2025-11-25", "2026-07-28"]
FORM_ERAS = ["2025-06-18", *ERAS]
"""2025-06-18 has form mode only: it runs wherever no URL is asked."""
LOOPBACK = Principal("loopback-dev", "loopback")
LOCAL = Principal("local-user", "stdio")
ROOT = Path(__file__).resolve().parents[2]
KIT_TOOLS = ("flow", "kit")
"""The test server's `Flow` tools, and the two plain tools the kit's tests need."""
TITLE = "Kit Test Server"


def text(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


@dataclass
class Pages:
    """The page server URL-mode URLs point at: it only counts."""

    base: str
    hits: list[str] = field(default_factory=list)


@pytest.fixture
def pages() -> Iterator[Pages]:
    port = free_port()
    seen = Pages(f"http://127.0.0.1:{port}")

    async def page(request: Request) -> PlainTextResponse:
        seen.hits.append(request.url.path)
        return PlainTextResponse("the decision page")

    with serving(Starlette(routes=[Route("/elicit/{id}", page)]), port):
        yield seen


@dataclass
class Served:
    runtime: Elicitation
    server: MCPServer
    url: str

    @property
    def store(self) -> Store:
        return self.runtime.store


@pytest.fixture
def served(sqlite_url: str, tmp_path: Path, pages: Pages) -> Iterator[Served]:
    runtime, server = build(
        Options(
            sqlite_url,
            tools=KIT_TOOLS,
            title=TITLE,
            effects=tmp_path / "effects.json",
            public_base_url=pages.base,
            long_poll=0.1,
        )
    )
    port = free_port()
    try:
        with serving(server.streamable_http_app(host="127.0.0.1"), port) as base:
            yield Served(runtime, server, f"{base}/mcp")
    finally:
        runtime.close()


def stdio_kit_server(tmp_path: Path, pages: Pages) -> Stdio:
    return Stdio(
        command=sys.executable,
        args=["-m", "tests.helpers.server", "serve", "--tools", ",".join(KIT_TOOLS),
              "--store", f"sqlite://{tmp_path / 'stdio.db'}", "--effects", str(tmp_path / "stdio-effects.json"),
              "--public-base-url", pages.base, "--long-poll", "0.2", "--title", TITLE],
        cwd=ROOT,
    )  # fmt: skip


def url_decision(store: Store) -> Decision:
    [decision] = [d for d in store.list_decisions(Operator()) if d.url is not None]
    return decision


def finish_flow(store: Store, owner: Principal) -> None:
    """What the decision page's callback does once the person is done, racing the server's own writes."""
    steps = {
        DecisionStatus.REQUESTED: DecisionStatus.ACCEPTED_URL,
        DecisionStatus.ACCEPTED_URL: DecisionStatus.EXTERNAL_PENDING,
        DecisionStatus.EXTERNAL_PENDING: DecisionStatus.EXTERNAL_COMPLETED,
    }
    while (decision := url_decision(store)).status in steps:
        try:
            store.transition(decision, steps[decision.status], caller=owner, reason="the page's callback")
        except DecisionConflict:
            continue


def finish_after_consent(store: Store, owner: Principal, server_records_consent: bool) -> None:
    """The person finishes on the page; where the server records the consent itself, only once it has."""
    deadline = time.monotonic() + 20
    while server_records_consent and url_decision(store).status is DecisionStatus.REQUESTED:
        if time.monotonic() > deadline:
            raise TimeoutError("the server never recorded the consent")
        time.sleep(0.02)
    finish_flow(store, owner)


class Browser:
    """The opener: a GET on the page (as a browser would); with a store, the person then finishes the flow."""

    def __init__(self, finish: Store | None = None, owner: Principal = LOOPBACK, server_records_consent: bool = True):
        self.opened: list[str] = []
        self._finish = finish
        self._owner = owner
        self._server_records_consent = server_records_consent

    async def __call__(self, url: str) -> bool:
        async with httpx2.AsyncClient(timeout=10) as http:
            await http.get(url)
        self.opened.append(url)
        if self._finish is not None:
            finishing = (self._finish, self._owner, self._server_records_consent)
            threading.Thread(target=finish_after_consent, args=finishing, daemon=True).start()
        return True


class Person:
    """A handler with fixed replies that notes what it was shown and what the page server had seen by then."""

    def __init__(
        self,
        form: FormReply | None = None,
        url: UrlReply | None = None,
        modes: tuple[Mode, ...] = ("form", "url"),
        pages: Pages | None = None,
    ) -> None:
        self._form, self._url, self._pages = form or Cancel(), url or Cancel(), pages
        self.modes = frozenset(modes)
        self.asked: list[FormRequest | UrlRequest] = []
        self.hits_when_asked: list[int] = []

    async def form(self, request: FormRequest) -> FormReply:
        self.asked.append(request)
        return self._form

    async def url(self, request: UrlRequest) -> UrlReply:
        self.asked.append(request)
        self.hits_when_asked.append(len(self._pages.hits) if self._pages else 0)
        return self._url


async def wait_for(predicate: object, seconds: float = 20) -> None:
    with anyio.fail_after(seconds):
        while not predicate():  # type: ignore[operator]
            await anyio.sleep(0.02)


def flow_of(pending: PendingFlows, elicitation_id: str) -> PendingFlow:
    """The newest flow a server asked under `elicitation_id` (flows have kit ids of their own)."""
    [*_, flow] = [flow for flow in pending.list() if flow.elicitation_id == elicitation_id]
    return flow


def flow_status(pending: PendingFlows, elicitation_id: str) -> FlowStatus | None:
    flows = [flow for flow in pending.list() if flow.elicitation_id == elicitation_id]
    return flows[-1].status if flows else None


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- what gets declared --------------------------------------------------------------------------


@pytest.mark.parametrize("era", FORM_ERAS)
@pytest.mark.parametrize(
    ("modes", "declared"),
    [(("form",), {"form": {}}), (("url",), {"url": {}}), (("form", "url"), {"form": {}, "url": {}}), ((), None)],
)
async def test_the_server_sees_exactly_the_declared_modes(
    served: Served, era: Era, modes: tuple[Mode, ...], declared: dict[str, object] | None
) -> None:
    async with ElicitingClient(Http(served.url), ScriptedHandler([], modes=modes), era=era) as client:
        seen = json.loads(text(await client.call_tool("capabilities", {})))
        assert client.protocol_version == era
        assert client.asker == Asker(NAME, VERSION, TITLE, endpoint=served.url)
    if era == "2025-06-18":  # no URL mode there: form only is declared
        declared = {"form": {}} if "form" in modes else None
    assert seen.get("elicitation") == declared


@pytest.mark.parametrize("era", FORM_ERAS)
async def test_a_stdio_server_sees_the_declared_modes_too(tmp_path: Path, pages: Pages, era: Era) -> None:
    handler = ScriptedHandler([], modes=("form",))
    async with ElicitingClient(stdio_kit_server(tmp_path, pages), handler, era=era) as client:
        seen = json.loads(text(await client.call_tool("capabilities", {})))
    assert seen["elicitation"] == {"form": {}}


@pytest.mark.parametrize("era", FORM_ERAS)
async def test_a_form_only_client_is_never_sent_a_url_question(served: Served, era: Era) -> None:
    person = Person(url=Consent(), modes=("form",))
    browser = Browser()
    async with ElicitingClient(Http(served.url), person, era=era, opener=browser) as client:
        try:
            result = await client.call_tool("connect", {})
        except MCPError as refused:
            assert refused.code == -32021 and "url" in json.dumps(refused.error.data)
        else:
            assert result.is_error and "url elicitation" in result.content[0].text  # type: ignore[union-attr]
        approved = await client.call_tool("approve", {"scope": "docs"})
    assert person.asked and all(isinstance(asked, FormRequest) for asked in person.asked)
    assert text(approved) == "cancelled"
    assert browser.opened == []
    assert url_decision(served.store).status is DecisionStatus.REQUESTED


@pytest.mark.parametrize("era", FORM_ERAS)
async def test_a_url_only_client_gets_no_form_and_a_client_with_no_modes_gets_nothing(served: Served, era: Era) -> None:
    url_only = Person(form=Accept({"approve": True}), modes=("url",))
    async with ElicitingClient(Http(served.url), url_only, era=era) as client:
        try:
            result = await client.call_tool("approve", {"scope": "prod"})
        except MCPError as refused:
            assert refused.code == -32021
        else:
            assert result.is_error
    assert url_only.asked == []
    nobody = ScriptedHandler([{"reply": "accept", "content": {"seats": 2}}], modes=())
    async with ElicitingClient(Http(served.url), nobody, era=era) as client:
        fell_back = await client.call_tool(
            "book_with_fallback", {"city": "Oslo", "elicit_answers": {"seats": {"seats": 3}}}
        )
    assert text(fell_back) == "booked 3 to Oslo"
    assert nobody.asked == []


# -- decisions travel as given ---------------------------------------------------------------------


@pytest.mark.parametrize("era", FORM_ERAS)
async def test_decline_and_cancel_stay_distinct_through_the_reference_stdio_server(tmp_path: Path, era: Era) -> None:
    store_url = f"sqlite://{tmp_path / 'served.db'}"
    server = Stdio(
        command=sys.executable,
        args=["-m", "mcp_elicit", "serve", "--store", store_url, "--workspace", str(tmp_path / "ws")],
    )
    handler = ScriptedHandler(
        [{"match": "Rotate keys", "reply": "decline"}, {"match": "Renew certs", "reply": "cancel"}], modes=("form",)
    )
    async with ElicitingClient(server, handler, era=era) as client:
        declined = await client.call_tool("create_ticket", {"title": "Rotate keys"})
        cancelled = await client.call_tool("create_ticket", {"title": "Renew certs"})
    assert text(declined) == "No ticket created (declined)."
    assert text(cancelled) == "No ticket created (cancelled)."
    assert [asked.asker.tool for asked in handler.asked] == ["create_ticket", "create_ticket"]
    assert handler.asked[0].asker.server_name == "mcp-elicit-reference"
    store = open_store(store_url)
    try:
        by_message = {d.message: d.status for d in store.list_decisions(Operator())}
    finally:
        store.close()
    assert by_message == {
        "Which priority for the ticket 'Rotate keys'?": DecisionStatus.DECLINED,
        "Which priority for the ticket 'Renew certs'?": DecisionStatus.CANCELLED,
    }


# -- URL mode: consent, opening, pending flows -----------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_the_url_is_untouched_until_consent_then_opened_once(served: Served, pages: Pages, era: Era) -> None:
    person = Person(url=Consent(), pages=pages)
    browser = Browser(finish=served.store)
    changes: list[PendingFlow] = []
    pending = PendingFlows(on_change=changes.append)
    async with ElicitingClient(Http(served.url), person, era=era, opener=browser, pending=pending) as client:
        result = await client.call_tool("connect", {})
        final = FlowStatus.COMPLETED if era == "2025-11-25" else FlowStatus.ENDED
        await wait_for(lambda: changes[-1].status is final)
    assert text(result) == "connected"
    decision = url_decision(served.store)
    assert person.hits_when_asked == [0]
    assert pages.hits == [f"/elicit/{decision.elicitation_id}"]
    assert browser.opened == [decision.url]
    [asked] = person.asked
    assert isinstance(asked, UrlRequest)
    assert asked.review.url == decision.url and asked.review.may_open
    assert asked.asker == Asker(NAME, VERSION, TITLE, tool="connect", endpoint=served.url)
    assert asked.elicitation_id == (decision.elicitation_id if era == "2025-11-25" else None)
    assert [change.status for change in changes][:2] == [FlowStatus.AWAITING_CONSENT, FlowStatus.OPEN]
    assert decision.status is DecisionStatus.EXTERNAL_COMPLETED


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("reply", "said", "status"), [
    (Decline(), "declined", DecisionStatus.DECLINED),
    (Cancel(), "cancelled", DecisionStatus.CANCELLED),
])  # fmt: skip
async def test_refused_consent_opens_nothing_and_reaches_the_server_as_given(
    served: Served, pages: Pages, era: Era, reply: UrlReply, said: str, status: DecisionStatus
) -> None:
    browser = Browser()
    pending = PendingFlows()
    async with ElicitingClient(Http(served.url), Person(url=reply), era=era, opener=browser, pending=pending) as client:
        result = await client.call_tool("connect", {})
    assert text(result) == said
    assert browser.opened == [] and pages.hits == []
    assert url_decision(served.store).status is status
    [flow] = pending.list()
    assert flow.status == (FlowStatus.DECLINED if said == "declined" else FlowStatus.CANCELLED)


async def test_32042_flow_completes_on_the_notification_and_the_call_is_retried(served: Served, pages: Pages) -> None:
    changes: list[PendingFlow] = []
    pending = PendingFlows(on_change=changes.append)
    browser = Browser(finish=served.store, server_records_consent=False)
    async with ElicitingClient(
        Http(served.url), Person(url=Consent(), pages=pages), era="2025-11-25", opener=browser, pending=pending
    ) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("connect_later", {})
    assert text(result) == "connected"
    decision = url_decision(served.store)
    assert [(c.status, c.elicitation_id) for c in changes] == [
        (FlowStatus.AWAITING_CONSENT, decision.elicitation_id),
        (FlowStatus.OPEN, decision.elicitation_id),
        (FlowStatus.COMPLETED, decision.elicitation_id),
    ]
    assert changes[-1].reason == "the server sent notifications/elicitation/complete"
    assert len(pages.hits) == 1


def flow_server(pages: Pages) -> tuple[MCPServer, dict[str, int]]:
    """A server that answers -32042 until told the flow is done, and never sends a completion notice."""
    server = MCPServer("flow-without-notices", version="1.0")
    state = {"calls": 0, "done": 0}

    @server.tool()
    async def link_account() -> str:
        state["calls"] += 1
        if not state["done"]:
            url = f"{pages.base}/elicit/link-1"
            raise UrlElicitationRequiredError(
                [ElicitRequestURLParams(message="Link it", url=url, elicitation_id="link-1")]
            )
        return "linked"

    return server, state


async def test_32042_without_a_notification_waits_for_the_hosts_retry_now(pages: Pages) -> None:
    server, state = flow_server(pages)
    pending = PendingFlows()
    async with ElicitingClient(
        server, Person(url=Consent()), era="2025-11-25", opener=Browser(), pending=pending
    ) as client:
        results: list[CallToolResult] = []
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _append(results, client.call_tool("link_account", {})))
            await wait_for(lambda: flow_status(pending, "link-1") is FlowStatus.OPEN)
            await anyio.sleep(0.5)
            assert state["calls"] == 1
            state["done"] = 1
            assert pending.retry_now(flow_of(pending, "link-1").id)
    assert text(results[0]) == "linked"
    assert state["calls"] == 2
    assert flow_of(pending, "link-1").status is FlowStatus.ENDED
    assert pages.hits == ["/elicit/link-1"]


async def _append(results: list[CallToolResult], call: object) -> None:
    results.append(await call)  # type: ignore[misc]


async def test_32042_flow_cancelled_by_the_host_stops_the_call(pages: Pages) -> None:
    server, state = flow_server(pages)
    pending = PendingFlows()
    async with (
        ElicitingClient(server, Person(url=Consent()), era="2025-11-25", opener=Browser(), pending=pending) as client,
        anyio.create_task_group() as group,
    ):

        async def cancel_when_open() -> None:
            await wait_for(lambda: flow_status(pending, "link-1") is FlowStatus.OPEN)
            assert pending.cancel(flow_of(pending, "link-1").id, "the person gave up")

        group.start_soon(cancel_when_open)
        with pytest.raises(UrlFlowStopped) as stopped:
            await client.call_tool("link_account", {})
    assert stopped.value.flow.status is FlowStatus.CANCELLED
    assert stopped.value.flow.reason == "the person gave up"
    assert state["calls"] == 1
    assert not pending.cancel(stopped.value.flow.id)


async def test_32042_declined_consent_stops_the_call_without_a_retry(pages: Pages) -> None:
    server, state = flow_server(pages)
    async with ElicitingClient(server, Person(url=Decline()), era="2025-11-25", opener=Browser()) as client:
        with pytest.raises(UrlFlowStopped) as stopped:
            await client.call_tool("link_account", {})
    assert stopped.value.flow.status is FlowStatus.DECLINED
    assert state["calls"] == 1 and pages.hits == []


async def test_modern_rounds_are_paced_for_a_person(served: Served) -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 6:
            await anyio.to_thread.run_sync(finish_flow, served.store, LOOPBACK)

    async with ElicitingClient(
        Http(served.url), Person(url=Consent()), era="2026-07-28", opener=Browser(), sleep=sleep
    ) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("connect", {})
    assert text(result) == "connected"
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


async def test_modern_retry_now_runs_the_next_round_at_once(served: Served) -> None:
    pending = PendingFlows()
    pacing_started = anyio.Event()

    async def sleep(seconds: float) -> None:
        pacing_started.set()
        await anyio.sleep(seconds)

    async with ElicitingClient(
        Http(served.url), Person(url=Consent()), era="2026-07-28", opener=Browser(), pending=pending,
        pacing=Pacing(first=600, cap=600), sleep=sleep,
    ) as client:  # fmt: skip
        results: list[CallToolResult] = []
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: _append(results, client.call_tool("connect", {})))
                await pacing_started.wait()
                [flow] = pending.list()
                await anyio.to_thread.run_sync(finish_flow, served.store, LOOPBACK)
                assert pending.retry_now(flow.id)
    assert text(results[0]) == "connected"
    assert flow.input_key == "connect_account" and flow.elicitation_id is None


async def test_modern_flow_cancelled_by_the_host_stops_the_rounds(served: Served) -> None:
    pending = PendingFlows()
    async with (
        ElicitingClient(
            Http(served.url), Person(url=Consent()), era="2026-07-28", opener=Browser(), pending=pending
        ) as client,
        anyio.create_task_group() as group,
    ):

        def consent_recorded() -> bool:
            decisions = [d for d in served.store.list_decisions(Operator()) if d.url is not None]
            return bool(decisions) and decisions[0].status is DecisionStatus.ACCEPTED_URL

        async def cancel_when_open() -> None:
            await wait_for(lambda: any(f.status is FlowStatus.OPEN for f in pending.list()))
            # The flow opens as the consent goes out: cancel once the server has it, which it must keep.
            await wait_for(consent_recorded)
            assert pending.cancel(pending.list()[0].id)

        group.start_soon(cancel_when_open)
        with pytest.raises(UrlFlowStopped) as stopped:
            await client.call_tool("connect", {})
    assert stopped.value.flow.status is FlowStatus.CANCELLED
    assert url_decision(served.store).status is DecisionStatus.ACCEPTED_URL


async def test_legacy_retry_now_reissues_the_call_the_server_holds_and_it_completes(
    served: Served, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow completes where the instance holding the call cannot hear of it: through another store
    handle (no wake-up) while that instance polls only hourly, and so no notification comes. The person's
    "I'm done" re-issues the call, which the server attaches to the same operation."""
    monkeypatch.setattr(waiting, "FIRST_POLL", 3600.0)
    monkeypatch.setattr(waiting, "LONGEST_POLL", 3600.0)
    sent: list[dict[str, Any]] = []

    async def record(request: httpx2.Request) -> None:
        body = await request.aread()
        if body:
            sent.append(json.loads(body))

    pending = PendingFlows()
    elsewhere = open_store(sqlite_url)
    results: list[CallToolResult] = []
    try:
        async with kit_http_client() as http:
            http.event_hooks = {"request": [record]}
            async with ElicitingClient(
                Http(served.url, http_client=http),
                Person(url=Consent()),
                era="2025-11-25",
                opener=Browser(),
                pending=pending,
            ) as client:
                with anyio.fail_after(30):
                    async with anyio.create_task_group() as group:
                        group.start_soon(lambda: _append(results, client.call_tool("connect", {})))
                        await wait_for(lambda: any(f.status is FlowStatus.OPEN for f in pending.list()))
                        [flow] = pending.list()
                        await anyio.to_thread.run_sync(finish_after_consent, elsewhere, LOOPBACK, True)
                        await anyio.sleep(1.0)
                        assert results == []
                        assert pending.retry_now(flow.id)
    finally:
        elsewhere.close()
    assert text(results[0]) == "connected"
    calls = [body for body in sent if body.get("method") == "tools/call"]
    assert len(calls) == 2 and calls[0]["id"] != calls[1]["id"]
    # The same request again; each carries its own trace context when a tracer is installed in the process
    # (another test of this worker may have installed one), which is no part of what the call asks.
    assert untraced(calls[0]["params"]) == untraced(calls[1]["params"])
    cancelled = [body["params"]["requestId"] for body in sent if body.get("method") == "notifications/cancelled"]
    assert cancelled == [calls[0]["id"]]
    assert not pending.get(flow.id).status.active
    assert url_decision(served.store).status is DecisionStatus.EXTERNAL_COMPLETED  # one decision: one operation


def stuck_server(pages: Pages) -> tuple[MCPServer, dict[str, int]]:
    """Answers -32042 for `link-1` until `succeed_on` calls, even once the flow was completed (it does not
    see the completion it asked for); `complete_link` sends the completion notification."""
    server = MCPServer("stuck", version="1.0")
    state = {"calls": 0, "succeed_on": 99}

    @server.tool()
    async def link_account() -> str:
        state["calls"] += 1
        if state["calls"] >= state["succeed_on"]:
            return "linked"
        url = f"{pages.base}/elicit/link-1"
        raise UrlElicitationRequiredError([ElicitRequestURLParams(message="Link it", url=url, elicitation_id="link-1")])

    @server.tool()
    async def complete_link(ctx: Context) -> str:
        await ctx.session.send_elicit_complete("link-1")
        return "sent"

    return server, state


@pytest.mark.parametrize("host", ["retries", "cancels", "waits"])
async def test_32042_asked_again_for_a_completed_flow_stays_in_the_hosts_hands(pages: Pages, host: str) -> None:
    server, state = stuck_server(pages)
    pending = PendingFlows()
    clock = FakeMonotonic()

    async def sleep(seconds: float) -> None:
        await anyio.sleep(min(seconds, 0.05))

    outcome: list[object] = []
    async with ElicitingClient(
        server, Person(url=Consent()), era="2025-11-25", opener=Browser(), pending=pending,
        pacing=Pacing(max_wait=60), clock=clock, sleep=sleep,
    ) as client:  # fmt: skip

        async def call() -> None:
            try:
                outcome.append(text(await client.call_tool("link_account", {})))
            except (UrlFlowStopped, UrlStillRequired) as stopped:
                outcome.append(stopped)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await wait_for(lambda: flow_status(pending, "link-1") is FlowStatus.OPEN)
                assert text(await client.call_tool("complete_link", {})) == "sent"
                await wait_for(lambda: state["calls"] == 2)
                await anyio.sleep(0.3)
                [flow] = pending.list()
                assert flow.status is FlowStatus.COMPLETED and outcome == []
                if host == "retries":
                    state["succeed_on"] = 3
                    assert pending.retry_now(flow.id)
                elif host == "cancels":
                    assert pending.cancel(flow.id, "the host gave up")
                else:
                    clock.advance(61)
    [result] = outcome
    if host == "retries":
        assert result == "linked" and state["calls"] == 3
    elif host == "cancels":
        assert isinstance(result, UrlFlowStopped) and result.reason == "the host gave up"
        assert result.flow.status is FlowStatus.COMPLETED
    else:
        assert isinstance(result, UrlStillRequired) and [f.id for f in result.flows] == [flow.id]
    assert pending.get(flow.id).status is FlowStatus.COMPLETED and pages.hits == ["/elicit/link-1"]
    assert not pending.retry_now(flow.id) and not pending.cancel(flow.id)


async def test_a_server_that_keeps_answering_32042_stops_at_the_round_limit(pages: Pages) -> None:
    server = MCPServer("spinning")
    state = {"calls": 0}

    @server.tool()
    async def link_account() -> str:
        state["calls"] += 1
        number = state["calls"]
        url = f"{pages.base}/elicit/link-{number}"
        raise UrlElicitationRequiredError(
            [ElicitRequestURLParams(message="Link it", url=url, elicitation_id=f"link-{number}")]
        )

    pending = PendingFlows()
    async with (
        ElicitingClient(
            server, Person(url=Consent()), era="2025-11-25", opener=Browser(), pending=pending,
            pacing=Pacing(max_input_rounds=3),
        ) as client,
        anyio.create_task_group() as group,
    ):  # fmt: skip

        async def person_says_done_each_time() -> None:
            done: set[str] = set()
            while True:
                for flow in pending.list(active=True):
                    if flow.id not in done and flow.status is FlowStatus.OPEN and pending.retry_now(flow.id):
                        done.add(flow.id)
                await anyio.sleep(0.01)

        group.start_soon(person_says_done_each_time)
        with anyio.fail_after(20), pytest.raises(TooManyRounds):
            await client.call_tool("link_account", {})
        group.cancel_scope.cancel()
    assert state["calls"] == 4


async def test_a_server_that_never_finishes_connecting_is_given_up() -> None:
    mute = Stdio(sys.executable, ["-c", "import time; time.sleep(60)"])
    with anyio.fail_after(30), pytest.raises(ServerSilent) as silent:
        async with ElicitingClient(mute, ScriptedHandler([]), era="2025-11-25", timeouts=Timeouts(connect=0.5)):
            pass
    assert silent.value.connecting and "connecting" in str(silent.value)


async def test_a_given_http_client_with_a_read_timeout_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mcp_elicit.client.config"):
        async with httpx2.AsyncClient(timeout=30) as timed, kit_http_client() as untimed:
            ElicitingClient(Http("http://127.0.0.1:9/mcp", http_client=timed), ScriptedHandler([]))
            ElicitingClient(Http("http://127.0.0.1:9/mcp", http_client=untimed), ScriptedHandler([]))
    [warning] = [record.getMessage() for record in caplog.records]
    assert "read timeout of 30 s" in warning


async def test_modern_polling_stops_at_the_deadline(served: Served) -> None:
    clock = FakeMonotonic()
    pending = PendingFlows()

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    async with ElicitingClient(
        Http(served.url), Person(url=Consent()), era="2026-07-28", opener=Browser(), pending=pending,
        pacing=Pacing(max_wait=10), clock=clock, sleep=sleep,
    ) as client:  # fmt: skip
        with pytest.raises(StillWaiting):
            await client.call_tool("connect", {})
    [flow] = pending.list()
    assert flow.status is FlowStatus.FAILED


# -- nothing cuts a call while a person decides ------------------------------------------------------


class SlowPerson:
    """Takes `minutes` to decide, on the kit's clock (fake) or for real (`real_seconds`)."""

    modes: frozenset[Mode] = frozenset({"form", "url"})

    def __init__(self, clock: FakeMonotonic | None = None, minutes: float = 0, real_seconds: float = 0) -> None:
        self._clock, self._minutes, self._real = clock, minutes, real_seconds
        self.decided_while_a_call_waited = False
        self.another_call_waits: Callable[[], bool] = lambda: False

    async def form(self, request: FormRequest) -> FormReply:
        if self._clock is not None:
            self._clock.advance(self._minutes * 60)
        await anyio.sleep(self._real)
        self.decided_while_a_call_waited = self.another_call_waits()
        return Accept({"approve": True})

    async def url(self, request: UrlRequest) -> UrlReply:
        return Cancel()


@pytest.mark.parametrize("era", FORM_ERAS)
async def test_a_person_answering_after_five_minutes_still_completes(served: Served, era: Era) -> None:
    """While the person decides, another call waits on a server that sends nothing: the watch runs and
    must count neither call's time against the server."""
    clock = FakeMonotonic()
    person = SlowPerson(clock, minutes=5, real_seconds=0.5)
    results: dict[str, str] = {}
    person.another_call_waits = lambda: "silent" not in results
    async with ElicitingClient(Http(served.url), person, era=era, clock=clock, timeouts=Timeouts(request=1)) as client:

        async def quiet_call() -> None:
            results["silent"] = text(await client.call_tool("silent", {"seconds": 3}))

        async with anyio.create_task_group() as group:
            group.start_soon(quiet_call)
            await anyio.sleep(0.1)
            results["approve"] = text(await client.call_tool("approve", {"scope": "prod"}))
            assert person.decided_while_a_call_waited
    assert results == {"approve": "applied prod", "silent": "slept 3.0"}


async def test_a_legacy_call_held_while_the_person_is_in_the_browser_is_not_cut(served: Served) -> None:
    clock = FakeMonotonic()
    pending = PendingFlows()
    results: list[CallToolResult] = []
    async with ElicitingClient(
        Http(served.url), Person(url=Consent()), era="2025-11-25", opener=Browser(), pending=pending,
        timeouts=Timeouts(request=1), clock=clock,
    ) as client:  # fmt: skip
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: _append(results, client.call_tool("connect", {})))
                await wait_for(lambda: any(f.status is FlowStatus.OPEN for f in pending.list()))
                clock.advance(600)
                await anyio.sleep(0.6)
                await anyio.to_thread.run_sync(finish_after_consent, served.store, LOOPBACK, True)
    assert text(results[0]) == "connected"


@pytest.mark.parametrize("era", FORM_ERAS)
async def test_a_silent_server_is_cut_on_the_same_clock(served: Served, era: Era) -> None:
    clock = FakeMonotonic()
    async with (
        ElicitingClient(Http(served.url), SlowPerson(), era=era, clock=clock, timeouts=Timeouts(request=1)) as client,
        anyio.create_task_group() as group,
    ):

        async def time_passes() -> None:
            await anyio.sleep(0.3)
            clock.advance(2)

        group.start_soon(time_passes)
        with anyio.fail_after(10), pytest.raises(ServerSilent):
            await client.call_tool("silent", {"seconds": 15})


async def test_over_stdio_a_slow_person_is_waited_for_and_a_silent_server_is_not(tmp_path: Path, pages: Pages) -> None:
    server = stdio_kit_server(tmp_path, pages)
    async with ElicitingClient(
        server, SlowPerson(real_seconds=2.0), era="2025-11-25", timeouts=Timeouts(request=0.5)
    ) as client:
        assert text(await client.call_tool("approve", {"scope": "prod"})) == "applied prod"
        with anyio.fail_after(10), pytest.raises(ServerSilent):
            await client.call_tool("silent", {"seconds": 5})


async def test_the_kits_own_http_client_has_no_read_timeout_but_sends_the_bearer_token() -> None:
    async with kit_http_client(bearer_token="token-alice") as http:
        assert http.timeout.read is None
        assert http.timeout.connect == 30.0
        assert http.headers["Authorization"] == "Bearer token-alice"


def untraced(params: dict[str, Any]) -> dict[str, Any]:
    meta = {key: value for key, value in params.get("_meta", {}).items() if key not in ("traceparent", "tracestate")}
    return {**{key: value for key, value in params.items() if key != "_meta"}, **({"_meta": meta} if meta else {})}
