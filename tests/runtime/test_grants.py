"""Standing grants: a person approves a call and, besides, later calls of the tool from the same app, for a session
or always (optionally within one scope); such calls run without asking, each audited with the grant's id, until
the grant expires or is revoked. A grant never covers another tool's, principal's or client's call.

What runs is recorded by the tools themselves (`ran`), so "ran without asking" is a fact of the test; the store's
records (grants, audit rows) are read through its public API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, cast

import pytest
from mcp import Client
from mcp_types import RequestParamsMeta

import mcp_elicit.testing as scripted
from mcp_elicit import Elicitation, Flow, Gate, Grants, IdentityPolicy, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, GRANT_FIELD, NOTE_FIELD, REJECT_FIELD
from mcp_elicit.model import (
    Grant,
    GrantKind,
    Operator,
    Principal,
    SubjectKind,
)
from mcp_elicit.server import IDEMPOTENCY_META_KEY, REPLAYED_META_KEY, Accepted
from mcp_elicit.store import GrantFilter, open_store
from mcp_elicit.testing import ControlledClock, Harness
from tests.helpers.grants import recorded_grant
from tests.helpers.person import Person, accept

pytestmark = pytest.mark.anyio
SESSION = timedelta(hours=1)
ALWAYS = timedelta(days=30)


class Ran:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.meanwhile: list[Callable[[], object]] = []
        """What happens elsewhere while the next `rotate` runs, before its step: done once."""


@pytest.fixture
def ran() -> Ran:
    return Ran()


def build(runtime: Elicitation, ran: Ran) -> None:
    @runtime.tool(gate=Gate(editable=["env"], grants=Grants(always=ALWAYS, scope=lambda a: f"env={a['env']}")))
    async def deploy(flow: Flow, service: str, env: str) -> str:
        ran.calls.append(("deploy", {"service": service, "env": env}))
        return f"deployed {service} to {env}"

    @runtime.tool(gate=Gate(grants=Grants(session=SESSION)))
    async def restart(flow: Flow, service: str) -> str:
        ran.calls.append(("restart", {"service": service}))
        return f"restarted {service}"

    @runtime.tool(gate=Gate(grants=Grants(session=SESSION)))
    async def drain(flow: Flow, service: str) -> str:
        ran.calls.append(("drain", {"service": service}))
        return f"drained {service}"

    @runtime.tool(gate=Gate(grants=Grants(session=SESSION)))
    async def rotate(flow: Flow, key: str) -> str:
        while ran.meanwhile:
            ran.meanwhile.pop()()

        def effect() -> str:
            ran.calls.append(("rotate", {"key": key}))
            return f"rotated {key}"

        return await flow.step("rotate", effect)

    @runtime.tool(gate=Gate(grants=Grants(session=SESSION)))
    async def label(flow: Flow, service: str) -> str:
        answer = await flow.ask(f"Label for {service}?", str, key="label")
        said = answer.data if isinstance(answer, Accepted) else "none"
        ran.calls.append(("label", {"service": service, "label": said}))
        return f"labelled {service} {said}"

    @runtime.tool(gate=Gate(grants=Grants(scope=lambda a: a["missing"])))
    async def scale(flow: Flow, service: str) -> str:
        ran.calls.append(("scale", {"service": service}))
        return f"scaled {service}"


@pytest.fixture
def elicit_app(elicit_store_url: str, elicit_clock: ControlledClock, ran: Ran) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(elicit_store_url, clock=elicit_clock),
        request_state=RequestState(single_process=True),
        clock=elicit_clock,
    )
    runtime.server("granting")
    build(runtime, ran)
    yield runtime
    runtime.close()


def approve(**content: Any) -> dict[str, scripted.Reply]:
    return {APPROVAL_KEY: scripted.accept(content)}


def grants(app: Elicitation) -> list[Grant]:
    return app.store.grant_page(Operator()).grants


def used_by(app: Elicitation, grant: Grant) -> list[str]:
    """The operations the grant let through, as its audit rows name them."""
    trail = app.store.audit_trail(grant.grant_id, Operator())
    assert all(row.subject_kind is SubjectKind.GRANT for row in trail)
    return [str(row.details["operation_id"]) for row in trail if row.reason.startswith("let a call")]


async def test_a_session_grant_covers_the_tools_next_calls_until_revoked(
    elicit: Harness, elicit_app: Elicitation, ran: Ran
) -> None:
    first = await elicit.call("restart", {"service": "api"}, answers=approve(**{GRANT_FIELD: "session"}))
    [grant] = grants(elicit_app)
    assert (grant.kind, grant.tool, grant.scope, grant.principal) == (
        GrantKind.SESSION,
        "restart",
        None,
        elicit.principal,
    )
    approval = elicit.decision(APPROVAL_KEY, call=first)
    assert grant.expires_at - grant.created_at == SESSION
    assert abs(grant.created_at - approval.updated_at) < timedelta(seconds=5), "it runs from the approval"
    until = grant.expires_at.strftime("%Y-%m-%d %H:%M UTC")
    assert [block.text for block in first.result.content] == [  # type: ignore[union-attr]
        f"The user also approved restart calls from this app for this session, until {until}: they run without asking.",
        "restarted api",
    ]
    assert grant.decision_id == approval.elicitation_id

    second = await elicit.call("restart", {"service": "web"})
    third = await elicit.call("restart", {"service": "web"})
    ran_unasked = f"Ran without asking: the user's session approval of restart calls from this app, until {until}."
    for covered in (second, third):
        assert covered.asked == ()
        assert [block.text for block in covered.result.content] == [ran_unasked, "restarted web"]  # type: ignore[union-attr]
    assert not third.replayed and third.operation_id != second.operation_id, "each call is its own, and ran"
    assert used_by(elicit_app, grant) == [second.operation_id, third.operation_id]
    assert elicit.decisions(call=second) == [], "nothing was asked for it"

    revoked = elicit_app.store.revoke_grant(grant.grant_id, caller=Operator("ops"), reason="incident")
    asked = await elicit.call("restart", {"service": "web"}, answers=approve())
    assert asked.text == "restarted web" and [q.key for q in asked.asked] == [APPROVAL_KEY]
    assert [call for call, _ in ran.calls] == ["restart"] * 4
    assert used_by(elicit_app, revoked) == [second.operation_id, third.operation_id]
    assert len(grants(elicit_app)) == 1, "a plain approval grants nothing"


async def test_a_grant_stops_covering_when_it_expires(elicit: Harness, elicit_app: Elicitation) -> None:
    """On every era: a session grant covers the next call until its TTL has passed, then the call is asked."""
    await elicit.call("restart", {"service": "api"}, answers=approve(**{GRANT_FIELD: "session"}))
    [grant] = grants(elicit_app)
    assert grant.expires_at - grant.created_at == SESSION
    elicit.clock.advance_to(grant.expires_at - timedelta(seconds=30))
    covered = await elicit.call("restart", {"service": "api"})
    assert covered.asked == () and covered.result.content[-1].text == "restarted api"  # type: ignore[union-attr]
    elicit.clock.advance_to(grant.expires_at)
    again = await elicit.call("restart", {"service": "api"}, answers=approve())
    assert [q.key for q in again.asked] == [APPROVAL_KEY]
    assert elicit_app.store.grant_page(Operator(), GrantFilter(active=True)).grants == []
    assert len(used_by(elicit_app, grant)) == 1


@pytest.mark.elicit_eras("2026-07-28")
async def test_an_always_grant_covers_only_its_scope(elicit: Harness, elicit_app: Elicitation, ran: Ran) -> None:
    first = await elicit.call(
        "deploy", {"service": "api", "env": "staging"}, answers=approve(**{GRANT_FIELD: "always"})
    )
    [question] = first.asked
    assert question.schema is not None
    assert question.schema["properties"][GRANT_FIELD] == {
        "type": "string",
        "title": "Approve",
        "description": "Later calls you allow here run without asking until then; you can revoke it any time.",
        "oneOf": [
            {"const": "once", "title": "Just this call"},
            {
                "const": "session",
                "title": "Also deploy calls with env=staging from this app for this session (8 hours)",
            },
            {"const": "always", "title": "Always allow deploy calls with env=staging from this app (for 30 days)"},
        ],
        "default": "once",
    }
    [grant] = grants(elicit_app)
    assert (grant.kind, grant.scope) == (GrantKind.ALWAYS, "env=staging")
    assert first.result.content[0].text.startswith("The user always allows deploy calls with env=staging")  # type: ignore[union-attr]

    elsewhere = await elicit.call("deploy", {"service": "web", "env": "staging"})
    assert elsewhere.asked == () and [block.text for block in elsewhere.result.content] == [  # type: ignore[union-attr]
        "Ran without asking: the user's standing approval of deploy calls with env=staging from this app, until "
        f"{grant.expires_at.strftime('%Y-%m-%d %H:%M UTC')}.",
        "deployed web to staging",
    ]
    production = await elicit.call("deploy", {"service": "web", "env": "production"}, answers=approve())
    assert [q.key for q in production.asked] == [APPROVAL_KEY]
    assert used_by(elicit_app, grant) == [elsewhere.operation_id]
    assert ran.calls[-1] == ("deploy", {"service": "web", "env": "production"})


@pytest.mark.elicit_eras("2026-07-28")
async def test_a_grant_for_one_tool_never_covers_another(elicit: Harness, elicit_app: Elicitation) -> None:
    await elicit.call("restart", {"service": "api"}, answers=approve(**{GRANT_FIELD: "session"}))
    other = await elicit.call("drain", {"service": "api"}, answers=approve())
    assert [q.key for q in other.asked] == [APPROVAL_KEY]


@pytest.mark.elicit_eras("2026-07-28")
async def test_a_grant_never_covers_another_principal_or_client(
    elicit: Harness, elicit_app: Elicitation, elicit_store_url: str, elicit_clock: ControlledClock, ran: Ran
) -> None:
    # The harness user's grant through another client: it does not cover this client's call.
    elsewhere = Principal(elicit.principal.principal_id, "another-client")
    recorded_grant(elicit_app.store, elsewhere, tool="restart", now=elicit_clock())
    called = await elicit.call("restart", {"service": "api"}, answers=approve(**{GRANT_FIELD: "session"}))
    assert [q.key for q in called.asked] == [APPROVAL_KEY], "another client's grant does not cover this one's call"

    # Bob, on the same store and client, is not covered by the harness user's grant made just now.
    bobs = Elicitation(
        open_store(elicit_store_url, clock=elicit_clock),
        request_state=RequestState(single_process=True),
        identity=IdentityPolicy(local_principal="bob"),
        clock=elicit_clock,
    )
    bobs.server("granting-bob")
    build(bobs, ran)
    try:
        bob = Harness(bobs, era="2026-07-28")
        refused = await bob.call("restart", {"service": "api"}, answers=approve())
        assert [q.key for q in refused.asked] == [APPROVAL_KEY] and bob.principal.principal_id == "bob"
    finally:
        bobs.close()
    mine = await elicit.call("restart", {"service": "api"})
    assert mine.asked == (), "the harness user's own grant still covers their own call"


@pytest.mark.elicit_eras("2026-07-28")
async def test_an_edit_that_changes_the_scope_keeps_no_grant(elicit: Harness, elicit_app: Elicitation) -> None:
    edited = await elicit.call(
        "deploy", {"service": "api", "env": "production"}, answers=approve(env="staging", **{GRANT_FIELD: "always"})
    )
    assert edited.result.content[1].text == (  # type: ignore[union-attr]
        "The user's always approval was not kept: their change of the arguments changed the scope it was offered "
        "for (env=production → env=staging), so later calls are asked again."
    )
    assert grants(elicit_app) == []


@pytest.mark.elicit_eras("2026-07-28")
async def test_a_rejection_grants_nothing_and_a_scope_that_fails_offers_nothing(
    elicit: Harness, elicit_app: Elicitation
) -> None:
    rejected = await elicit.call(
        "restart", {"service": "api"},
        answers=approve(**{GRANT_FIELD: "session", REJECT_FIELD: True, NOTE_FIELD: "not now"}),
    )  # fmt: skip
    assert "rejected" in rejected.error and grants(elicit_app) == []
    scaled = await elicit.call("scale", {"service": "api"}, answers=approve())
    [question] = scaled.asked
    assert question.schema is not None and GRANT_FIELD not in question.schema["properties"]
    assert scaled.text == "scaled api"


@pytest.mark.elicit_eras("2026-07-28")
async def test_a_gate_offers_only_the_kinds_its_author_allows(elicit: Harness) -> None:
    called = await elicit.call("restart", {"service": "api"}, answers=approve())
    [question] = called.asked
    assert question.schema is not None
    assert [choice["const"] for choice in question.schema["properties"][GRANT_FIELD]["oneOf"]] == ["once", "session"]


def test_grants_are_checked_when_declared() -> None:
    with pytest.raises(ValueError, match="offers nothing"):
        Grants(session=None)
    with pytest.raises(ValueError, match="positive TTL"):
        Grants(always=-ALWAYS)
    with pytest.raises(ValueError, match="shorter than the session grant"):
        Grants(session=ALWAYS, always=SESSION)
    with pytest.raises(TypeError, match="a function of the call's arguments"):
        Grants(scope="env")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes Grants"):
        Gate(grants=SESSION)  # type: ignore[arg-type]


@pytest.mark.elicit_eras("2026-07-28")
async def test_a_grant_revoked_as_a_call_it_let_through_begins_lets_no_step_run_and_the_call_is_asked(
    elicit: Harness, elicit_app: Elicitation, ran: Ran
) -> None:
    await elicit.call("rotate", {"key": "k1"}, answers=approve(**{GRANT_FIELD: "session"}))
    [grant] = grants(elicit_app)
    ran.meanwhile.append(lambda: elicit_app.store.revoke_grant(grant.grant_id, caller=Operator("ops")))
    called = await elicit.call("rotate", {"key": "k2"}, answers=approve())
    assert called.text == "rotated k2" and [q.key for q in called.asked] == [APPROVAL_KEY]
    assert ran.calls == [("rotate", {"key": "k1"}), ("rotate", {"key": "k2"})], "the step ran once, once approved"
    assert used_by(elicit_app, grant) == [], "the use lost with the commit that found the grant revoked"


@pytest.mark.elicit_eras("2026-07-28")
async def test_grants_count_only_as_the_gate_offers_them_now(
    elicit: Harness, elicit_app: Elicitation, elicit_clock: ControlledClock
) -> None:
    """An author who takes a kind back, or shortens it, takes back the grants given under it: they ask again."""
    two_hours_ago = elicit_clock() - timedelta(hours=2)
    long_ago = recorded_grant(
        elicit_app.store, elicit.principal, tool="restart", ttl=timedelta(days=30), now=two_hours_ago
    )
    always = recorded_grant(elicit_app.store, elicit.principal, tool="drain", kind=GrantKind.ALWAYS)
    restarted = await elicit.call("restart", {"service": "api"}, answers=approve())
    drained = await elicit.call("drain", {"service": "api"}, answers=approve())
    assert [q.key for q in restarted.asked] == [APPROVAL_KEY], "older than the session TTL the gate offers now"
    assert [q.key for q in drained.asked] == [APPROVAL_KEY], "the gate offers no `always` grant any more"
    assert used_by(elicit_app, long_ago) == used_by(elicit_app, always) == []


def test_a_grant_ttl_is_bounded() -> None:
    with pytest.raises(ValueError, match="at most 3650 days"):
        Grants(always=timedelta.max)


async def test_a_call_a_grant_let_through_says_so_on_the_run_that_resumes_it(
    elicit: Harness, elicit_app: Elicitation, ran: Ran
) -> None:
    """A call that asks in its body runs again once answered (a round on 2026-07-28): that run finds its grant from
    the operation's journal, and the model is told of it all the same."""
    await elicit.call(
        "label",
        {"service": "api"},
        answers={**approve(**{GRANT_FIELD: "session"}), "label": scripted.accept(value="blue")},
    )
    [grant] = grants(elicit_app)
    until = grant.expires_at.strftime("%Y-%m-%d %H:%M UTC")
    said = f"Ran without asking: the user's session approval of label calls from this app, until {until}."
    covered = await elicit.call("label", {"service": "web"}, answers={"label": scripted.accept(value="green")})
    assert [q.key for q in covered.asked] == ["label"], "the approval was not asked: the grant covered it"
    assert [block.text for block in covered.result.content] == [said, "labelled web green"]  # type: ignore[union-attr]
    assert used_by(elicit_app, grant) == [covered.operation_id]
    assert ran.calls[-1] == ("label", {"service": "web", "label": "green"})


@pytest.mark.elicit_eras("2026-07-28")
async def test_the_replay_of_a_call_a_grant_let_through_says_the_same(elicit_app: Elicitation, ran: Ran) -> None:
    meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: "restart-web"})
    person = Person([accept(**{GRANT_FIELD: "session"})])
    async with Client(elicit_app.mcp_server, mode="legacy", elicitation_callback=person) as client:
        await client.call_tool("restart", {"service": "api"})
        covered = await client.call_tool("restart", {"service": "web"}, meta=meta)
        replayed = await client.call_tool("restart", {"service": "web"}, meta=meta)
    assert covered.content[0].text.startswith("Ran without asking: the user's session approval of restart")  # type: ignore[union-attr]
    assert replayed.content == covered.content and replayed.meta is not None and REPLAYED_META_KEY in replayed.meta
    assert len(person.asked) == 1 and [call for call, _ in ran.calls] == ["restart", "restart"]
