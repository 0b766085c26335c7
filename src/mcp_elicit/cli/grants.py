"""`mcp-elicit grants ...`: the operator's view of standing grants, and revoking them.

A grant lets later calls of one tool from one app (principal and client) run without asking, for a session or
always (see `mcp_elicit.approvals.Grants`). One grant of a principal, client, tool and scope is active at a time
(a later approval of the same calls replaces the earlier grant, which is listed as revoked), so revoking it takes
effect at once: the next call it would have covered is asked again. Exit codes as for `decisions`: 0 done; 1 the
grant is not found (or the id prefix names several) or already ended (revoked, expired); 2 the store cannot be
used, a stored row included; 3 the grant was revoked, but the audit trail was found edited by hand and not
sealed (with `MCP_ELICIT_AUDIT_KEYS` set, `revoke` seals what it wrote, as `decisions cancel` does). Everything
printed passes through `printable`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated

import typer
from rich.text import Text

from mcp_elicit.cli import _render
from mcp_elicit.cli._store import SEAL_REFUSED_HELP, AmbiguousId, Exit, StoreOption, err, operator_store, out, say
from mcp_elicit.cli.decisions import PAGE, JsonOption, _emit, _json_line, _operator, _to_terminal, _unreadable_exit
from mcp_elicit.model import Grant, Operator
from mcp_elicit.printable import printable
from mcp_elicit.store import GrantEnded, GrantFilter, NotFound, Store, UnreadableRow, utc_now

app = typer.Typer(help="List and revoke standing grants (approvals of later calls).", no_args_is_help=True)


def _find(store: Store, reference: str, caller: Operator) -> Grant:
    """The grant a full id or a unique id prefix names."""
    try:
        return store.get_grant(reference, caller)
    except NotFound:
        page = store.grant_page(caller, GrantFilter(id_prefix=reference), limit=3)
        named = [grant.grant_id for grant in page.grants] + [str(row.row_id) for row in page.unreadable]
        if len(named) > 1:
            more = " and more" if len(named) > 2 else ""
            raise AmbiguousId(
                f"{reference!r} starts several grant ids ({' and '.join(named[:2])}{more}); give more of the id"
            ) from None
        if page.unreadable:
            raise page.unreadable[0] from None
        if page.grants:
            return page.grants[0]
        raise


class _Listing:
    """What `ls` lists, a page at a time: the rows read, the unreadable ones, and the next page's cursor."""

    def __init__(self, store: Store, where: GrantFilter, after: str | None, limit: int) -> None:
        self.store, self.where = store, where
        self.after = after
        self.rows = 0
        self.unreadable: list[UnreadableRow] = []
        self.next_after: str | None = None
        self._left = limit

    def pages(self) -> Iterator[list[Grant]]:
        try:
            first = self._read(self.after)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--after") from None
        return self._from(first)

    def _from(self, page: list[Grant]) -> Iterator[list[Grant]]:
        while True:
            yield page
            if self.next_after is None or self._left == 0:
                return
            page = self._read(self.next_after)

    def _read(self, after: str | None) -> list[Grant]:
        page = self.store.grant_page(_operator(None), self.where, after=after, limit=min(PAGE, self._left))
        self.rows += page.rows
        self._left -= page.rows
        self.unreadable.extend(page.unreadable)
        self.next_after = page.after
        return page.grants


@app.command("ls")
def list_grants(
    store: StoreOption = None,
    principal: Annotated[str | None, typer.Option(help="Only grants of this principal.")] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Also grants that were revoked or have expired (history).")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 100,
    after: Annotated[
        str | None,
        typer.Option(
            metavar="CURSOR",
            help="Go on past the grants a listing showed: the cursor it printed after them (same filters).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List standing grants, newest first: by default those that let calls through now.

    At a terminal: a table with short ids. Otherwise (a pipe, a file): a header line, then one tab-separated line
    per grant with its full id. `--json`: a JSON array, one grant a line. A listing cut short by `--limit` ends
    with the cursor of the next page (on stderr unless at a terminal). A row that cannot be read is named on
    stderr and every other is listed; the exit code is then 2.
    """
    with operator_store(store) as opened:
        now = utc_now()
        listing = _Listing(opened, GrantFilter(principal_id=principal, active=not everything), after, limit)
        pages = listing.pages()
        if as_json:
            listed = _write_json(pages, now)
        elif not _to_terminal():
            listed = _write_plain(pages, now)
        else:
            grants = [grant for page in pages for grant in page]
            if grants:
                out.print(_render.grants_table(grants, now))
            listed = len(grants)
        if not listed and not as_json:
            which = "grants" if everything else "active grants"
            past = " past the cursor given" if after is not None else ""
            said = f"No {which} in {opened.display_url}{past}."
            (out if _to_terminal() else err).print(Text(printable(said)), soft_wrap=True)
        if listing.next_after is not None and listing.rows:
            person = _to_terminal() and not as_json
            more = f"Listed {listing.rows:,} grants, newest first; the next page (same filters):\n  --after "
            (out if person else err).print(Text(more + listing.next_after), soft_wrap=not person)
        _unreadable_exit(opened, listing.unreadable)


def _write_plain(pages: Iterator[list[Grant]], now: datetime) -> int:
    """The header line, then each page's tab-separated lines as it comes; how many grants were written."""
    sys.stdout.write("\t".join(_render.GRANT_COLUMNS) + "\n")
    written = 0
    for page in pages:
        if page:
            lines = list(_render.grant_plain_lines(page, now))[1:]
            sys.stdout.write("".join(line + "\n" for line in lines))
            sys.stdout.flush()
            written += len(page)
    return written


def _write_json(pages: Iterator[list[Grant]], now: datetime) -> int:
    """A JSON array written as it is read, one grant a line; how many grants were written."""
    terminal = _to_terminal()
    written = 0
    _emit("[", terminal)
    for page in pages:
        for grant in page:
            _emit(("," if written else "") + "\n" + _json_line(_render.grant_json(grant, now)), terminal)
            written += 1
        sys.stdout.flush()
    _emit("\n]\n", terminal)
    return written


@app.command("revoke", epilog=SEAL_REFUSED_HELP)
def revoke(
    grant_id: Annotated[str, typer.Argument(help="The grant's id, or a unique start of it.")],
    store: StoreOption = None,
    reason: Annotated[str, typer.Option(help="Why; recorded in the audit trail.")] = "revoked by an operator",
    operator: Annotated[
        str | None, typer.Option("--as", help="Operator name for the audit trail. Default: $USER.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke a standing grant: from now on, the calls it covered are asked again. A grant that already ended
    (revoked before, or expired) is left as it is, and the exit code is 1."""
    actor = _operator(operator)
    with operator_store(store, writes=True) as opened:
        grant = _find(opened, grant_id, actor)
        try:
            revoked = opened.revoke_grant(grant.grant_id, caller=actor, reason=reason)
        except GrantEnded as ended:
            say(err, "not revoked:", "yellow", str(ended))
            raise typer.Exit(Exit.CONFLICT) from None
        if as_json:
            _render.print_json(out, _render.grant_json(revoked, utc_now()))
            return
        scope = f" with {revoked.scope}" if revoked.scope is not None else ""
        said = (
            f"Revoked {revoked.grant_id}: {revoked.tool}{scope} for {revoked.principal_id} through "
            f"{revoked.client_id}. Its calls are asked again."
        )
        out.print(Text(printable(said)), soft_wrap=True)
