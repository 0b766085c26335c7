"""The ids of the call under way in this context, for log records and for the spans opened inside it."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class CallIds:
    """What a call's log records and spans name; the operation is filled in once the runtime found it."""

    method: str
    target: str
    era: str
    operation_id: str | None = None


CALL: ContextVar[CallIds | None] = ContextVar("mcp_elicit_call", default=None)
DECISION: ContextVar[str | None] = ContextVar("mcp_elicit_decision", default=None)


def current_ids() -> dict[str, str]:
    """`operation_id`, `decision_id`, `method` and `target` of the call (and question) under way, those known."""
    ids: dict[str, str] = {}
    call = CALL.get()
    if call is not None:
        ids["method"] = call.method
        ids["target"] = call.target
        if call.operation_id is not None:
            ids["operation_id"] = call.operation_id
    decision = DECISION.get()
    if decision is not None:
        ids["decision_id"] = decision
    return ids
