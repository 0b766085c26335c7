"""An illegal move names its machine and both states, so a refusal in a log says which record moved how."""

from __future__ import annotations

import itertools

import pytest

from mcp_elicit.model import (
    DecisionStatus,
    IllegalTransition,
    Mode,
    OperationStatus,
    check_decision_transition,
    check_operation_transition,
)

ENDS = {OperationStatus.COMPLETED, OperationStatus.FAILED, OperationStatus.CANCELLED, OperationStatus.EXPIRED}


@pytest.mark.parametrize(
    ("mode", "source", "target", "kind"),
    [
        (Mode.FORM, DecisionStatus.ACCEPTED, DecisionStatus.REQUESTED, "form decision"),
        (Mode.URL, DecisionStatus.EXTERNAL_COMPLETED, DecisionStatus.CANCELLED, "url decision"),
    ],
)
def test_an_illegal_decision_move_names_the_mode_and_both_states(
    mode: Mode, source: DecisionStatus, target: DecisionStatus, kind: str
) -> None:
    with pytest.raises(IllegalTransition) as raised:
        check_decision_transition(mode, source, target)
    assert (raised.value.kind, raised.value.from_status, raised.value.to_status) == (kind, source, target)
    assert str(raised.value) == f"illegal {kind} transition: {source} -> {target}"


def test_an_operation_only_ever_ends_once_from_open() -> None:
    for source, target in itertools.product(OperationStatus, repeat=2):
        if source is OperationStatus.OPEN and target in ENDS:
            check_operation_transition(source, target)
            continue
        with pytest.raises(IllegalTransition) as raised:
            check_operation_transition(source, target)
        assert (raised.value.kind, raised.value.from_status, raised.value.to_status) == ("operation", source, target)
        assert str(raised.value) == f"illegal operation transition: {source} -> {target}"
