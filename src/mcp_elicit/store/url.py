"""Opening a store from a URL.

`sqlite:///abs/path.db` (or SQLAlchemy's `sqlite:////abs/path.db`) is an absolute path,
`sqlite:relative/path.db` a path relative to the working directory. A SQLite URL takes one parameter,
`?synchronous=normal` (the default) or `?synchronous=full`, and refuses any other, so a misspelt setting
never passes for the default. `postgresql://` and `postgres://` URLs are handed to libpq as they are, so
every libpq parameter works (`?sslmode=`, `?options=`...); they need the `postgres` extra (psycopg), and
without it opening one says so in one line, naming the extra.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from mcp_elicit.store._blocking import Store
from mcp_elicit.store._schema import LATEST_VERSION
from mcp_elicit.store.errors import MigrationPending, StoreConfigError, StoreDriverMissing
from mcp_elicit.store.protocol import Clock
from mcp_elicit.store.sqlite import Synchronous

if TYPE_CHECKING:
    from mcp_elicit.store.postgres import PostgresStore

ENV_VAR = "MCP_ELICIT_STORE"


def utc_now() -> datetime:
    return datetime.now(UTC)


def default_store_path() -> Path:
    """Where the embedded store lives when nobody says otherwise: the user's XDG data directory."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mcp-elicit" / "elicit.db"


def default_store_url() -> str:
    return f"sqlite://{default_store_path()}"


@dataclass(frozen=True, slots=True)
class SQLiteURL:
    """A SQLite store URL taken apart: the file, and how hard each commit is pressed to the disk."""

    path: Path
    synchronous: Synchronous = Synchronous.NORMAL


_SYNCHRONOUS_CHOICES = (
    "synchronous=normal (the default: a commit survives the process crashing) or synchronous=full "
    "(it survives a power cut or an OS crash too)"
)


def sqlite_url(url: str) -> SQLiteURL:
    rest = url[len("sqlite:") :]
    if rest.startswith("//"):
        parts = urlsplit(url)
        if parts.netloc:
            raise StoreConfigError(f"a SQLite URL names a file, not a host: {url!r} (use sqlite:///abs/path.db)")
        if parts.fragment:
            raise StoreConfigError(f"a SQLite URL takes no fragment: {url!r}")
        raw = unquote(parts.path)
        path = "/" + raw.lstrip("/") if raw else ""
        query = parts.query
    else:
        if "#" in rest:
            raise StoreConfigError(f"a SQLite URL takes no fragment: {url!r}")
        text, _, query = rest.partition("?")
        path = unquote(text)
    if not path or path == "/":
        raise StoreConfigError(f"a SQLite URL needs a file path: {url!r} (for example sqlite:///var/lib/app/elicit.db)")
    if path.lstrip("/") == ":memory:" or path.startswith("file:"):
        raise StoreConfigError("an in-memory or URI SQLite database is not durable here; give the store a file path")
    return SQLiteURL(Path(path), _synchronous(query, url))


def _synchronous(query: str, url: str) -> Synchronous:
    chosen: Synchronous | None = None
    for field in query.split("&") if query else ():
        name, _, value = (unquote(part) for part in field.partition("="))
        if name != "synchronous":
            raise StoreConfigError(
                f"unknown SQLite URL parameter {name!r} in {url!r}; the one accepted is {_SYNCHRONOUS_CHOICES}"
            )
        if chosen is not None:
            raise StoreConfigError(f"the SQLite URL {url!r} gives synchronous twice; give it once")
        try:
            chosen = Synchronous(value.lower())
        except ValueError:
            raise StoreConfigError(
                f"synchronous={value!r} in {url!r} is not accepted; use {_SYNCHRONOUS_CHOICES}"
            ) from None
    return Synchronous.NORMAL if chosen is None else chosen


def sqlite_path(url: str) -> Path:
    return sqlite_url(url).path


def open_store(url: str | None = None, *, clock: Clock = utc_now, migrate: bool = True) -> Store:
    """Open (creating and migrating as needed) the store a URL names; `None` means the default file.

    `migrate=False` changes nothing: a store not at this code's schema version, or not there yet, raises
    `MigrationPending` instead.
    """
    from mcp_elicit.store.sqlite import SQLiteStore

    if url is None:
        path = default_store_path()
        if migrate:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.parent.is_dir():
            raise MigrationPending(0, LATEST_VERSION, str(path))
        return SQLiteStore(path, clock=clock, migrate=migrate)
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        target = sqlite_url(url)
        return SQLiteStore(target.path, clock=clock, migrate=migrate, synchronous=target.synchronous)
    if scheme in ("postgresql", "postgres"):
        return _postgres_dialect()(url, clock=clock, migrate=migrate)
    shown = scheme or url[:20]
    raise StoreConfigError(
        f"unknown store URL scheme {shown!r}: use sqlite:///path/to/file.db or postgresql://user@host/db"
    )


POSTGRES_EXTRA = 'pip install "mcp-elicit[postgres]"'
_DRIVER = ("psycopg", "psycopg_pool")


def _postgres_dialect() -> type[PostgresStore]:
    """The PostgreSQL store, imported only when a URL names it: its driver is the `postgres` extra."""
    for name in _DRIVER:
        try:
            importlib.import_module(name)
        except ImportError as error:
            reason = str(error).splitlines()[0]
            raise StoreDriverMissing(
                f"a PostgreSQL store needs the postgres extra: {POSTGRES_EXTRA} ({reason})"
            ) from None
    from mcp_elicit.store.postgres import PostgresStore

    return PostgresStore
