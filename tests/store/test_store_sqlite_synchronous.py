"""`sqlite:///path.db?synchronous=full|normal`: the setting reaches every connection, anything else is refused."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mcp_elicit.store import StoreConfigError, open_store
from mcp_elicit.store.sqlite import SQLiteStore, Synchronous
from mcp_elicit.store.url import sqlite_url
from tests.helpers.clock import FakeClock
from tests.helpers.records import Records

# What `PRAGMA synchronous` reads back: SQLite's numbers for NORMAL and FULL.
NORMAL, FULL = 1, 2


def pragma_here_and_in_a_thread(store: SQLiteStore) -> tuple[int, int]:
    """`PRAGMA synchronous` on the store's connection of this thread and on the one another thread opens."""
    other: list[int] = []
    worker = threading.Thread(
        target=lambda: other.append(store.connection().execute("PRAGMA synchronous").fetchone()[0])
    )
    worker.start()
    worker.join()
    return store.connection().execute("PRAGMA synchronous").fetchone()[0], other[0]


@pytest.mark.parametrize(
    ("query", "level"),
    [("", NORMAL), ("?synchronous=normal", NORMAL), ("?synchronous=full", FULL), ("?synchronous=FULL", FULL)],
)
def test_the_setting_is_applied_on_every_connection(tmp_path: Path, clock: FakeClock, query: str, level: int) -> None:
    store = open_store(f"sqlite://{tmp_path / 'elicit.db'}{query}", clock=clock)
    try:
        assert isinstance(store, SQLiteStore)
        assert pragma_here_and_in_a_thread(store) == (level, level)
        Records(store, clock).form()  # and the store works with it
        assert store.display_url.endswith("elicit.db?synchronous=full" if level == FULL else "elicit.db")
    finally:
        store.close()


def test_both_url_forms_take_the_setting() -> None:
    assert sqlite_url("sqlite:data/e.db?synchronous=full").path == Path("data/e.db")
    assert sqlite_url("sqlite:data/e.db?synchronous=full").synchronous is Synchronous.FULL
    assert sqlite_url("sqlite:////abs/e.db").synchronous is Synchronous.NORMAL


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?synchronous=extra", "synchronous='extra' in"),
        ("?synchronous=off", "synchronous='off' in"),
        ("?synchronous=", "synchronous='' in"),
        ("?synchronous", "synchronous='' in"),
        ("?sync=full", "unknown SQLite URL parameter 'sync'"),
        ("?synchronous=full&journal_mode=delete", "unknown SQLite URL parameter 'journal_mode'"),
        ("?synchronous=full&synchronous=normal", "gives synchronous twice"),
    ],
)
def test_other_values_and_parameters_are_refused_naming_what_is_accepted(
    tmp_path: Path, query: str, named: str
) -> None:
    path = tmp_path / "elicit.db"
    with pytest.raises(StoreConfigError, match="synchronous") as refused:
        open_store(f"sqlite://{path}{query}")
    message = str(refused.value)
    assert named in message
    if "twice" not in named:
        assert "synchronous=normal" in message and "synchronous=full" in message
    assert not path.exists()  # refused before anything was opened
