"""The `mcp_elicit` tracer and meter, the instruments, and the attribute names every span and metric uses.

The tracer and meter come from the API's global providers, looked up when first used: an application
that sets its SDK providers after importing mcp-elicit still gets its spans and metrics.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from opentelemetry import metrics, trace
from opentelemetry.trace import INVALID_SPAN, ProxyTracerProvider, Span, StatusCode
from opentelemetry.util.types import AttributeValue

NAME = "mcp_elicit"

ERA = "mcp_elicit.era"
METHOD = "mcp_elicit.method"
TARGET = "mcp_elicit.target"
MODE = "mcp_elicit.mode"
OUTCOME = "mcp_elicit.outcome"
SIGNAL = "mcp_elicit.signal"
SUBJECT = "mcp_elicit.subject"
DECISION_ID = "mcp_elicit.decision.id"
DECISION_KEY = "mcp_elicit.decision.key"
OPERATION_ID = "mcp_elicit.operation.id"
STEP = "mcp_elicit.step.name"
FROM_STATUS = "mcp_elicit.status.from"
TO_STATUS = "mcp_elicit.status.to"
EXPIRED_DECISIONS = "mcp_elicit.expired.decisions"
EXPIRED_OPERATIONS = "mcp_elicit.expired.operations"
ERROR_TYPE = "error.type"
RPC_ERROR_CODE = "rpc.jsonrpc.error_code"

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
"""Seconds: a person answers in seconds to hours, and a URL flow may wait a day."""

tracer = trace.get_tracer(NAME)
meter = metrics.get_meter(NAME)

pending = meter.create_up_down_counter(
    "mcp_elicit.decisions.pending",
    unit="{decision}",
    description="Decisions this process created minus those it ended (sum over instances)",
)
duration = meter.create_histogram(
    "mcp_elicit.decision.duration",
    unit="s",
    description="Time from a decision's creation to the terminal state a transition gave it",
    explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
)
outcomes = meter.create_counter(
    "mcp_elicit.decisions.outcomes", unit="{decision}", description="Decisions ended by a transition, by outcome"
)
conflicts = meter.create_counter(
    "mcp_elicit.conflicts", unit="{conflict}", description="Compare-and-sets that lost to another writer"
)
expirations = meter.create_counter(
    "mcp_elicit.expirations", unit="{record}", description="Decisions and operations the clock ended"
)


def recording() -> bool:
    """Whether an SDK is installed that records spans (the API's own provider records nothing)."""
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)


def span(name: str, attributes: dict[str, AttributeValue]) -> AbstractContextManager[Span]:
    """A span that never records an exception's text: `failed` says how it ended instead.

    Without an SDK it is the API's invalid span, handed out without the API's no-op machinery: a store
    transition opens one, and the call path must cost next to nothing when nobody listens.
    """
    if not recording():
        return nullcontext(INVALID_SPAN)
    return tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    )


@dataclass(frozen=True, slots=True)
class Ending:
    """How work ended, by kind only: its `outcome`, and what says more of it where something does (`detail`:
    an error's type, a signal's name, the task a call became, what a client cannot be asked; `code`: the
    JSON-RPC code of an error answered to the caller)."""

    outcome: str
    detail: str | None = None
    code: int | None = None


@runtime_checkable
class Telling(Protocol):
    """A control-flow signal that says how the work it ends ended (the runtime's `Signal`s): the runtime, not
    telemetry, knows what each of its signals means."""

    @property
    def ends_as(self) -> Ending: ...


def ending(error: BaseException) -> Ending:
    """How work that raised `error` ended: `error` with the error's type, `cancelled`, or what the runtime's
    signal says (`Telling`), else `signal` with its name.

    A control-flow signal of the runtime (a `BaseException` that is no `Exception`) is no error: the call's
    turn ended there on purpose. A cancellation neither.
    """
    if isinstance(error, Exception):
        return Ending("error", type(error).__qualname__)
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return Ending("cancelled")
    if isinstance(error, Telling):
        return error.ends_as
    return Ending("signal", type(error).__name__)


def failed(current: Span, error: BaseException, ended: Ending | None = None) -> None:
    """Say on the span how its work ended early (`ended`, by default `ending(error)`).

    Only an `error` marks the span failed (a refused request is the caller's to fix); both name the error's
    type, and a signal is named whatever it says.
    """
    ended = ending(error) if ended is None else ended
    current.set_attribute(OUTCOME, ended.outcome)
    if ended.code is not None:
        current.set_attribute(RPC_ERROR_CODE, ended.code)
    if ended.outcome in ("error", "refused"):
        current.set_attribute(ERROR_TYPE, type(error).__qualname__)
    if ended.outcome == "error":
        current.set_status(StatusCode.ERROR)
    if not isinstance(error, Exception) and ended.outcome != "cancelled":
        current.set_attribute(SIGNAL, type(error).__name__)
