"""The store's spans and metrics: one span per transition, metrics counted once the change committed.

A transition inside `atomically` (a call's held writes) commits with the whole unit, or not at all; its
metrics wait for that commit and are dropped with a rollback. A lost compare-and-set is counted at once:
it happened whether or not the unit that saw it commits.

Inside a unit an engine may check a write with a later statement of the unit (one round trip for several).
While spans are recorded it does not: each write is checked where it is made, inside its own call's span,
so a trace says which one lost.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from opentelemetry.trace import INVALID_SPAN, Span
from opentelemetry.util.types import AttributeValue

from mcp_elicit.model import Decision, DecisionStatus, Operation, OperationStatus, SubjectKind
from mcp_elicit.store._unit import after_commit
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

P = ParamSpec("P")
T = TypeVar("T")


def expired(kind: SubjectKind, count: int) -> None:
    """`count` records of `kind` expired in the transaction under way."""
    if count == 0:
        return

    def record() -> None:
        otel.expirations.add(count, {otel.SUBJECT: kind.value})
        if kind is SubjectKind.DECISION:
            otel.pending.add(-count)

    after_commit(record)


def checked_later() -> bool:
    """Whether a transition inside a unit may be checked with a later statement (see the module's docstring)."""
    return not otel.recording()


def lost(kind: SubjectKind) -> None:
    """A compare-and-set on a `kind` record lost to another writer, found when its unit checked it."""
    otel.conflicts.add(1, {otel.SUBJECT: kind.value})


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs[name]


def _decision_attributes(decision: Decision) -> dict[str, AttributeValue]:
    return {
        otel.SUBJECT: SubjectKind.DECISION.value,
        otel.DECISION_ID: decision.elicitation_id,
        otel.OPERATION_ID: decision.operation_id,
        otel.MODE: decision.mode.value,
    }


Outcomes = tuple[tuple[type[BaseException], str, SubjectKind | None], ...]
"""A store error the span ends with as an outcome, not a failure; with the subject whose conflict it counts."""


def _traced(
    name: str,
    attributes_of: Callable[[tuple[Any, ...], dict[str, Any]], dict[str, AttributeValue]],
    outcomes: Outcomes,
    done: str,
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """`method` inside a span named `name`: its outcome is `done`, one of `outcomes`, or a failure by kind.

    With no SDK recording spans, neither the attributes nor the span are made (every transition passes here);
    a conflict is still counted, for a meter provider may be set without a tracer provider.
    """

    @functools.wraps(method)
    async def traced(*args: P.args, **kwargs: P.kwargs) -> T:
        if not otel.recording():
            try:
                return await method(*args, **kwargs)
            except BaseException as error:
                _ended_early(INVALID_SPAN, error, outcomes)
                raise
        with otel.span(name, attributes_of(args, kwargs)) as current:
            try:
                result = await method(*args, **kwargs)
            except BaseException as error:
                _ended_early(current, error, outcomes)
                raise
            current.set_attribute(otel.OUTCOME, done)
            return result

    return traced


def _ended_early(current: Span, error: BaseException, outcomes: Outcomes) -> None:
    for kind, outcome, conflict_of in outcomes:
        if isinstance(error, kind):
            current.set_attribute(otel.OUTCOME, outcome)
            if conflict_of is not None:
                otel.conflicts.add(1, {otel.SUBJECT: conflict_of.value})
            return
    otel.failed(current, error)


def _created_attributes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, AttributeValue]:
    return _decision_attributes(_argument(args, kwargs, 1, "decision"))


def _transition_attributes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, AttributeValue]:
    snapshot: Decision = _argument(args, kwargs, 1, "snapshot")
    to: DecisionStatus = _argument(args, kwargs, 2, "to")
    return {**_decision_attributes(snapshot), otel.FROM_STATUS: snapshot.status.value, otel.TO_STATUS: to.value}


def _finish_attributes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, AttributeValue]:
    snapshot: Operation = _argument(args, kwargs, 1, "snapshot")
    to: OperationStatus = _argument(args, kwargs, 2, "to")
    return {
        otel.SUBJECT: SubjectKind.OPERATION.value,
        otel.OPERATION_ID: snapshot.operation_id,
        otel.METHOD: snapshot.method,
        otel.TARGET: snapshot.target,
        otel.FROM_STATUS: snapshot.status.value,
        otel.TO_STATUS: to.value,
    }


def traced_create(method: Callable[P, Coroutine[Any, Any, Decision]]) -> Callable[P, Coroutine[Any, Any, Decision]]:
    """`SQLCore.create_decision`: a span, and one more pending decision once it commits."""
    traced = _traced(
        "mcp_elicit.store.create_decision", _created_attributes, ((AlreadyExists, "exists", None),), "created", method
    )

    @functools.wraps(method)
    async def create(*args: P.args, **kwargs: P.kwargs) -> Decision:
        created = await traced(*args, **kwargs)
        after_commit(_one_more_pending)
        return created

    return create


def _one_more_pending() -> None:
    otel.pending.add(1)


def traced_transition(method: Callable[P, Coroutine[Any, Any, Decision]]) -> Callable[P, Coroutine[Any, Any, Decision]]:
    """`SQLCore.transition`: a span; a decision that ends counts as an outcome, with its time to decision."""
    outcomes: Outcomes = (
        (DecisionConflict, "conflict", None),  # counted where it is found: see `lost`
        (DecisionExpired, "expired", None),
        (NotFound, "not_found", None),
    )
    traced = _traced("mcp_elicit.store.transition", _transition_attributes, outcomes, "moved", method)

    @functools.wraps(method)
    async def transition(*args: P.args, **kwargs: P.kwargs) -> Decision:
        moved = await traced(*args, **kwargs)
        if moved.is_terminal:
            after_commit(functools.partial(_ended, moved))
        return moved

    return transition


def _ended(decision: Decision) -> None:
    by = {otel.MODE: decision.mode.value, otel.OUTCOME: decision.status.value}
    otel.outcomes.add(1, by)
    otel.duration.record(max((decision.updated_at - decision.created_at).total_seconds(), 0.0), by)
    otel.pending.add(-1)


def traced_finish(method: Callable[P, Coroutine[Any, Any, Operation]]) -> Callable[P, Coroutine[Any, Any, Operation]]:
    """`SQLCore.finish_operation`: a span; an operation another writer moved first counts as a conflict."""
    outcomes: Outcomes = (
        (OperationConflict, "conflict", SubjectKind.OPERATION),
        (OperationExpired, "expired", None),
        (NotFound, "not_found", None),
    )
    return _traced("mcp_elicit.store.finish_operation", _finish_attributes, outcomes, "finished", method)


def traced_sweep(
    method: Callable[P, Coroutine[Any, Any, SweepResult]],
) -> Callable[P, Coroutine[Any, Any, SweepResult]]:
    """`SQLCore.sweep_expired`: a span with how much it expired (counted by `expired`, batch by batch)."""

    @functools.wraps(method)
    async def sweep(*args: P.args, **kwargs: P.kwargs) -> SweepResult:
        with otel.span("mcp_elicit.store.sweep", {}) as current:
            try:
                result = await method(*args, **kwargs)
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

    return sweep
