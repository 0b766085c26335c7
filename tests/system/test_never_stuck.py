"""Never stuck: a round that never reached the person, a dropped connection or a failed dialog is followed by
the question being put out again, not by a call that waits for minutes.

Real server processes (`tests.helpers.server`'s `overlap` tools) over streamable HTTP on loopback, real SDK clients, the
embedded SQLite file and the machine's PostgreSQL. A round is lost three ways: the client drops its
response, the server is SIGKILLed between the round's commit and its response, the client's elicitation
handler raises. The identical call made afterwards, at the default `state_ttl`, must be asked within
`reask_after` plus one long poll and complete with one effect. A person slower than `reask_after` may be
asked again, at most once per `reask_after`; the first answer wins and the later ones are audited as
superseded.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import anyio
import pytest
from mcp.client import ClientRequestContext
from mcp_types import ElicitResult, ErrorData, InputRequiredResult

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server.eras.legacy import PING_TIMEOUT
from mcp_elicit.store import open_store
from tests.helpers.overlapping import (
    LONG_POLL,
    Desk,
    K,
    Params,
    Reply,
    call,
    connect,
    launch,
    running,
    the_one,
    together,
)
from tests.helpers.person import accept
from tests.helpers.private_postgres import private_postgres
from tests.helpers.server import Workspace
from tests.helpers.tasks_wire import LEGACY, Wire

# On both engines: several server processes on one store, a PostgreSQL restart.
pytestmark = [pytest.mark.anyio, pytest.mark.engines("sqlite", "postgres")]
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
REASK = 2.0
"""`reask_after` of these servers: short, so a test waits seconds rather than the default 15."""
SLACK = 3.0
"""What a loaded two-core machine may add to a bound: starting a connection, a round trip, a commit."""


class Stopwatch:
    """When the person was first asked, counted from `start()`."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.asked: list[float] = []

    def start(self) -> None:
        self.started = time.monotonic()

    def seat(self, reply: Reply) -> object:
        async def ask(context: ClientRequestContext, params: Params) -> ElicitResult | ErrorData:
            self.asked.append(time.monotonic() - self.started)
            return await reply(0, params)

        return ask


async def yes(seat: int, params: Params) -> ElicitResult:
    return accept(confirm=True)


async def never_shown(context: ClientRequestContext, params: Params) -> ElicitResult:
    """A client that can elicit, whose rounds these tests drop before anyone is shown them."""
    raise AssertionError("a dropped round was shown")


def one_effect(workspace: Path, n: int) -> None:
    for step in ("work", "seal"):
        keys = Workspace(workspace).keys(n, step)
        assert len(keys) == 1, f"step {step} ran {len(keys)} times"


def decision_of(store_url: str) -> tuple[DecisionStatus, list[str]]:
    """The one decision's status and the reasons of its audit trail."""
    store = open_store(store_url)
    try:
        [decision] = store.list_decisions(Operator())
        trail = store.audit_trail(decision.elicitation_id, Operator())
    finally:
        store.close()
    return decision.status, [entry.reason for entry in trail]


async def asked_again(url: str, n: int) -> tuple[str, Stopwatch]:
    """The identical call made again on a new connection, by a person who answers at once."""
    watch = Stopwatch()
    async with connect(url, MODERN, watch.seat(yes)) as client:  # type: ignore[arg-type]
        watch.start()
        with anyio.fail_after(REASK + LONG_POLL + 30):
            result = await call(client, "approve", {"n": n})
    return result, watch


def asked_in_time(watch: Stopwatch) -> None:
    assert len(watch.asked) == 1, f"asked {len(watch.asked)} times"
    assert watch.asked[0] <= REASK + LONG_POLL + SLACK, f"asked only after {watch.asked[0]:.1f} s"


async def test_a_round_whose_response_the_client_dropped_is_asked_again(store_url: str, tmp_path: Path) -> None:
    server = launch(store_url, tmp_path, reask_after=REASK)
    with running(server):
        async with connect(server.url, MODERN, never_shown) as dropping:
            lost = await dropping.session.call_tool("approve", {"n": 1}, allow_input_required=True)
        assert isinstance(lost, InputRequiredResult) and lost.input_requests, "the first call ends in a round"
        result, watch = await asked_again(server.url, 1)
    asked_in_time(watch)
    assert result.startswith("approved 1: receipt-"), result
    one_effect(tmp_path, 1)


async def test_a_round_committed_by_a_server_killed_before_its_response_is_asked_again(
    store_url: str, tmp_path: Path
) -> None:
    dying = launch(store_url, tmp_path, reask_after=REASK, die_after_round=True)
    with running(dying):
        with pytest.raises(BaseException):  # noqa: B017 - the connection dies with the process, however it surfaces
            async with connect(dying.url, MODERN, never_shown) as client:
                await client.session.call_tool("approve", {"n": 2}, allow_input_required=True)
        dying.process.join(timeout=10)
        assert dying.process.exitcode == -9, "the server was meant to die right after the round's commit"
    status, _ = decision_of(store_url)
    assert status is DecisionStatus.REQUESTED, "the round's question was committed before the process died"
    restarted = launch(store_url, tmp_path, reask_after=REASK)
    with running(restarted):
        result, watch = await asked_again(restarted.url, 2)
    asked_in_time(watch)
    assert result.startswith("approved 2: receipt-"), result
    one_effect(tmp_path, 2)


async def test_a_client_whose_handler_raised_once_is_asked_on_the_next_call(store_url: str, tmp_path: Path) -> None:
    async def broken(context: ClientRequestContext, params: Params) -> ElicitResult:
        raise RuntimeError("the host's dialog crashed")

    server = launch(store_url, tmp_path, reask_after=REASK)
    with running(server):
        with pytest.raises(BaseException, match="unhandled errors"):  # the SDK's driver lets the error out
            async with connect(server.url, MODERN, broken) as client:
                await client.call_tool("approve", {"n": 3})
        result, watch = await asked_again(server.url, 3)
    asked_in_time(watch)
    assert result.startswith("approved 3: receipt-"), result
    one_effect(tmp_path, 3)


async def test_a_dropped_connection_hands_the_question_to_the_next_call_at_once(store_url: str, tmp_path: Path) -> None:
    """2025-11-25 keeps its rule: the call carrying the question holds it while its client lives. A client that
    vanished without a word stops answering the carrier's pings (one every `reask_after`): the question is
    given up, and the identical call made again is asked (no lease or TTL to sit out)."""
    shown = anyio.Event()

    async def walks_away(context: ClientRequestContext, params: Params) -> ElicitResult:
        shown.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    server = launch(store_url, tmp_path, reask_after=REASK)
    with running(server):
        async with anyio.create_task_group() as group:

            async def carry() -> None:
                async with connect(server.url, HANDSHAKE, walks_away) as client:
                    await call(client, "approve", {"n": 4})

            group.start_soon(carry)
            with anyio.fail_after(30):
                await shown.wait()
            group.cancel_scope.cancel()  # the connection closes with the question on screen
        watch = Stopwatch()
        async with connect(server.url, HANDSHAKE, watch.seat(yes)) as client:  # type: ignore[arg-type]
            watch.start()
            with anyio.fail_after(30):
                result = await call(client, "approve", {"n": 4})
    assert len(watch.asked) == 1 and watch.asked[0] <= REASK + PING_TIMEOUT.total_seconds() + SLACK, watch.asked
    assert result.startswith("approved 4: receipt-"), result
    one_effect(tmp_path, 4)


@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
async def test_a_person_slower_than_reask_after_is_asked_at_most_once_per_reask_after(
    store_url: str, tmp_path: Path, era: str
) -> None:
    """K overlapping identical calls and a person who takes `THINKING` seconds over each dialog: the step
    runs once, every call gets the same result, and the question is out at most once per `reask_after` (on
    2026-07-28; the live call keeps it on 2025-11-25). Each answer after the first is audited as superseded."""
    reask, thinking = 1.0, 4.0

    async def slow(seat: int, params: Params) -> ElicitResult:
        await anyio.sleep(thinking)
        return accept(confirm=True)

    desk = Desk(slow)
    server = launch(store_url, tmp_path, reask_after=reask)
    with running(server):
        [results] = await together(
            K, lambda index: connect(server.url, era, desk.seat(index)), lambda _, c: call(c, "approve", {"n": 5})
        )
    one_effect(tmp_path, 5)
    the_one(results, "approved 5: receipt-")
    put_out = len(desk.asked)
    assert 1 <= put_out <= math.ceil(thinking / reask) + 1, f"the question was put out {put_out} times"
    if era == HANDSHAKE:
        assert put_out == 1
    status, reasons = decision_of(store_url)
    assert status is DecisionStatus.ACCEPTED
    superseded = [reason for reason in reasons if "superseded" in reason]
    assert len(superseded) == put_out - 1, reasons


async def test_a_round_survives_a_postgresql_restart_before_its_answer(tmp_path: Path) -> None:
    """The round is committed, PostgreSQL restarts, then the round's answer comes back: the retry is served on
    new connections and completes, one effect. (The server's own PostgreSQL cluster, restarted for real.)"""
    with private_postgres() as postgres:
        server = launch(postgres.url, tmp_path, reask_after=REASK)
        with running(server):
            async with connect(server.url, MODERN, never_shown) as client:
                first = await client.session.call_tool("approve", {"n": 6}, allow_input_required=True)
                assert isinstance(first, InputRequiredResult) and first.input_requests is not None
                [key] = first.input_requests
                postgres.restart()
                with anyio.fail_after(60):
                    done = await client.session.call_tool(
                        "approve",
                        {"n": 6},
                        input_responses={key: accept(confirm=True)},
                        request_state=first.request_state,
                        allow_input_required=True,
                    )
        status, _ = decision_of(postgres.url)
    assert not isinstance(done, InputRequiredResult)
    assert done.content and "approved 6: receipt-" in str(done.content[0]), done
    assert status is DecisionStatus.ACCEPTED
    one_effect(tmp_path, 6)


async def test_a_slow_person_at_a_client_that_answers_one_request_at_a_time_still_counts(
    store_url: str, tmp_path: Path
) -> None:
    """2025-11-25, a raw client that handles server requests one at a time (as mcp 1.x clients do): while its
    person thinks, the carrier's pings wait behind the dialog and go unanswered. The carrier lets go of the
    question but keeps the dialog, so the person's answer, coming after `reask_after` + `PING_TIMEOUT`, counts."""
    thinking = REASK + PING_TIMEOUT.total_seconds() + 1.5
    seen: list[str] = []

    async def one_at_a_time(request: dict[str, object]) -> dict[str, object]:
        seen.append(str(request["method"]))
        if request["method"] == "elicitation/create":
            await anyio.sleep(thinking)
            return {"action": "accept", "content": {"confirm": True}}
        return {}

    server = launch(store_url, tmp_path, reask_after=REASK)
    with running(server):
        async with Wire(server.url, LEGACY) as wire:
            with anyio.fail_after(thinking + 30):
                result = await wire.request(
                    "tools/call", {"name": "approve", "arguments": {"n": 7}}, on_request=one_at_a_time
                )
    assert not result.get("isError"), result
    assert "approved 7: receipt-" in result["content"][0]["text"], result
    assert seen[0] == "elicitation/create" and "ping" in seen[1:], seen
    one_effect(tmp_path, 7)
    status, _ = decision_of(store_url)
    assert status is DecisionStatus.ACCEPTED
