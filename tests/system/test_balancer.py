"""Three `mcp-elicit serve --transport http` instances on one PostgreSQL store behind HAProxy (TLS, round-robin,
no affinity but a legacy session's own requests): every scenario completes, every effect happens once.

The MCP client is the client kit over HTTPS trusting only the run's CA; the person at the browser walks
the real pages through the balancer. HAProxy's log says which instance served each request, so the
tests check that the work really was spread, not only that it finished.
"""

from __future__ import annotations

import itertools
from collections import Counter as Tally
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psycopg
import pytest
from anyio.abc import TaskGroup
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, TextContent

from mcp_elicit.client import ElicitingClient, Era, Http, ScriptedHandler
from mcp_elicit.model import Decision, DecisionStatus, Operator
from mcp_elicit.reference.workspace import Workspace
from mcp_elicit.store import Store, open_store
from tests.helpers.balancer import (
    CLIENT_HEADER,
    Browser,
    Cluster,
    ClusterSpec,
    Routed,
    haproxy_missing,
    running_cluster,
    sign_in,
)
from tests.helpers.environment import IN_CI
from tests.helpers.person import Person

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

ERAS: tuple[Era, Era] = ("2025-11-25", "2026-07-28")
SCRIPT: list[Mapping[str, Any]] = [
    {"match": "priority", "reply": "accept", "content": {"priority": "high"}},
    {"match": "Which one should I order", "reply": "accept", "content": {"offer": "MON-27-A"}},
    {"match": "API key", "reply": "consent"},
    {"match": "Connect your Example account", "reply": "consent"},
]


def require_haproxy() -> None:
    """HAProxy is mandatory under CI=true, as PostgreSQL is: its absence fails the run there."""
    missing = haproxy_missing()
    if missing is not None:
        if IN_CI:
            pytest.fail(f"{missing}; .ci/run installs it (mandatory under CI=true)")
        pytest.skip(missing)


@pytest.fixture
def cluster(pg_schema_url: str, tmp_path: Path) -> Iterator[Cluster]:
    require_haproxy()
    with running_cluster(ClusterSpec(pg_schema_url, instances=3), tmp_path / "cluster") as running:
        yield running


@asynccontextmanager
async def kit(
    cluster: Cluster,
    era: Era,
    name: str,
    tasks: TaskGroup,
    sessions: dict[str, str],
    opened: dict[str, str],
    script: Sequence[Mapping[str, Any]] = SCRIPT,
) -> AsyncIterator[ElicitingClient]:
    """The kit, signed in as its own OAuth client; the URLs it opens are walked by a browser in `tasks`,
    as a person's browser opens and goes on while the call goes on."""
    token = await sign_in(cluster)

    async def seen(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            sessions[name] = response.headers["mcp-session-id"]

    async def opener(url: str) -> None:
        opened[url.rsplit("/", 1)[-1]] = name
        tasks.start_soon(Browser(cluster).complete, url)

    headers = {"Authorization": f"Bearer {token}", CLIENT_HEADER: name}
    async with (
        cluster.http_client(headers=headers, event_hooks={"response": [seen]}) as http,
        ElicitingClient(
            Http(cluster.mcp_url, http_client=http), ScriptedHandler(script), era=era, opener=opener
        ) as client,
    ):
        yield client


def text(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


def opened_store(cluster: Cluster) -> Store:
    return open_store(cluster.store_url)


def assert_each_transition_once(store: Store) -> list[Decision]:
    """Every decision's trail has each status once: no answer, consent or completion was applied twice."""
    decisions = store.list_decisions(Operator(), limit=1000)
    for decision in decisions:
        trail = store.audit_trail(decision.elicitation_id, Operator())
        moves = [entry.to_status for entry in trail if entry.from_status != entry.to_status]
        assert len(moves) == len(set(moves)), (decision.elicitation_id, moves)
        assert moves[-1] == decision.status.value, (decision.elicitation_id, moves)
    return decisions


def answered(cluster: Cluster) -> list[Routed]:
    """The balancer's log, every request in it answered (-1: lost without an answer) and none with a 5xx."""
    routed = cluster.routed()
    assert all(0 <= r.status < 500 for r in routed), [r for r in routed if not 0 <= r.status < 500]
    return routed


def servers_of(routed: list[Routed], **where: str) -> set[str]:
    return {r.server for r in routed if all(getattr(r, key) == value for key, value in where.items())}


async def test_every_era_and_mode_completes_once_with_requests_spread_over_the_instances(cluster: Cluster) -> None:
    """Two clients per era, at once, each: a form ticket, a choice order, an API key typed on the server's
    page, an account connected at the provider. Legacy calls wait on their instance while the pages and
    the callback land elsewhere; 2026-07-28 rounds are retried wherever the balancer sends them."""
    results: dict[str, list[str]] = {}
    sessions: dict[str, str] = {}
    keys: dict[str, str] = {}

    async def scenario(era: Era, number: int, tasks: TaskGroup) -> None:
        name = f"{era}-{number}"
        async with kit(cluster, era, name, tasks, sessions, keys) as client:
            done = [
                text(await client.call_tool("create_ticket", {"title": f"ticket of {name}"})),
                text(await client.call_tool("procure", {"item": "monitor", "budget": 400})),
                text(await client.call_tool("set_api_key", {})),
                text(await client.call_tool("connect_account", {})),
            ]
        results[name] = done

    with anyio.fail_after(180):
        async with anyio.create_task_group() as tasks:
            for era in ERAS:
                for number in (1, 2):
                    tasks.start_soon(scenario, era, number, tasks)

    assert len(results) == 4
    for name, done in results.items():
        assert done[0].startswith("Created ticket ") and done[0].endswith(f"(high): ticket of {name}"), done
        assert done[1].startswith("Ordered 27-inch monitor from Northwind for 329.00"), done
        assert done[2] == "Your Example API key is stored on the server.", done
        assert done[3] == "Connected as alice (Alice Liddell).", done

    workspace = Workspace(cluster.workspace)
    tickets = sorted(path.read_text() for path in (cluster.workspace / "tickets").glob("*.json"))
    assert len(tickets) == 4 and len(set(tickets)) == 4, tickets
    assert len(workspace.orders()) == 4
    store = opened_store(cluster)
    journaled: dict[str, set[object]] = {"create": set(), "order": set()}
    try:
        decisions = assert_each_transition_once(store)
        for decision in decisions:
            step = {"priority": "create", "choose_offer": "order"}.get(decision.key)
            if step is not None:
                entry = store.journal_get(decision.operation_id, step, caller=decision.principal)
                assert entry is not None, (decision.key, decision.operation_id)
                journaled[step].add(entry.value)
    finally:
        store.close()
    statuses = Tally(decision.status for decision in decisions)
    assert statuses == {DecisionStatus.ACCEPTED: 8, DecisionStatus.EXTERNAL_COMPLETED: 8}, statuses
    # each journaled side effect is the one effect in the workspace, and the other way round
    assert journaled["create"] == {path.stem[-8:] for path in (cluster.workspace / "tickets").glob("*.json")}
    assert journaled["order"] == {path.stem for path in workspace.orders()}

    routed = answered(cluster)
    for name, session in sessions.items():
        assert name.startswith("2025"), "a 2026-07-28 client got a session id"
        assert len(servers_of(routed, session=session)) == 1, f"{name}'s legacy session left its instance"
    assert len(servers_of(routed, path="/mcp")) == 3
    assert len({r.server for r in routed if r.path.startswith("/elicit/")}) >= 2


async def test_legacy_calls_wait_on_their_instance_while_their_pages_land_on_others(cluster: Cluster) -> None:
    """Twelve legacy clients (a call of its own each: a repeated call would replay the first one's result),
    each setting an API key, at once: each call is held on the instance of its session
    while the person's page posts go round the instances; the post that completes a decision wakes the
    call wherever it waits (LISTEN/NOTIFY), and each flow completes once."""
    sessions: dict[str, str] = {}
    opened: dict[str, str] = {}
    results: list[str] = []

    async def keys(number: int, tasks: TaskGroup) -> None:
        name = f"legacy-{number}"
        async with kit(cluster, "2025-11-25", name, tasks, sessions, opened) as client:
            results.append(text(await client.call_tool("set_api_key", {})))

    with anyio.fail_after(150):
        async with anyio.create_task_group() as tasks:
            for number in range(12):
                tasks.start_soon(keys, number, tasks)
    assert results == ["Your Example API key is stored on the server."] * 12
    store = opened_store(cluster)
    try:
        decisions = assert_each_transition_once(store)
        assert store.vault_get(cluster.principal_id, "example-api-key") is not None
    finally:
        store.close()
    assert len(decisions) == 12 and {d.status for d in decisions} == {DecisionStatus.EXTERNAL_COMPLETED}
    routed = answered(cluster)
    waiting_on = {}
    for name, session in sessions.items():
        [waiting_on[name]] = servers_of(routed, session=session)
    assert len(waiting_on) == 12
    completed_on = {r.path.split("/")[2]: r.server for r in routed if r.method == "POST" and r.path.endswith("/key")}
    assert set(completed_on) == set(opened) and len(opened) == 12
    crossed = [decision for decision, server in completed_on.items() if server != waiting_on[opened[decision]]]
    assert crossed, "no flow was completed on another instance than the one holding its call"


async def test_modern_rounds_are_retried_on_other_instances_and_each_answer_counts_once(cluster: Cluster) -> None:
    """Every 2026-07-28 round is a request of its own: a call and its retries go round the instances, and
    each `requestState` sealed by one instance opens on the next. Six calls at once."""
    sessions: dict[str, str] = {}
    results: list[str] = []

    async def calls(number: int, tasks: TaskGroup) -> None:
        async with kit(cluster, "2026-07-28", f"modern-{number}", tasks, sessions, {}, SCRIPT[:1] * 3) as client:
            for turn in range(3):
                results.append(text(await client.call_tool("create_ticket", {"title": f"t{number}-{turn}"})))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tasks:
            for number in range(6):
                tasks.start_soon(calls, number, tasks)
    assert len(results) == 18 and all("(high): t" in result for result in results)
    assert not sessions
    assert len(list((cluster.workspace / "tickets").glob("*.json"))) == 18
    routed = answered(cluster)
    switches = 0
    for number in range(6):
        # A client's requests, one after another: per call the round that asks, then the retry that answers.
        served = [r.server for r in routed if r.path == "/mcp" and r.client == f"modern-{number}"]
        assert len(served) >= 6, served
        switches += sum(1 for before, after in itertools.pairwise(served) if before != after)
    assert switches > 0, "every retry came back to the instance of its round: the balancer did not balance"
    store = opened_store(cluster)
    try:
        decisions = assert_each_transition_once(store)
    finally:
        store.close()
    assert len(decisions) == 18 and {d.status for d in decisions} == {DecisionStatus.ACCEPTED}


async def test_a_sweep_on_any_instance_expires_an_abandoned_round_once(cluster: Cluster) -> None:
    """A 2026-07-28 round nobody answers holds no call anywhere; when its decision is overdue, the first
    instance whose sweeper runs expires it (one of them, under the advisory lock), audited once as the
    clock's doing, and a late retry of the round, on whatever instance, gets the expired outcome."""
    token = await sign_in(cluster)
    async with (
        cluster.http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(
            streamable_http_client(cluster.mcp_url, http_client=http), mode="2026-07-28", elicitation_callback=Person()
        ) as client,
    ):
        first = await client.session.call_tool("set_api_key", {}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.input_requests is not None
        elicitation_id = first.input_requests["set_api_key"].params.url.rsplit("/", 1)[-1]  # type: ignore[union-attr]
        # The clock passing the TTL (10 minutes away), told to the database the instances share.
        with psycopg.connect(cluster.store_url, autocommit=True) as db:
            moved = db.execute(
                "UPDATE elicit_decisions SET expires_at = now() - interval '1 second' WHERE elicitation_id = %s",
                (elicitation_id,),
            )
            assert moved.rowcount == 1
        store = opened_store(cluster)
        try:
            with anyio.fail_after(60):
                while store.get_decision(elicitation_id, Operator()).status is not DecisionStatus.EXPIRED:
                    await anyio.sleep(0.25)
            trail = store.audit_trail(elicitation_id, Operator())
        finally:
            store.close()
        expiries = [entry for entry in trail if entry.to_status == DecisionStatus.EXPIRED.value]
        assert len(expiries) == 1 and expiries[0].actor == "system:clock", trail
        assert "sweep" in expiries[0].reason
        late = await client.session.call_tool(
            "set_api_key",
            {},
            input_responses={"set_api_key": ElicitResult(action="accept")},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(late, CallToolResult)
    assert text(late) == "No API key stored (expired)."


async def test_without_the_session_rule_a_legacy_session_breaks_and_the_modern_era_does_not(
    pg_schema_url: str, tmp_path: Path
) -> None:
    """Why the recipe routes `Mcp-Session-Id` home: balanced like the rest, a 2025-era session's next request
    reaches an instance that never saw it and is refused (404). The 2026-07-28 era has no session, so the
    same balancer serves it whole."""
    require_haproxy()
    spec = ClusterSpec(pg_schema_url, instances=2, provider=False, sessions_home=False)
    with running_cluster(spec, tmp_path / "cluster") as cluster:
        token = await sign_in(cluster)
        script = [SCRIPT[0]]
        async with cluster.http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            with pytest.raises(MCPError, match="Session not found"):
                async with ElicitingClient(
                    Http(cluster.mcp_url, http_client=http), ScriptedHandler(script), era="2025-11-25"
                ) as legacy:
                    await legacy.call_tool("create_ticket", {"title": "legacy"})
            async with ElicitingClient(
                Http(cluster.mcp_url, http_client=http), ScriptedHandler(script), era="2026-07-28"
            ) as modern:
                done = text(await modern.call_tool("create_ticket", {"title": "modern"}))
        routed = answered(cluster)
    assert done.endswith("(high): modern")
    refused = [r for r in routed if r.status == 404 and r.session]
    assert refused and all(servers_of(routed, session=r.session) == {"i1", "i2"} for r in refused)
    assert [path.read_text() for path in (cluster.workspace / "tickets").glob("*.json")] == [
        '{"title": "modern", "priority": "high"}'
    ]
