"""The gateway's approval gates at work: which gate a call meets, and a gated call run through the core's runtime.

Binding. The `[[gate]]` tables are bound to the tools the upstream lists, at start and again whenever its tool
list changes. What does not fit (a gate naming a tool the upstream does not list, editable arguments or a `when`
that the tool's schema does not have) is said each time, and the gate stays armed: a call of that tool is
refused, naming the gate and why, until the upstream lists the tool so that the gate fits. Nothing a gate
guards runs unasked because the upstream changed.

A gated call runs through `Elicitation.run_tool` with the bound gate (`Questions.call_gated`), so the approval is a
durable decision of the call's operation, bound to the caller and to the digest of the call's arguments, asked on
whatever the client's era offers (a live `elicitation/create`, a 2026-07-28 round, the web page), recorded and
audited. The arguments forwarded are the ones approved (edited only where the gate allows, checked against the
tool's input schema). The forward is a step that runs at most once: its start is durable once it holds a session
with the upstream and before the request leaves, so a gateway that dies after forwarding and before recording the
upstream's answer never forwards it again; the identical call then fails with `OutcomeUnknown`, naming the
operation and the upstream tool. What the upstream asks during the forward (a 2026-07-28 upstream's round, a
handshake upstream's `elicitation/create`) is asked through the same operation, and each message that makes the
upstream go on is a further step that runs at most once (`mcp_elicit.gateway.questions`).

Does not guarantee: that the upstream ran the call when the outcome is unknown, nor that it did not.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from mcp_types import Tool

from mcp_elicit.approvals import GatedTool, GateRefused
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.routing import SEPARATOR, prefixed
from mcp_elicit.gateway.upstream import Upstream
from mcp_elicit.server import Fallback

log = logging.getLogger(__name__)


def assign_gates(tables: Sequence[GateTable], upstreams: Sequence[Upstream]) -> dict[str, list[GateTable]]:
    """The `[[gate]]` tables of each upstream, by its name; `ValueError` naming the table (`gate[2].upstream`) whose
    upstream is not one of them, or that names none when there are several."""
    names = [upstream.name for upstream in upstreams]
    assigned: dict[str, list[GateTable]] = {}
    for index, table in enumerate(tables):
        if table.upstream is None and len(names) > 1:
            raise ValueError(f"gate[{index}].upstream: missing; with several upstreams a gate names its upstream")
        name = table.upstream if table.upstream is not None else names[0]
        if name not in names:
            raise ValueError(
                f"gate[{index}].upstream: expected one of the upstreams ({', '.join(names)}), not {name!r}"
            )
        assigned.setdefault(name, []).append(table)
    return assigned


class Gates:
    """The gates of one upstream's tools, by tool name, each bound to the tool as it is listed now."""

    def __init__(self, tables: Sequence[GateTable], upstream: str, prefix: str | None = None) -> None:
        seen: dict[str, GateTable] = {}
        for table in tables:
            if table.tool in seen:
                raise ValueError(f"upstream {upstream!r}: tool {table.tool!r} has two [[gate]] tables; merge them")
            seen[table.tool] = table
        self.upstream = upstream
        self.prefix = prefix
        """How the gateway's clients see the upstream's names (`prefix_tool`): the name a gate is shown and its
        grants kept under, so that a grant for one upstream's tool never lets another's through."""
        self.tables = seen
        self.listed = False
        """Bound to a listing of the upstream's tools at least once."""
        self._bound: dict[str, GatedTool | str] = {
            name: f"the upstream has not listed tool {name!r} yet" for name in seen
        }

    def __bool__(self) -> bool:
        return bool(self.tables)

    def bind(self, tools: Iterable[Tool]) -> list[str]:
        """Bind every gate to its tool as `tools` (the upstream's whole list) has it; what does not fit, one line
        per gate. Such a gate stays armed (its tool's calls are refused)."""
        listed = {tool.name: tool for tool in tools}
        self.listed = True
        problems = []
        for name, table in self.tables.items():
            tool = listed.get(name)
            if tool is None:
                problem = f"the gate of tool {name!r}: upstream {self.upstream!r} does not list that tool"
                unprefixed = name.removeprefix(f"{self.prefix}{SEPARATOR}") if self.prefix else name
                if unprefixed != name and unprefixed in listed:
                    problem += f" (a gate names the tool as its upstream does: {unprefixed!r})"
                self._bound[name] = problem
                problems.append(problem)
                continue
            try:
                self._bound[name] = table.bind(tool, prefixed(self.prefix, name))
            except GateRefused as refused:
                problem = f"upstream {self.upstream!r}: {refused}"
                self._bound[name] = problem
                problems.append(problem)
            except Exception as error:  # a schema no one foresaw: the gate stays armed, the gateway runs on
                problem = f"upstream {self.upstream!r}: the gate of tool {name!r} cannot be bound to it: {error!r}"
                self._bound[name] = problem
                problems.append(problem)
        for problem in problems:
            log.warning("%s; its calls are refused until it fits", problem)
        return problems

    def gate_of(self, tool: str) -> GatedTool | None:
        """The bound gate of `tool`, None for a tool no gate names; `GateRefused` for a gate that is armed but could
        not be bound (its calls are refused, saying why)."""
        bound = self._bound.get(tool)
        if bound is None or isinstance(bound, GatedTool):
            return bound
        raise GateRefused(f"{bound}; the call was not forwarded, because the gate cannot ask for its approval")

    def fallback_of(self, tool: str) -> Fallback:
        return Fallback(self.tables[tool].fallback)
