"""Opening a store from a URL.

`sqlite:///abs/path.db` (or SQLAlchemy's `sqlite:////abs/path.db`) is an absolute path,
`sqlite:relative/path.db` a path relative to the working directory. `postgresql://` and `postgres://`
URLs are handed to libpq as they are, so every libpq parameter works (`?sslmode=`, `?options=`...).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mcp_elicit.store.errors import StoreConfigError
from mcp_elicit.store.protocol import Clock, Store

ENV_VAR = "MCP_ELICIT_STORE"


def utc_now() -> datetime:
    return datetime.now(UTC)


def default_store_path() -> Path:
    """Where the embedded store lives when nobody says otherwise: the user's XDG data directory."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mcp-elicit" / "elicit.db"


def default_store_url() -> str:
    return f"sqlite://{default_store_path()}"


def sqlite_path(url: str) -> Path:
    rest = url[len("sqlite:") :]
    if rest.startswith("//"):
        parts = urlsplit(url)
        if parts.netloc:
            raise StoreConfigError(f"a SQLite URL names a file, not a host: {url!r} (use sqlite:///abs/path.db)")
        if parts.query or parts.fragment:
            raise StoreConfigError(f"a SQLite URL takes no query or fragment: {url!r}")
        raw = unquote(parts.path)
        path = "/" + raw.lstrip("/") if raw else ""
    else:
        if "?" in rest or "#" in rest:
            raise StoreConfigError(f"a SQLite URL takes no query or fragment: {url!r}")
        path = unquote(rest)
    if not path or path == "/":
        raise StoreConfigError(f"a SQLite URL needs a file path: {url!r} (for example sqlite:///var/lib/app/elicit.db)")
    if path.lstrip("/") == ":memory:" or path.startswith("file:"):
        raise StoreConfigError("an in-memory or URI SQLite database is not durable here; give the store a file path")
    return Path(path)


def open_store(url: str | None = None, *, clock: Clock = utc_now) -> Store:
    """Open (creating and migrating as needed) the store a URL names; `None` means the default file."""
    from mcp_elicit.store.sqlite import SQLiteStore

    if url is None:
        path = default_store_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteStore(path, clock=clock)
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        return SQLiteStore(sqlite_path(url), clock=clock)
    if scheme in ("postgresql", "postgres"):
        from mcp_elicit.store.postgres import PostgresStore

        return PostgresStore(url, clock=clock)
    shown = scheme or url[:20]
    raise StoreConfigError(
        f"unknown store URL scheme {shown!r}: use sqlite:///path/to/file.db or postgresql://user@host/db"
    )
