"""Store URLs taken apart before anything is opened: the SQLite forms, what they refuse and why, and where
the embedded store lives when no URL is given."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import pytest

from mcp_elicit.store import StoreConfigError
from mcp_elicit.store.sqlite import Synchronous
from mcp_elicit.store.url import SQLiteURL, default_store_path, default_store_url, sqlite_url, utc_now


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("sqlite:///Xylo/e.db", SQLiteURL(Path("/Xylo/e.db"))),
        ("sqlite:////srv/e.db?synchronous=FULL", SQLiteURL(Path("/srv/e.db"), Synchronous.FULL)),
        ("sqlite:Xdata/e.db?synchronous=normal", SQLiteURL(Path("Xdata/e.db"), Synchronous.NORMAL)),
        ("sqlite:X:memory:", SQLiteURL(Path("X:memory:"))),
        ("sqlite:///data/file:e.db", SQLiteURL(Path("/data/file:e.db"))),
    ],
)
def test_a_sqlite_url_names_a_file_and_how_hard_commits_reach_the_disk(url: str, parsed: SQLiteURL) -> None:
    assert sqlite_url(url) == parsed


@pytest.mark.parametrize("url", ["sqlite:///var/lib/e.db#main", "sqlite:e.db#", "sqlite:e.db?synchronous=full#x"])
def test_a_fragment_is_refused_rather_than_read_as_part_of_the_file_name(url: str) -> None:
    with pytest.raises(StoreConfigError) as raised:
        sqlite_url(url)
    assert str(raised.value) == f"a SQLite URL takes no fragment: {url!r}"


@pytest.mark.parametrize("url", ["sqlite:", "sqlite:/", "sqlite://", "sqlite:///", "sqlite:////"])
def test_a_url_without_a_file_is_refused(url: str) -> None:
    with pytest.raises(StoreConfigError) as raised:
        sqlite_url(url)
    assert str(raised.value) == (
        f"a SQLite URL needs a file path: {url!r} (for example sqlite:///var/lib/app/elicit.db)"
    )


@pytest.mark.parametrize("url", ["sqlite::memory:", "sqlite:///:memory:", "sqlite:file:e.db", "sqlite:file:e.db?x=1"])
def test_a_database_that_is_not_a_plain_file_is_refused(url: str) -> None:
    with pytest.raises(StoreConfigError) as raised:
        sqlite_url(url)
    assert str(raised.value) == ("an in-memory or URI SQLite database is not durable here; give the store a file path")


def test_a_refused_parameter_is_named_with_the_url_it_came_in() -> None:
    with pytest.raises(StoreConfigError) as raised:
        sqlite_url("sqlite:e.db?mode=ro")
    assert str(raised.value).startswith("unknown SQLite URL parameter 'mode' in 'sqlite:e.db?mode=ro'; ")


def test_the_default_store_is_in_the_xdg_data_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_store_path() == tmp_path / "data" / "mcp-elicit" / "elicit.db"
    assert default_store_url() == f"sqlite://{tmp_path}/data/mcp-elicit/elicit.db"


@pytest.mark.parametrize("xdg", [None, ""], ids=["unset", "empty"])
def test_without_an_xdg_data_directory_the_default_is_under_the_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdg: str | None
) -> None:
    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_store_path() == tmp_path / ".local" / "share" / "mcp-elicit" / "elicit.db"


def test_the_stores_clock_reads_utc() -> None:
    assert utc_now().tzinfo is UTC
