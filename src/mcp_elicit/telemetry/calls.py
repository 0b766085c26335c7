"""The spans of the runtime: a served call, a question put to the person, a journaled step; and the log
line that says how each served call ended.

A call's span sets the ids its log records carry (see `context`); the operation id joins them once the
runtime found the call's operation, and a question's decision id while it is put to the person. Every
served call, whether an SDK records spans or not, ends with one INFO record of this module's logger
(`ended`): method, target, era, operation, outcome and duration, as text in its message and, for the JSON
log format, as fields (`era`, `outcome`, `duration_ms`, and what says more of the outcome, see `OUTCOMES`).
The runtime wraps everything it does for a call in `traced_call`, its refusals before the body runs
included, so the one line is logged however the call ends; what the SDK refuses before the runtime is
called (an unknown tool, arguments that fail the tool's schema) is the SDK's to log.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    URL_ELICITATION_REQUIRED,
    InputRequiredResult,
)
from opentelemetry.util.types import AttributeValue

from mcp_elicit.model import Decision, Operation
from mcp_elicit.telemetry import instruments as otel
from mcp_elicit.telemetry.context import CALL, DECISION, CallIds

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger(__name__)

OUTCOMES = {
    "result": None,
    "replayed": None,
    "input_required": None,
    "task": "task_id",
    "cannot_ask": "needs",
    "refused": None,
    "error": "error_type",
    "cancelled": None,
    "signal": "signal",
}
"""How a served call ends, and the JSON field of what says more: it returned its result, the recorded result of
an identical call, or a turn that waits for the person (a 2026-07-28 round, or -32042 to open a URL); it
became an MCP task; the client could not be asked (the `needs` it lacks) and the tool's fallback answered;
the request was refused as made (-32600, -32601, -32602, -32021); it failed; the client gave up. An error
answered as JSON-RPC adds its code (`error_code`)."""
_REFUSED = frozenset((INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY))


class Run(Protocol):
    """A call's run of a body over its operation (the runtime's `Execution`)."""

    @property
    def operation(self) -> Operation: ...


class Replay(Protocol):
    """A completed operation's recorded result handed to an identical call (the runtime's `Replayed`)."""

    @property
    def operation(self) -> Operation: ...


Runner = TypeVar("Runner", bound=Run)


async def traced_call(method: str, target: str, era: str, work: Awaitable[R], *, replay: type[Replay]) -> R:
    """Await `work`, the runtime serving one call, in the call's span; `replay` is the type of a replayed result.

    However it ends, the call's end is logged (`ended`) while its ids and its span are still current.
    """
    ids = CallIds(method, target, era)
    token = CALL.set(ids)
    started = time.monotonic()
    outcome = otel.Ending("cancelled")
    attributes: dict[str, AttributeValue] = (
        {otel.METHOD: method, otel.TARGET: target, otel.ERA: era} if otel.recording() else {}
    )
    try:
        with otel.span("mcp_elicit.call", attributes) as current:
            try:
                try:
                    result = await work
                except BaseException as error:
                    outcome = _call_ending(error)
                    otel.failed(current, error, outcome)
                    raise
                finally:
                    if ids.operation_id is not None:
                        current.set_attribute(otel.OPERATION_ID, ids.operation_id)
                if isinstance(result, InputRequiredResult):
                    outcome = otel.Ending("input_required")
                elif isinstance(result, replay):
                    outcome = otel.Ending("replayed")
                    ids.operation_id = result.operation.operation_id
                    current.set_attribute(otel.OPERATION_ID, ids.operation_id)
                else:
                    outcome = otel.Ending("result")
                current.set_attribute(otel.OUTCOME, outcome.outcome)
                return result
            finally:
                ended(ids, outcome, time.monotonic() - started)  # in the span: a log bridge links it to the trace
    finally:
        CALL.reset(token)


def _call_ending(error: BaseException) -> otel.Ending:
    """How a call that raised `error` ended (`OUTCOMES`): an error the caller gets as JSON-RPC says it by its
    code, which tells a turn waiting at a URL and a refused request from a failure."""
    if not isinstance(error, MCPError):
        return otel.ending(error)
    code = error.error.code
    if code == URL_ELICITATION_REQUIRED:
        return otel.Ending("input_required", code=code)
    if code in _REFUSED:
        return otel.Ending("refused", code=code)
    return otel.Ending("error", type(error).__qualname__, code)


def ended(ids: CallIds, outcome: otel.Ending, seconds: float) -> None:
    """The one INFO record of a served call's end, logged in its context (so JSON lines carry its ids)."""
    if not log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, object] = {"era": ids.era, "outcome": outcome.outcome, "duration_ms": round(seconds * 1000, 1)}
    said = [str(part) for part in (outcome.detail, outcome.code) if part is not None]
    if outcome.detail is not None:
        fields[OUTCOMES.get(outcome.outcome) or "signal"] = outcome.detail
    if outcome.code is not None:
        fields["error_code"] = outcome.code
    how = f"{outcome.outcome} ({' '.join(said)})" if said else outcome.outcome
    log.info(
        "%s %s ended: %s after %.1f ms (era %s, operation %s)",
        ids.method, ids.target, how, seconds * 1000, ids.era, ids.operation_id or "none", extra=fields,
    )  # fmt: skip


def in_operation(operation: Operation) -> None:
    """The call under way runs in `operation`: its span and its log records say so from here on."""
    ids = CALL.get()
    if ids is not None:
        ids.operation_id = operation.operation_id


def _run_attributes(run: Run) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {otel.OPERATION_ID: run.operation.operation_id}
    ids = CALL.get()
    if ids is not None:
        attributes[otel.ERA] = ids.era
    return attributes


def traced_ask(
    method: Callable[Concatenate[Runner, Decision, P], Awaitable[Decision]],
) -> Callable[Concatenate[Runner, Decision, P], Awaitable[Decision]]:
    """`Execution._put_to_person`: a span per question put to the person; its outcome is the decision's status
    after (`requested` when the answer is still awaited) or the signal that ended the turn."""

    @functools.wraps(method)
    async def ask(run: Runner, decision: Decision, /, *args: P.args, **kwargs: P.kwargs) -> Decision:
        token = DECISION.set(decision.elicitation_id)
        try:
            if not otel.recording():
                return await method(run, decision, *args, **kwargs)
            attributes = _run_attributes(run)
            attributes.update(
                {
                    otel.DECISION_ID: decision.elicitation_id,
                    otel.DECISION_KEY: decision.key,
                    otel.MODE: decision.mode.value,
                }
            )
            with otel.span("mcp_elicit.ask", attributes) as current:
                try:
                    answered = await method(run, decision, *args, **kwargs)
                except BaseException as error:
                    otel.failed(current, error)
                    raise
                current.set_attribute(otel.OUTCOME, answered.status.value)
                return answered
        finally:
            DECISION.reset(token)

    return ask


def traced_step(
    method: Callable[Concatenate[Runner, str, P], Awaitable[R]],
) -> Callable[Concatenate[Runner, str, P], Awaitable[R]]:
    """`Execution.step`: a span per journaled step, whether it runs or its journaled result is returned."""

    @functools.wraps(method)
    async def step(run: Runner, name: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if not otel.recording():
            return await method(run, name, *args, **kwargs)
        attributes = _run_attributes(run)
        attributes[otel.STEP] = name
        with otel.span("mcp_elicit.step", attributes) as current:
            try:
                result = await method(run, name, *args, **kwargs)
            except BaseException as error:
                otel.failed(current, error)
                raise
            current.set_attribute(otel.OUTCOME, "completed")
            return result

    return step
