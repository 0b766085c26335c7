"""Approval backends as values: what a gate records for each, what a bad one is told, and how a policy rules at
re-evaluation (failing closed). The round trips over HTTP are in tests/wire/test_tool_approval.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from mcp_elicit import ApproverRule, Gate
from mcp_elicit.approvals import AgentApproval, ApprovalRequest, InboxApproval, PolicyApproval, Ruling
from mcp_elicit.approvals.limits import ApprovalLimits, RequestBucket, retry_in
from mcp_elicit.client import ElicitingClient, Http
from mcp_elicit.model import Principal, Verdict

NOW = datetime(2026, 6, 8, 12, 0, tzinfo=UTC)
REQUEST = ApprovalRequest(
    approval_id="a", operation_id="o", tool="refund", arguments={"order": "A-1"}, arguments_digest="d",
    requester=Principal("alice", "client-a"), requested_at=NOW, expires_at=NOW + timedelta(hours=1),
)  # fmt: skip


def test_a_gate_records_its_backends_rule_and_says_who_decides() -> None:
    policy = PolicyApproval(lambda request: None, name="refunds")
    gate = Gate(approval=policy)
    assert gate.approvers == ApproverRule(["policy:refunds"]) and gate.backend is policy
    rule = ApproverRule(["treasury"], quorum=2)
    assert Gate(approvers=rule).backend == InboxApproval(rule)
    assert Gate().backend is None, "the requester approves their own call: nothing out of band"


def test_a_gate_names_who_decides_once() -> None:
    with pytest.raises(ValueError, match="say who decides once"):
        Gate(approvers=ApproverRule(["treasury"]), approval=PolicyApproval(lambda request: None))
    with pytest.raises(TypeError, match="takes an approval backend"):
        Gate(approval=ApproverRule(["treasury"]))  # type: ignore[arg-type]


def test_bad_backends_are_refused_naming_what_is_wrong() -> None:
    async def decider(request: ApprovalRequest) -> Verdict:
        return Verdict.APPROVE

    with pytest.raises(TypeError, match="for an async decider, use AgentApproval"):
        PolicyApproval(decider)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"PolicyApproval\(name=...\)"):
        PolicyApproval(lambda request: None, name="no spaces")
    with pytest.raises(ValueError, match=r"PolicyApproval\(every=...\) is a positive timedelta"):
        PolicyApproval(lambda request: None, every=timedelta(0))
    with pytest.raises(ValueError, match=r"AgentApproval\(timeout=...\)"):
        AgentApproval(decider, timeout=timedelta(seconds=-1))
    with pytest.raises(TypeError, match="InboxApproval"):
        InboxApproval(["treasury"])  # type: ignore[arg-type]


def test_a_ruling_note_is_one_printable_line() -> None:
    ruling = Ruling(Verdict.REJECT, "over\nbudget\x1b[31m " + "x" * 900)
    assert ruling.note is not None and "\n" not in ruling.note and "\x1b" not in ruling.note
    assert ruling.note.startswith("over budget") and len(ruling.note) == 500
    assert Ruling("approve").verdict is Verdict.APPROVE  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("says", "allowed"),
    [(Verdict.APPROVE, True), (Ruling(Verdict.APPROVE, "ok"), True), (Verdict.REJECT, False), (None, False),
     (42, False)],
)  # fmt: skip
def test_a_policy_must_approve_again_at_re_evaluation(says: object, allowed: bool) -> None:
    policy = PolicyApproval(lambda request: says)  # type: ignore[arg-type,return-value]
    assert anyio.run(policy.reevaluate, REQUEST) is allowed


def test_a_policy_that_raises_denies_at_re_evaluation() -> None:
    def broken(request: ApprovalRequest) -> Verdict:
        raise RuntimeError("risk service down")

    assert anyio.run(PolicyApproval(broken).reevaluate, REQUEST) is False


def test_an_agent_that_fails_or_times_out_casts_nothing() -> None:
    cast: list[Ruling] = []

    async def record(ruling: Ruling) -> None:
        cast.append(ruling)

    async def failing(request: ApprovalRequest) -> Verdict:
        raise RuntimeError("model unavailable")

    async def slow(request: ApprovalRequest) -> Verdict:
        await anyio.sleep(10)
        return Verdict.APPROVE

    async def both() -> None:
        await AgentApproval(failing).decide(REQUEST, record)
        await AgentApproval(slow, timeout=timedelta(milliseconds=20)).decide(REQUEST, record)

    anyio.run(both)
    assert cast == []


def test_a_client_cannot_declare_tool_approval_without_tasks() -> None:
    with pytest.raises(ValueError, match="tool_approval=True needs tasks=True"):
        ElicitingClient(Http("http://127.0.0.1:1/mcp"), handler=None, tool_approval=True)  # type: ignore[arg-type]


def test_the_request_bucket_allows_a_burst_then_the_rate_per_principal() -> None:
    bucket = RequestBucket(ApprovalLimits(requests_per_minute=6, burst=2))
    assert bucket.take("alice", NOW) is None and bucket.take("alice", NOW) is None
    assert bucket.take("alice", NOW) == timedelta(seconds=10), "one token every 10 s, none spent on a refusal"
    assert bucket.take("bob", NOW) is None, "each principal has a bucket of their own"
    assert bucket.take("alice", NOW + timedelta(seconds=4)) == timedelta(seconds=6)
    assert bucket.take("alice", NOW + timedelta(seconds=11)) is None
    assert (
        bucket.take("alice", NOW + timedelta(minutes=10)) is None
        and bucket.take("alice", NOW + timedelta(minutes=10)) is None
    )
    assert bucket.take("alice", NOW + timedelta(minutes=10)) is not None, "refilled to the burst, never past it"
    assert retry_in(timedelta(seconds=0.2)) == "Try again in 1 s at the earliest."


@pytest.mark.parametrize(
    ("field", "value"),
    [("open_per_principal", 0), ("burst", 1.5), ("burst", True), ("requests_per_minute", 0),
     ("requests_per_minute", float("inf"))],
)  # fmt: skip
def test_approval_limits_refuse_what_bounds_nothing(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ApprovalLimits(**{field: value})  # type: ignore[arg-type]
