"""`mcp-elicit doctor`: check the configuration `mcp-elicit serve --transport http` would run with.

The settings are read by serve's own reader (`http_settings`), so doctor and serve never disagree on them.
The store is opened without migrating or creating anything: a database behind this code's schema is
reported as a migration pending, never migrated. Every problem is listed at once, each saying what to do.

Exit codes: 0 all is well; 1 something is wrong (each problem is listed). Everything printed passes through
`printable`: a setting's value reaches the terminal as text, never as control sequences or markup.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from mcp_elicit.cli.serve import public_url_of
from mcp_elicit.printable import printable
from mcp_elicit.reference.deployment import HttpSettings, http_settings
from mcp_elicit.settings import SettingsError
from mcp_elicit.store import (
    ENV_VAR,
    MigrationPending,
    StoreConfigError,
    StoreCorrupt,
    StoreDriverMissing,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
    open_store,
)

PROBLEMS_FOUND = 1
out = Console(highlight=False)


@dataclass(slots=True)
class Findings:
    """What the checks found: each problem says what to do; `fine` says what passed."""

    problems: list[str] = field(default_factory=list)
    fine: list[str] = field(default_factory=list)


def doctor(
    store: Annotated[
        str | None, typer.Option("--store", envvar=ENV_VAR, help="Store URL, as for serve; default: the embedded file.")
    ] = None,
    host: Annotated[str, typer.Option(help="The address serve would listen on (for the default public URL).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port serve would listen on.")] = 8000,
    public_url: Annotated[
        str | None, typer.Option(help="The URL clients and browsers reach the server at (default: host:port).")
    ] = None,
) -> None:
    """Check a deployment's configuration and say everything that is wrong at once, with what to do.

    It reads the environment and options `mcp-elicit serve --transport http` reads: the users, the three key
    rings, the provider settings, the public URL, and the store, which it opens without migrating it.
    """
    findings = check(os.environ, store=store, public_url=public_url_of(public_url, host, port))
    for line in findings.fine:
        out.print(Text.assemble(("ok       ", "green"), printable(line)), soft_wrap=True)
    for line in findings.problems:
        out.print(Text.assemble(("problem  ", "bold red"), printable(line)), soft_wrap=True)
    if findings.problems:
        count = len(findings.problems)
        out.print(
            f"{count} problem{'s' if count > 1 else ''}: fix {'them' if count > 1 else 'it'} before serving "
            "with this configuration",
            style="red",
        )
        raise typer.Exit(PROBLEMS_FOUND)
    out.print("all is well: mcp-elicit serve --transport http can start with this configuration", style="green")


def check(environ: Mapping[str, str], *, store: str | None, public_url: str) -> Findings:
    """Every check, whatever the others found."""
    findings = Findings()
    try:
        settings = http_settings(environ, public_url)
    except SettingsError as error:
        findings.problems.extend(error.problems)
    else:
        findings.fine.extend(_described(settings))
    _check_store(store, findings)
    return findings


def _described(settings: HttpSettings) -> list[str]:
    provider, users = settings.provider, settings.users
    assert users is not None  # serve's settings refuse an identity provider, so its users are set
    return [
        f"public URL {settings.public_url}",
        f"users: {', '.join(users.usernames)}",
        f"key rings: MCP_ELICIT_AUTH_KEYS {_keys(len(settings.auth_keys))}, "
        f"MCP_ELICIT_STATE_KEYS {_keys(len(settings.state_keys))}, "
        f"MCP_ELICIT_VAULT_KEYS {', '.join(settings.vault_keys.key_ids)} "
        f"(sealing with {settings.vault_keys.sealing_key_id})",
        f"provider {provider.url} (client {provider.client_id}): connect_account is served"
        if provider is not None
        else "provider: none configured, so connect_account is not served (set MCP_ELICIT_PROVIDER_URL to serve it)",
    ]


def _keys(count: int) -> str:
    return f"{count} key{'s' if count > 1 else ''}"


def _check_store(url: str | None, findings: Findings) -> None:
    try:
        opened = open_store(url, migrate=False)
    except StoreError as error:
        findings.problems.append(f"store: {error}{_what_to_do(error, url)}")
        return
    try:
        findings.fine.append(f"store {opened.display_url}: schema version {opened.schema_version()}, this code's")
    finally:
        opened.close()


def _what_to_do(error: StoreError, url: str | None) -> str:
    """What to do about a store that cannot be used, when its message does not say it already."""
    if isinstance(error, StoreDriverMissing):
        return ""
    if isinstance(error, StoreConfigError):
        return f"; fix --store or {ENV_VAR}"
    if isinstance(error, MigrationPending):
        if error.found == 0:
            return "; `mcp-elicit serve` creates it when it starts"
        return "; `mcp-elicit serve` migrates it when it starts (back the database up first)"
    if isinstance(error, StoreReadOnly):
        return ""
    if isinstance(error, StoreUnavailable):
        if (url or "").split(":", 1)[0].lower() in ("postgresql", "postgres"):
            return "; check that the PostgreSQL server runs and that the store URL names it: host, port, user, database"
        return "; check that the file's directory exists and that this user may read and write there"
    if isinstance(error, StoreCorrupt):
        return "; point the store URL at mcp-elicit's own database, or restore it from a backup"
    return ""  # SchemaTooNew and the rest say what to do themselves
