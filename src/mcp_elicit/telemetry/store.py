"""The store's spans and metrics, as hooks the store calls (`mcp_elicit.store.hooks`): one span per
transition, metrics counted once the change committed.

A transition inside `atomically` (a call's held writes) commits with the whole unit, or not at all; its
metrics wait for that commit and are dropped with a rollback. A lost compare-and-set is counted at once:
it happened whether or not the unit that saw it commits. The store calls these whether or not an SDK
records anything, and runs the same way either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from mcp_elicit.model import Decision, DecisionStatus, Operation, OperationStatus, SubjectKind
from mcp_elicit.store import hooks
from mcp_elicit.store.errors import (
    AlreadyExists,
    DecisionConflict,
    DecisionExpired,
    NotFound,
    OperationConflict,
    OperationExpired,
)
from mcp_elicit.store.protocol import SweepResult
from mcp_elicit.telemetry import instruments as otel

T = TypeVar("T")

Outcomes = tuple[tuple[type[BaseException], str], ...]
"""A store error the span ends with as an outcome, not a failure."""

_CREATED: Outcomes = ((AlreadyExists, "exists"),)
_MOVED: Outcomes = ((DecisionConflict, "conflict"), (DecisionExpired, "expired"), (NotFound, "not_found"))
_FINISHED: Outcomes = ((OperationConflict, "conflict"), (OperationExpired, "expired"), (NotFound, "not_found"))


async def _traced(
    name: str,
    attributes_of: Callable[[], dict[str, AttributeValue]],
    outcomes: Outcomes,
    done: str,
    call: Callable[[], Awaitable[T]],
) -> T:
    """`call` inside a span named `name`: its outcome is `done`, one of `outcomes`, or a failure by kind.

    With no SDK recording spans, neither the attributes nor the span are made (every transition passes here).
    """
    if not otel.recording():
        return await call()
    with otel.span(name, attributes_of()) as current:
        try:
            result = await call()
        except BaseException as error:
            _ended_early(current, error, outcomes)
            raise
        current.set_attribute(otel.OUTCOME, done)
        return result


def _ended_early(current: Span, error: BaseException, outcomes: Outcomes) -> None:
    for kind, outcome in outcomes:
        if isinstance(error, kind):
            current.set_attribute(otel.OUTCOME, outcome)
            return
    otel.failed(current, error)


def _decision_attributes(decision: Decision) -> dict[str, AttributeValue]:
    return {
        otel.SUBJECT: SubjectKind.DECISION.value,
        otel.DECISION_ID: decision.elicitation_id,
        otel.OPERATION_ID: decision.operation_id,
        otel.MODE: decision.mode.value,
    }


class StoreTelemetry(hooks.StoreHooks):
    """Spans around the store's transitions and its sweep; metrics of what moved."""

    async def creating(self, decision: Decision, create: Callable[[], Awaitable[Decision]]) -> Decision:
        return await _traced(
            "mcp_elicit.store.create_decision", lambda: _decision_attributes(decision), _CREATED, "created", create
        )

    async def transitioning(
        self, snapshot: Decision, to: DecisionStatus, transition: Callable[[], Awaitable[Decision]]
    ) -> Decision:
        def attributes() -> dict[str, AttributeValue]:
            return {
                **_decision_attributes(snapshot),
                otel.FROM_STATUS: snapshot.status.value,
                otel.TO_STATUS: to.value,
            }

        return await _traced("mcp_elicit.store.transition", attributes, _MOVED, "moved", transition)

    async def finishing(
        self, snapshot: Operation, to: OperationStatus, finish: Callable[[], Awaitable[Operation]]
    ) -> Operation:
        def attributes() -> dict[str, AttributeValue]:
            return {
                otel.SUBJECT: SubjectKind.OPERATION.value,
                otel.OPERATION_ID: snapshot.operation_id,
                otel.METHOD: snapshot.method,
                otel.TARGET: snapshot.target,
                otel.FROM_STATUS: snapshot.status.value,
                otel.TO_STATUS: to.value,
            }

        return await _traced("mcp_elicit.store.finish_operation", attributes, _FINISHED, "finished", finish)

    async def sweeping(self, sweep: Callable[[], Awaitable[SweepResult]]) -> SweepResult:
        """A span with how much the sweep expired (counted by `committed`, batch by batch)."""
        with otel.span("mcp_elicit.store.sweep", {}) as current:
            try:
                result = await sweep()
            except BaseException as error:
                otel.failed(current, error)
                raise
            current.set_attributes(
                {
                    otel.OUTCOME: "swept",
                    otel.EXPIRED_DECISIONS: result.decisions,
                    otel.EXPIRED_OPERATIONS: result.operations,
                }
            )
            return result

    def conflict(self, kind: SubjectKind) -> None:
        """Counted even with no tracer: a meter provider may be set without one."""
        otel.conflicts.add(1, {otel.SUBJECT: kind.value})

    def committed(self, change: hooks.Committed) -> None:
        if isinstance(change, hooks.DecisionCreated):
            otel.pending.add(1)
        elif isinstance(change, hooks.DecisionEnded):
            decision = change.decision
            by = {otel.MODE: decision.mode.value, otel.OUTCOME: decision.status.value}
            otel.outcomes.add(1, by)
            otel.duration.record(max((decision.updated_at - decision.created_at).total_seconds(), 0.0), by)
            otel.pending.add(-1)
        else:
            otel.expirations.add(change.count, {otel.SUBJECT: change.kind.value})
            if change.kind is SubjectKind.DECISION:
                otel.pending.add(-change.count)


TELEMETRY = StoreTelemetry()


def install() -> None:
    """Have every store of this process report its spans and metrics (the runtime does this when built; a
    program using the store alone calls it itself). Without an SDK configured, each report is a no-op."""
    hooks.install(TELEMETRY)
