"""The store's spans and metrics: one span per transition, metrics counted once the change committed.

A transition inside `atomically` (a call's held writes) commits with the whole unit, or not at all; its
metrics wait for that commit and are dropped with a rollback. A lost compare-and-set is counted at once:
it happened whether or not the unit that saw it commits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, ParamSpec, Protocol, TypeVar

from opentelemetry.util.types import AttributeValue

from mcp_elicit.model import Decision, DecisionStatus, Operation, OperationStatus, SubjectKind
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
T_co = TypeVar("T_co", covariant=True)

_HELD: ContextVar[list[Callable[[], None]] | None] = ContextVar("mcp_elicit_telemetry_held", default=None)
"""What the write transaction under way in this context counts once it commits."""


class _Transaction(Protocol[T_co]):
    async def __aenter__(self) -> T_co: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None: ...


class _Counted:
    """A write transaction whose metrics are recorded when it commits, and forgotten when it does not."""

    __slots__ = ("_held", "_inner", "_token")

    def __init__(self, inner: _Transaction[Any]) -> None:
        self._inner = inner
        self._held: list[Callable[[], None]] = []
        self._token: Token[list[Callable[[], None]] | None] | None = None

    async def __aenter__(self) -> Any:
        self._token = _HELD.set(self._held)
        try:
            return await self._inner.__aenter__()
        except BaseException:
            _HELD.reset(self._token)
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        assert self._token is not None
        try:
            suppressed = await self._inner.__aexit__(kind, error, trace)
        finally:
            _HELD.reset(self._token)
        if kind is None:
            for record in self._held:
                record()
        return suppressed


def counted(transaction: _Transaction[T]) -> _Transaction[T]:
    """`transaction` (a unit's own write transaction), recording the metrics of what it changed at its commit."""
    return _Counted(transaction)


def _after_commit(record: Callable[[], None]) -> None:
    held = _HELD.get()
    if held is None:  # the change's own transaction has committed already
        record()
    else:
        held.append(record)


def expired(kind: SubjectKind, count: int) -> None:
    """`count` records of `kind` expired in the transaction under way."""
    if count == 0:
        return

    def record() -> None:
        otel.expirations.add(count, {otel.SUBJECT: kind.value})
        if kind is SubjectKind.DECISION:
            otel.pending.add(-count)

    _after_commit(record)


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs[name]


def _decision_attributes(decision: Decision) -> dict[str, AttributeValue]:
    return {
        otel.SUBJECT: SubjectKind.DECISION.value,
        otel.DECISION_ID: decision.elicitation_id,
        otel.OPERATION_ID: decision.operation_id,
        otel.MODE: decision.mode.value,
    }


def traced_create(method: Callable[P, Coroutine[Any, Any, Decision]]) -> Callable[P, Coroutine[Any, Any, Decision]]:
    """`SQLCore.create_decision`: a span, and one more pending decision once it commits."""

    @functools.wraps(method)
    async def create(*args: P.args, **kwargs: P.kwargs) -> Decision:
        decision: Decision = _argument(args, kwargs, 1, "decision")
        with otel.span("mcp_elicit.store.create_decision", _decision_attributes(decision)) as current:
            try:
                created = await method(*args, **kwargs)
            except AlreadyExists:
                current.set_attribute(otel.OUTCOME, "exists")
                raise
            except BaseException as error:
                otel.failed(current, error)
                raise
            current.set_attribute(otel.OUTCOME, "created")
        _after_commit(lambda: otel.pending.add(1))
        return created

    return create


def traced_transition(method: Callable[P, Coroutine[Any, Any, Decision]]) -> Callable[P, Coroutine[Any, Any, Decision]]:
    """`SQLCore.transition`: a span; a decision that ends counts as an outcome, with its time to decision."""

    @functools.wraps(method)
    async def transition(*args: P.args, **kwargs: P.kwargs) -> Decision:
        snapshot: Decision = _argument(args, kwargs, 1, "snapshot")
        to: DecisionStatus = _argument(args, kwargs, 2, "to")
        attributes = _decision_attributes(snapshot)
        attributes[otel.FROM_STATUS] = snapshot.status.value
        attributes[otel.TO_STATUS] = to.value
        with otel.span("mcp_elicit.store.transition", attributes) as current:
            try:
                moved = await method(*args, **kwargs)
            except DecisionConflict:
                current.set_attribute(otel.OUTCOME, "conflict")
                otel.conflicts.add(1, {otel.SUBJECT: SubjectKind.DECISION.value})
                raise
            except DecisionExpired:
                current.set_attribute(otel.OUTCOME, "expired")
                raise
            except NotFound:
                current.set_attribute(otel.OUTCOME, "not_found")
                raise
            except BaseException as error:
                otel.failed(current, error)
                raise
            current.set_attribute(otel.OUTCOME, "moved")
        if moved.is_terminal:
            _after_commit(functools.partial(_ended, moved))
        return moved

    return transition


def _ended(decision: Decision) -> None:
    by = {otel.MODE: decision.mode.value, otel.OUTCOME: decision.status.value}
    otel.outcomes.add(1, by)
    otel.duration.record(max((decision.updated_at - decision.created_at).total_seconds(), 0.0), by)
    otel.pending.add(-1)


def traced_finish(method: Callable[P, Coroutine[Any, Any, Operation]]) -> Callable[P, Coroutine[Any, Any, Operation]]:
    """`SQLCore.finish_operation`: a span; an operation another writer moved first counts as a conflict."""

    @functools.wraps(method)
    async def finish(*args: P.args, **kwargs: P.kwargs) -> Operation:
        snapshot: Operation = _argument(args, kwargs, 1, "snapshot")
        to: OperationStatus = _argument(args, kwargs, 2, "to")
        attributes: dict[str, AttributeValue] = {
            otel.SUBJECT: SubjectKind.OPERATION.value,
            otel.OPERATION_ID: snapshot.operation_id,
            otel.METHOD: snapshot.method,
            otel.TARGET: snapshot.target,
            otel.FROM_STATUS: snapshot.status.value,
            otel.TO_STATUS: to.value,
        }
        with otel.span("mcp_elicit.store.finish_operation", attributes) as current:
            try:
                finished = await method(*args, **kwargs)
            except OperationConflict:
                current.set_attribute(otel.OUTCOME, "conflict")
                otel.conflicts.add(1, {otel.SUBJECT: SubjectKind.OPERATION.value})
                raise
            except OperationExpired:
                current.set_attribute(otel.OUTCOME, "expired")
                raise
            except NotFound:
                current.set_attribute(otel.OUTCOME, "not_found")
                raise
            except BaseException as error:
                otel.failed(current, error)
                raise
            current.set_attribute(otel.OUTCOME, "finished")
            return finished

    return finish


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
