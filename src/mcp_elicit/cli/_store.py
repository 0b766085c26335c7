"""What the operator commands (`decisions`, `grants`, `audit`) share: the `--store` option, the consoles, the
exit codes, the audit's signing keys, and the store opened with its errors turned into exit codes.

A command that writes audit rows opens the store with `writes=True`: with the audit's signing keys set it takes
a mark before it writes and, once it is done, seals the rows written after that mark (see `_sealing`). A seal
refused over a trail edited by hand, or held back by unsealed rows well older than the command, exits
`Exit.SEAL_REFUSED` after the command's own change was made: a store sealed only by these commands from cron
would otherwise stay unsealed for good after one failure, with every run exiting 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from mcp_elicit.cli._sealing import SLACK, Sealed, seal_all
from mcp_elicit.model.audit_keys import AuditSigningKeys
from mcp_elicit.printable import printable
from mcp_elicit.store import ENV_VAR, NotFound, Store, StoreError, open_store, utc_now
from mcp_elicit.store.audit import AuditSealRefused, EarlierRows

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar=ENV_VAR,
        help="Store URL: sqlite:///path/to/file.db or postgresql://user@host/db. Default: the embedded SQLite file.",
        show_default=False,
    ),
]

out = Console(soft_wrap=False)
err = Console(stderr=True)


class Exit:
    NOT_FOUND = 1
    AMBIGUOUS = 1
    CONFLICT = 1
    STORE = 2
    USAGE = 2
    SEAL_REFUSED = 3
    """The command's change was made (and audited), but sealing the audit trail was refused: it was edited, or
    rows older than the command wait unsealed (a store sealed only by these commands would never seal again)."""


SEAL_REFUSED_HELP = (
    f"Exit {Exit.SEAL_REFUSED}: the change was made, but with MCP_ELICIT_AUDIT_KEYS set the audit trail was found "
    "edited by hand, or holding unsealed rows older than the command, and was not sealed (run `mcp-elicit audit "
    "verify`, with `--anchor` if you keep anchors, then `mcp-elicit audit seal`)."
)


class AmbiguousId(Exception):
    """A shortened id that matches more than one decision: a reference to give again, not a store fault."""


def say(console: Console, label: str, style: str, message: str) -> None:
    console.print(Text.assemble((label, style), " ", printable(message)), soft_wrap=True)


def signing_keys() -> AuditSigningKeys | None:
    """The keys of `MCP_ELICIT_AUDIT_KEYS` (or its `_FILE`), None when it is not set; a setting that cannot be
    read exits 2. Read only by commands that write: the settings model costs a listing its start-up time."""
    from mcp_elicit.settings import Settings, SettingsError

    try:
        seeds = Settings.read(only=["audit_keys"]).audit_keys
        return None if seeds is None else AuditSigningKeys(seeds)
    except SettingsError as error:
        for problem in error.problems:
            say(err, "error:", "red", problem)
        raise typer.Exit(Exit.USAGE) from None


@contextmanager
def operator_store(url: str | None, *, writes: bool = False) -> Iterator[Store]:
    """The store at `url`, its errors turned into exit codes. A command that `writes` audit rows seals them once
    it is done (not after an error), when the audit's signing keys are set, read before anything is written."""
    keys = signing_keys() if writes else None
    try:
        store = open_store(url)
    except StoreError as error:
        say(err, "error:", "red", str(error))
        raise typer.Exit(Exit.STORE) from None
    try:
        mark = None if keys is None else (keys, store.last_audit_seq(), utc_now())
        yield store
        if mark is not None:
            _seal_written(store, *mark)
    except AmbiguousId as error:
        say(err, "ambiguous id:", "red", str(error))
        raise typer.Exit(Exit.AMBIGUOUS) from None
    except NotFound as error:
        say(err, "not found:", "red", str(error))
        raise typer.Exit(Exit.NOT_FOUND) from None
    except StoreError as error:
        say(err, "error:", "red", str(error))
        raise typer.Exit(Exit.STORE) from None
    finally:
        store.close()


def _seal_written(store: Store, keys: AuditSigningKeys, mark: int, started: datetime) -> None:
    """Seal what the command wrote; a store that fails is said and leaves the command's own outcome as it was, a
    refusal exits `Exit.SEAL_REFUSED`."""
    try:
        sealed = seal_all(store, keys, written_after=mark)
    except AuditSealRefused as error:
        say(
            err,
            "refused:",
            "red",
            f"the change was made and audited, but the audit trail of {store.display_url} was not sealed: {error}; "
            "run `mcp-elicit audit verify`",
        )
        raise typer.Exit(Exit.SEAL_REFUSED) from None
    except StoreError as error:
        say(err, "warning:", "yellow", f"the audit rows written were not sealed now ({error})")
        return
    left_unsealed(sealed)
    earlier = sealed.earlier
    if earlier is not None and _suspect(earlier, started):
        say(
            err,
            "not sealed:",
            "red",
            f"the change was made and audited, but the audit rows this command wrote were not sealed: "
            f"{earlier.rows:,} unsealed rows were written before it started, the first seq {earlier.seq}, the oldest "
            f"{_age(earlier.oldest_at, started)}. A server running on this store seals them and these within seconds "
            "(nothing is lost); otherwise no command that writes seals again until they are: run `mcp-elicit audit "
            "verify` (with `--anchor ID:ROOT` if you keep anchors; they may be rows a checkpoint covered, unsealed and "
            "edited by hand), then `mcp-elicit audit seal` once you know why they wait.",
        )
        raise typer.Exit(Exit.SEAL_REFUSED)


def _suspect(earlier: EarlierRows, started: datetime) -> bool:
    """Whether rows from before the command are more than the ones a running server wrote just before it."""
    oldest = earlier.oldest_at
    return oldest is None or not started - SLACK <= oldest <= started + SLACK


def _age(at: datetime | None, started: datetime) -> str:
    if at is None:
        return "at a time the store cannot read"
    if at > started:
        return f"dated {_span(at - started)} after this command started"
    return f"written {_span(started - at)} before"


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def left_unsealed(sealed: Sealed) -> None:
    """Say which unsealed audit rows a seal left because the store cannot read them."""
    if sealed.unreadable:
        listed = ", ".join(str(seq) for seq in sorted(sealed.unreadable))
        what = f"audit rows the store cannot read were left unsealed (edited by hand?): seq {listed}"
        say(err, "error:", "red", what)
