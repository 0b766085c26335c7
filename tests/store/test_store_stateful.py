"""Random transition sequences against the real store and a pure model, compared after every step.

The model is a few lines over the transition tables: for every decision it keeps (mode, status,
version, expires_at). Each rule predicts the store's answer (success, IllegalTransition, conflict,
expiry, not found) from the model alone, then checks the store gave exactly that.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from mcp_elicit.model import (
    DECISION_TRANSITIONS,
    TERMINAL_DECISION_STATUSES,
    Decision,
    DecisionStatus,
    IllegalTransition,
    JSONObject,
    Mode,
    Operator,
)
from mcp_elicit.store import DecisionConflict, DecisionExpired, NotFound, Store, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, BOB, Records

MOVES = [status for status in DecisionStatus if status is not DecisionStatus.EXPIRED]


@dataclass
class Modelled:
    mode: Mode
    status: DecisionStatus
    version: int
    expires_at_offset: int

    def overdue(self, now: int) -> bool:
        return self.status not in TERMINAL_DECISION_STATUSES and now >= self.expires_at_offset


class StoreMachine(RuleBasedStateMachine):
    url = ""

    decisions = Bundle("decisions")

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.now = 0
        self.store: Store | None = None
        self.model: dict[str, Modelled] = {}
        self.snapshots: dict[str, list[Decision]] = {}

    @initialize()
    def open(self) -> None:
        self.store = open_store(self.fresh_url(), clock=self.clock)
        self.records = Records(self.store, self.clock)
        self.operation = self.records.operation(ttl=timedelta(days=365))

    def fresh_url(self) -> str:
        raise NotImplementedError

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        self.cleanup()

    def cleanup(self) -> None:
        return None

    @property
    def s(self) -> Store:
        assert self.store is not None
        return self.store

    @rule(target=decisions, mode=st.sampled_from(Mode), ttl=st.integers(min_value=1, max_value=120))
    def create(self, mode: Mode, ttl: int) -> str:
        if mode is Mode.FORM:
            decision = self.records.form(self.operation, ttl=timedelta(seconds=ttl), key=uuid.uuid4().hex)
        else:
            decision = self.records.url(self.operation, ttl=timedelta(seconds=ttl), key=uuid.uuid4().hex)
        self.model[decision.elicitation_id] = Modelled(mode, DecisionStatus.REQUESTED, 0, self.now + ttl)
        self.snapshots[decision.elicitation_id] = [decision]
        return decision.elicitation_id

    @rule(
        elicitation_id=decisions,
        to=st.sampled_from(MOVES),
        pick=st.integers(min_value=0, max_value=10),
        as_operator=st.booleans(),
    )
    def transition(self, elicitation_id: str, to: DecisionStatus, pick: int, as_operator: bool) -> None:
        history = self.snapshots[elicitation_id]
        snapshot = history[pick % len(history)]
        expected = self.model[elicitation_id]
        content: JSONObject | None = {"approve": True} if to is DecisionStatus.ACCEPTED else None
        caller = Operator("fuzz") if as_operator else ALICE
        legal = to in DECISION_TRANSITIONS[expected.mode].get(snapshot.status, frozenset())
        fresh = (snapshot.status, snapshot.completion_version) == (expected.status, expected.version)
        try:
            moved = self.s.transition(snapshot, to, caller=caller, content=content)
        except IllegalTransition:
            assert not legal
            return
        except DecisionExpired as error:
            assert legal
            if expected.overdue(self.now):
                expected.status, expected.version = DecisionStatus.EXPIRED, expected.version + 1
            else:
                assert expected.status is DecisionStatus.EXPIRED
            assert (error.current.status, error.current.completion_version) == (expected.status, expected.version)
            history.append(error.current)
            return
        except DecisionConflict as error:
            assert legal and not fresh and not expected.overdue(self.now)
            assert expected.status is not DecisionStatus.EXPIRED
            assert (error.current.status, error.current.completion_version) == (expected.status, expected.version)
            return
        assert legal and fresh and not expected.overdue(self.now)
        expected.status, expected.version = to, expected.version + 1
        assert (moved.status, moved.completion_version) == (to, expected.version)
        history.append(moved)

    @rule(seconds=st.integers(min_value=0, max_value=90))
    def advance(self, seconds: int) -> None:
        self.clock.advance(timedelta(seconds=seconds))
        self.now += seconds

    @rule()
    def sweep(self) -> None:
        due = [m for m in self.model.values() if m.overdue(self.now)]
        assert self.s.sweep_expired().decisions == len(due)
        for modelled in due:
            modelled.status, modelled.version = DecisionStatus.EXPIRED, modelled.version + 1

    @rule(elicitation_id=decisions)
    def stranger_sees_nothing(self, elicitation_id: str) -> None:
        try:
            self.s.get_decision(elicitation_id, BOB)
        except NotFound:
            return
        raise AssertionError("another principal read the decision")

    @invariant()
    def store_agrees_with_model(self) -> None:
        if self.store is None:
            return
        stored = {d.elicitation_id: d for d in self.s.list_decisions(ALICE, limit=10_000)}
        assert stored.keys() == self.model.keys()
        for elicitation_id, expected in self.model.items():
            decision = stored[elicitation_id]
            assert (decision.status, decision.completion_version) == (expected.status, expected.version)

    @invariant()
    def audit_has_one_row_per_version(self) -> None:
        for elicitation_id, expected in list(self.model.items())[-3:]:
            assert len(self.s.audit_trail(elicitation_id, ALICE)) == expected.version + 1


STATEFUL_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def test_sqlite_store_matches_the_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    class SQLiteMachine(StoreMachine):
        def fresh_url(self) -> str:
            return f"sqlite://{tmp_path_factory.mktemp('stateful') / 'elicit.db'}"

    SQLiteMachine.TestCase.settings = STATEFUL_SETTINGS
    SQLiteMachine.TestCase().runTest()


@pytest.mark.postgres
def test_postgres_store_matches_the_model(pg_server: str) -> None:
    import psycopg

    from tests.helpers.environment import with_search_path

    class PostgresMachine(StoreMachine):
        schema = ""

        def fresh_url(self) -> str:
            self.schema = f"s_{uuid.uuid4().hex[:16]}"
            with psycopg.connect(pg_server, autocommit=True) as admin:
                admin.execute(f'CREATE SCHEMA "{self.schema}"')
            return with_search_path(pg_server, self.schema)

        def cleanup(self) -> None:
            if self.schema:
                with psycopg.connect(pg_server, autocommit=True) as admin:
                    admin.execute(f'DROP SCHEMA "{self.schema}" CASCADE')

    PostgresMachine.TestCase.settings = STATEFUL_SETTINGS
    PostgresMachine.TestCase().runTest()
