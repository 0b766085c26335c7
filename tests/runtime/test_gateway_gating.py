"""The gateway's gates (`gateway.gating`) as they are bound and assigned, without a gated call: binding to the
upstream's tool list (a gate stays armed while its tool does not fit), assigning gates to upstreams, and what a
gateway refuses to be built with. Gated calls through a running gateway are on the wire
(`tests/wire/test_gateway_gating.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp_types import Tool

from mcp_elicit.approvals import GateRefused
from mcp_elicit.gateway import Gateway
from mcp_elicit.gateway import upstream as relayed
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.gating import Gates, assign_gates
from mcp_elicit.store import open_store

pytestmark = pytest.mark.anyio


async def bank_tools() -> list[Tool]:
    """The tools a real `MCPServer` with a `transfer` tool lists."""
    bank = MCPServer("bank")

    @bank.tool()
    def transfer(account: str, amount: int) -> str:
        return f"sent {amount} to {account}"

    async with Client(bank) as client:
        return (await client.list_tools()).tools


async def test_a_gate_stays_armed_while_its_tool_is_not_listed() -> None:
    gates = Gates([GateTable(tool="transfer"), GateTable(tool="wire")], "bank")
    with pytest.raises(GateRefused, match="has not listed tool 'transfer' yet"):
        gates.gate_of("transfer")
    problems = gates.bind(await bank_tools())
    assert problems == ["the gate of tool 'wire': upstream 'bank' does not list that tool"]
    assert gates.gate_of("transfer") is not None
    assert gates.gate_of("balance") is None
    with pytest.raises(GateRefused, match="does not list that tool; the call was not forwarded"):
        gates.gate_of("wire")
    assert gates.bind([]) == [
        "the gate of tool 'transfer': upstream 'bank' does not list that tool",
        "the gate of tool 'wire': upstream 'bank' does not list that tool",
    ]
    with pytest.raises(GateRefused):
        gates.gate_of("transfer")


def test_one_tool_gated_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="tool 'pay' has two"):
        Gates([GateTable(tool="pay"), GateTable(tool="pay", when="amount > 1")], "bank")


def test_a_gate_that_cannot_be_bound_to_its_tools_schema_stays_armed_and_says_why() -> None:
    gates = Gates([GateTable(tool="odd")], "bank", "bank")
    odd = Tool(name="odd", input_schema={"$schema": 5, "type": "object", "properties": {"x": {"type": "string"}}})
    [problem] = gates.bind([odd])
    assert problem.startswith("upstream 'bank': ")
    with pytest.raises(GateRefused):
        gates.gate_of("odd")


def test_a_gate_written_with_the_prefixed_name_is_told_the_name_to_use() -> None:
    gates = Gates([GateTable(tool="bank_transfer")], "bank", "bank")
    [problem] = gates.bind([Tool(name="transfer", input_schema={"type": "object"})])
    assert "a gate names the tool as its upstream does: 'transfer'" in problem


def test_gates_are_assigned_to_the_upstream_they_name() -> None:
    bank, shop = (relayed.Upstream(name, command=(f"{name}-server",)) for name in ("bank", "shop"))
    assigned = assign_gates([GateTable(tool="pay", upstream="shop"), GateTable(tool="transfer", upstream="bank")],
                            [bank, shop])  # fmt: skip
    assert {name: [table.tool for table in tables] for name, tables in assigned.items()} == {
        "shop": ["pay"],
        "bank": ["transfer"],
    }
    assert [table.tool for table in assign_gates([GateTable(tool="pay")], [bank])["bank"]] == ["pay"]
    with pytest.raises(ValueError, match=r"gate\[0\]\.upstream: missing; with several upstreams"):
        assign_gates([GateTable(tool="pay")], [bank, shop])
    with pytest.raises(
        ValueError, match=r"gate\[0\]\.upstream: expected one of the upstreams \(bank, shop\), not 'tills'"
    ):
        assign_gates([GateTable(tool="pay", upstream="tills")], [bank, shop])


def test_a_gateway_refuses_gates_it_cannot_keep(tmp_path: Path) -> None:
    bank = relayed.Upstream("bank", command=("bank-server",))
    with pytest.raises(ValueError, match="approval gates need a store"):
        Gateway(bank, gates=[GateTable(tool="pay")])
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    try:
        with pytest.raises(ValueError, match=r"gate\[0\]\.fallback: Fallback.WEB sends the person"):
            Gateway(bank, store=store, gates=[GateTable(tool="pay", fallback="web")])  # no pages without sign-in
        gateway = Gateway(bank, store=store, gates=[GateTable(tool="pay")])
        assert gateway.upstream is bank
        with pytest.raises(RuntimeError, match="relays several upstreams"):
            _ = Gateway(
                [
                    relayed.Upstream("bank", command=("bank-server",), prefix="bank"),
                    relayed.Upstream("shop", url="http://127.0.0.1:9/mcp", prefix="shop"),
                ]
            ).pool
    finally:
        store.close()
