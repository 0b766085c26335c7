"""A server serving the tool-approval extension (draft SEP-2848) over real HTTP: one tool per kind of backend
(people in the inbox, a policy function, another agent), each recording what ran in a `Ledger`; and `pay`, whose
amount its approvers may edit and whose policy re-evaluates the amount that will be paid."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from mcp_elicit import ApproverRule, Elicitation, Flow, Gate, RequestState
from mcp_elicit.approvals import AgentApproval, ApprovalRequest, PolicyApproval, Ruling
from mcp_elicit.approvals.limits import ApprovalLimits
from mcp_elicit.model import Verdict
from mcp_elicit.server import Timing
from mcp_elicit.server.tasks import TaskSettings
from mcp_elicit.store import open_store
from tests.helpers.http_harness import StaticTokenVerifier, auth_settings, free_port, serving


@dataclass
class Ledger:
    """What the tools ran, and what the policy and the agent are to say."""

    ran: list[str] = field(default_factory=list)
    policy: list[Verdict | None] = field(default_factory=lambda: [None])
    """The policy's rulings in turn; its last one stands from then on."""
    asked: list[ApprovalRequest] = field(default_factory=list)
    limited: list[ApprovalRequest] = field(default_factory=list)
    agent_holds: bool = False
    """The agent decides nothing (the approval waits), rather than approving."""
    """What `pay`'s policy was asked: once while its approval waits (it says "not yet"), then at re-evaluation."""

    def rule(self, request: ApprovalRequest) -> Verdict | None:
        self.asked.append(request)
        return self.policy.pop(0) if len(self.policy) > 1 else self.policy[0]

    def limit(self, request: ApprovalRequest) -> Verdict | None:
        """Leaves the approval to a person holding its role, then allows payments of at most 100."""
        self.limited.append(request)
        if len(self.limited) == 1:
            return None
        amount = request.arguments.get("amount")
        return Verdict.APPROVE if isinstance(amount, int) and amount <= 100 else Verdict.REJECT


@contextmanager
def served(
    store_url: str, ledger: Ledger, *, tool_approval: bool, limits: ApprovalLimits | None = None
) -> Iterator[tuple[Elicitation, str]]:
    port = free_port()
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"t" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        timing=Timing(
            lease=timedelta(seconds=2), long_poll=timedelta(milliseconds=300), approver_wait=timedelta(seconds=20)
        ),
        tasks=TaskSettings(poll_interval=timedelta(milliseconds=100)),
        tool_approval=tool_approval,
        tool_approval_limits=limits,
    )
    server = runtime.server("approvals", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))

    @runtime.tool(gate=Gate(approvers=ApproverRule(["treasury"])))
    async def transfer(flow: Flow, to: str, amount: int) -> str:
        ledger.ran.append(f"transfer {amount} to {to}")
        return f"sent {amount} to {to}"

    @runtime.tool(gate=Gate(approvers=ApproverRule(["treasury"]), ttl=timedelta(seconds=1)))
    async def wire_out(flow: Flow, to: str) -> str:
        ledger.ran.append(f"wire to {to}")
        return f"wired to {to}"

    @runtime.tool(gate=Gate(approval=PolicyApproval(ledger.rule, name="refunds", every=timedelta(milliseconds=50))))
    async def refund(flow: Flow, order: str) -> str:
        ledger.ran.append(f"refund {order}")
        return f"refunded {order}"

    async def supervisor(request: ApprovalRequest) -> Ruling | None:
        ledger.asked.append(request)
        return None if ledger.agent_holds else Ruling(Verdict.APPROVE, "within this week's budget")

    @runtime.tool(gate=Gate(approval=AgentApproval(supervisor, name="supervisor")))
    async def scale(flow: Flow, replicas: int) -> str:
        ledger.ran.append(f"scale {replicas}")
        return f"scaled to {replicas}"

    pays = PolicyApproval(ledger.limit, name="limits", every=timedelta(hours=1))

    @runtime.tool(gate=Gate(editable=["amount"], approval=pays))
    async def pay(flow: Flow, to: str, amount: int) -> str:
        ledger.ran.append(f"pay {amount} to {to}")
        return f"paid {amount} to {to}"

    with serving(server.streamable_http_app(), port) as base:
        yield runtime, f"{base}/mcp"
    runtime.close()
