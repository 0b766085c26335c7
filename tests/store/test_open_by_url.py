"""`open_store`: the default file, a SQLite URL and a libpq URL each reach their store, with the caller's clock
and the caller's choice whether to migrate."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from mcp_elicit.model import DecisionStatus
from mcp_elicit.store import (
    SCHEMA_VERSION,
    MigrationPending,
    Store,
    StoreConfigError,
    StoreDriverMissing,
    StoreUnavailable,
    open_store,
)
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, Records


@pytest.fixture
def data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An XDG data directory whose parents do not exist yet, as on a fresh account."""
    home = tmp_path / "fresh" / "account" / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    return home


def moved_at_by_the_store(store: Store, clock: FakeClock) -> datetime:
    """When the store says a decision moved: the time of its own clock, a minute after the question."""
    decision = Records(store, clock).form()
    clock.advance(timedelta(minutes=1))
    return store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True}).updated_at


def test_the_default_store_is_created_on_first_open_and_found_on_the_next(data_home: Path, clock: FakeClock) -> None:
    first = open_store(clock=clock)
    try:
        decision = Records(first, clock).form()
    finally:
        first.close()
    assert (data_home / "mcp-elicit" / "elicit.db").is_file()
    second = open_store(clock=clock)
    try:
        assert second.get_decision(decision.elicitation_id, ALICE) == decision
        assert moved_at_by_the_store(second, clock) == clock()
    finally:
        second.close()


def test_checking_the_default_store_without_migrating_creates_nothing(data_home: Path, clock: FakeClock) -> None:
    expected = f"{data_home / 'mcp-elicit' / 'elicit.db'} has no mcp-elicit schema yet"
    with pytest.raises(MigrationPending) as raised:
        open_store(clock=clock, migrate=False)
    assert (raised.value.found, raised.value.supported) == (0, SCHEMA_VERSION)
    assert str(raised.value) == f"{expected}, and this mcp-elicit needs version {SCHEMA_VERSION}"
    assert not data_home.exists()
    (data_home / "mcp-elicit").mkdir(parents=True)
    with pytest.raises(MigrationPending, match="no mcp-elicit schema yet"):
        open_store(clock=clock, migrate=False)
    assert list((data_home / "mcp-elicit").iterdir()) == []


def test_a_sqlite_url_opens_with_the_callers_clock_and_migration_choice(tmp_path: Path, clock: FakeClock) -> None:
    url = f"sqlite://{tmp_path / 'elicit.db'}"
    with pytest.raises(MigrationPending):
        open_store(url, clock=clock, migrate=False)
    assert list(tmp_path.iterdir()) == []
    store = open_store(url, clock=clock)
    try:
        assert moved_at_by_the_store(store, clock) == clock()
    finally:
        store.close()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"], ids=["libpq-long-scheme", "libpq-short-scheme"])
def test_a_libpq_url_is_handed_to_libpq_whatever_its_spelling(scheme: str) -> None:
    """Nothing listens on port 1: the store says it cannot reach the server, so the URL went to PostgreSQL."""
    with pytest.raises(StoreUnavailable, match=r"^cannot reach PostgreSQL at postgresql://nobody@127\.0\.0\.1:1/x"):
        open_store(f"{scheme}://nobody@127.0.0.1:1/x")


@pytest.mark.parametrize("driver", ["psycopg", "psycopg_pool"])
def test_a_libpq_url_without_the_postgres_extra_says_which_extra_in_one_line(
    driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver made unimportable here (`None` in `sys.modules` is how Python marks a module absent);
    tests/system/test_packaging.py shows the same line from a wheel installed without the extra."""
    monkeypatch.setitem(sys.modules, driver, None)
    with pytest.raises(StoreDriverMissing) as raised:
        open_store("postgresql://nobody:hunter2@127.0.0.1:1/x")
    assert str(raised.value) == (
        'a PostgreSQL store needs the postgres extra: pip install "mcp-elicit[postgres]" '
        f"(import of {driver} halted; None in sys.modules)"
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


@pytest.mark.parametrize(
    ("url", "shown"),
    [("MySQL://root@db/x", "'mysql'"), ("Some/Relative/Path/To/elicit.db", "'Some/Relative/Path/T'")],
)
def test_an_unknown_scheme_is_named_or_the_url_quoted_in_short(url: str, shown: str) -> None:
    with pytest.raises(StoreConfigError) as raised:
        open_store(url)
    assert str(raised.value) == (
        f"unknown store URL scheme {shown}: use sqlite:///path/to/file.db or postgresql://user@host/db"
    )
