"""The state machines as data.

Every legal move is a row of a table; anything not in the table is illegal and raises
`IllegalTransition` naming both states. Expiry and cancellation are reachable from every waiting state
of a URL flow, because each of them has a TTL and a pending external flow must stay cancellable.
"""

from collections.abc import Mapping

from mcp_elicit.model.status import DecisionStatus, Mode, OperationStatus

_D = DecisionStatus

FORM_TRANSITIONS: Mapping[DecisionStatus, frozenset[DecisionStatus]] = {
    _D.REQUESTED: frozenset({_D.ACCEPTED, _D.DECLINED, _D.CANCELLED, _D.EXPIRED}),
}

URL_TRANSITIONS: Mapping[DecisionStatus, frozenset[DecisionStatus]] = {
    _D.REQUESTED: frozenset({_D.ACCEPTED_URL, _D.DECLINED, _D.CANCELLED, _D.EXPIRED}),
    _D.ACCEPTED_URL: frozenset({_D.EXTERNAL_PENDING, _D.CANCELLED, _D.EXPIRED}),
    _D.EXTERNAL_PENDING: frozenset({_D.EXTERNAL_COMPLETED, _D.EXTERNAL_FAILED, _D.CANCELLED, _D.EXPIRED}),
}

DECISION_TRANSITIONS: Mapping[Mode, Mapping[DecisionStatus, frozenset[DecisionStatus]]] = {
    Mode.FORM: FORM_TRANSITIONS,
    Mode.URL: URL_TRANSITIONS,
}

OPERATION_TRANSITIONS: Mapping[OperationStatus, frozenset[OperationStatus]] = {
    OperationStatus.OPEN: frozenset(
        {
            OperationStatus.COMPLETED,
            OperationStatus.FAILED,
            OperationStatus.CANCELLED,
            OperationStatus.EXPIRED,
        }
    ),
}

WAITING_DECISION_STATUSES: frozenset[DecisionStatus] = frozenset(
    status for table in DECISION_TRANSITIONS.values() for status in table
)
TERMINAL_DECISION_STATUSES: frozenset[DecisionStatus] = frozenset(DecisionStatus) - WAITING_DECISION_STATUSES


class IllegalTransition(ValueError):
    """A move that the state machine does not contain."""

    def __init__(self, kind: str, from_status: str, to_status: str) -> None:
        self.kind = kind
        self.from_status = from_status
        self.to_status = to_status
        super().__init__(f"illegal {kind} transition: {from_status} -> {to_status}")


def is_legal(mode: Mode, from_status: DecisionStatus, to_status: DecisionStatus) -> bool:
    return to_status in DECISION_TRANSITIONS[mode].get(from_status, frozenset())


def check_decision_transition(mode: Mode, from_status: DecisionStatus, to_status: DecisionStatus) -> None:
    if not is_legal(mode, from_status, to_status):
        raise IllegalTransition(f"{mode} decision", from_status, to_status)


def check_operation_transition(from_status: OperationStatus, to_status: OperationStatus) -> None:
    if to_status not in OPERATION_TRANSITIONS.get(from_status, frozenset()):
        raise IllegalTransition("operation", from_status, to_status)
