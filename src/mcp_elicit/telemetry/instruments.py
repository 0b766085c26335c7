"""The `mcp_elicit` tracer and meter, the instruments, and the attribute names every span and metric uses.

The tracer and meter come from the API's global providers, looked up when first used: an application
that sets its SDK providers after importing mcp-elicit still gets its spans and metrics.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager, nullcontext

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


def ending(error: BaseException) -> tuple[str, str | None]:
    """How work that raised `error` ended, by kind only: the outcome (`error`, `cancelled` or `signal`) and
    the error's type or the signal's name.

    A control-flow signal of the runtime (a `BaseException` that is no `Exception`) is no error: the call's
    turn ended there on purpose. A cancellation neither.
    """
    if isinstance(error, Exception):
        return "error", type(error).__qualname__
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "cancelled", None
    return "signal", type(error).__name__


def failed(current: Span, error: BaseException) -> None:
    """Say on the span how its work ended early (`ending`)."""
    outcome, kind = ending(error)
    current.set_attribute(OUTCOME, outcome)
    if outcome == "error":
        current.set_attribute(ERROR_TYPE, str(kind))
        current.set_status(StatusCode.ERROR)
    elif outcome == "signal":
        current.set_attribute(SIGNAL, str(kind))
