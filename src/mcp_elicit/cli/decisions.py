"""`mcp-elicit decisions ...`: the operator's view of pending and past decisions.

Exit codes: 0 done; 1 the decision is not found (or the id prefix names several), already ended, or the
cancel lost a race; 2 the store cannot be used, a stored row included. Everything printed, errors too,
passes through `printable`: stored text reaches the terminal as text, never as control sequences or markup.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from mcp_elicit.cli import _render
from mcp_elicit.model import Decision, DecisionStatus, Operator
from mcp_elicit.printable import printable
from mcp_elicit.store import (
    ENV_VAR,
    NotFound,
    RecordExpired,
    Store,
    StoreError,
    TransitionConflict,
    UnreadableRow,
    open_store,
    utc_now,
)

app = typer.Typer(help="List, inspect, audit, cancel and expire decisions.", no_args_is_help=True)

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar=ENV_VAR,
        help="Store URL: sqlite:///path/to/file.db or postgresql://user@host/db. Default: the embedded SQLite file.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")]

out = Console(soft_wrap=False)
err = Console(stderr=True)


class Exit:
    NOT_FOUND = 1
    AMBIGUOUS = 1
    CONFLICT = 1
    STORE = 2


class AmbiguousId(Exception):
    """A shortened id that matches more than one decision: a reference to give again, not a store fault."""


def _say(console: Console, label: str, style: str, message: str) -> None:
    console.print(Text.assemble((label, style), " ", printable(message)), soft_wrap=True)


@contextmanager
def _store(url: str | None) -> Iterator[Store]:
    try:
        store = open_store(url)
    except StoreError as error:
        _say(err, "error:", "red", str(error))
        raise typer.Exit(Exit.STORE) from None
    try:
        yield store
    except AmbiguousId as error:
        _say(err, "ambiguous id:", "red", str(error))
        raise typer.Exit(Exit.AMBIGUOUS) from None
    except NotFound as error:
        _say(err, "not found:", "red", str(error))
        raise typer.Exit(Exit.NOT_FOUND) from None
    except StoreError as error:
        _say(err, "error:", "red", str(error))
        raise typer.Exit(Exit.STORE) from None
    finally:
        store.close()


def _find(store: Store, reference: str, caller: Operator) -> Decision:
    """The decision a full id or a unique id prefix names; an unreadable match is reported, not skipped."""
    try:
        return store.get_decision(reference, caller)
    except NotFound:
        unreadable: list[UnreadableRow] = []
        matches = store.list_decisions(caller, id_prefix=reference, limit=3, on_unreadable=unreadable.append)
        named = [decision.elicitation_id for decision in matches] + [str(row.row_id) for row in unreadable]
        if len(named) > 1:
            more = " and more" if len(named) > 2 else ""
            raise AmbiguousId(
                f"{reference!r} starts several decision ids ({' and '.join(named[:2])}{more}); give more of the id"
            ) from None
        if unreadable:
            raise unreadable[0] from None
        if matches:
            return matches[0]
        raise


def _operator(name: str | None) -> Operator:
    if name:
        return Operator(name)
    try:
        return Operator(getpass.getuser())
    except (KeyError, OSError):
        return Operator()


@app.command("ls")
def list_decisions(
    store: StoreOption = None,
    status: Annotated[DecisionStatus | None, typer.Option(help="Only decisions in this status.")] = None,
    principal: Annotated[str | None, typer.Option(help="Only decisions of this principal.")] = None,
    operation: Annotated[str | None, typer.Option(help="Only decisions of this operation.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many, newest first.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """List decisions, newest first.

    At a terminal: a table with short ids and the start of each message. Otherwise (a pipe, a file): a
    header line, then one tab-separated line per decision with its full id. A row that cannot be read is
    named on stderr and the others are listed; the exit code is then 2.
    """
    with _store(store) as opened:
        unreadable: list[UnreadableRow] = []
        decisions = opened.list_decisions(
            _operator(None),
            status=status,
            principal_id=principal,
            operation_id=operation,
            limit=limit,
            on_unreadable=unreadable.append,
        )
        if as_json:
            _render.print_json(out, [_render.decision_json(decision) for decision in decisions])
        elif not _to_terminal():
            for line in _render.plain_lines(decisions):
                typer.echo(line)  # not through rich, which would turn the tabs into spaces
        elif decisions:
            out.print(_render.decisions_table(decisions, utc_now()))
        if not decisions and not as_json:
            empty = f"No decisions in {opened.display_url}" + (f" with status {status.value}." if status else ".")
            (out if _to_terminal() else err).print(Text(printable(empty)), soft_wrap=True)
        if unreadable:
            rows = "1 row" if len(unreadable) == 1 else f"{len(unreadable)} rows"
            _say(err, "error:", "red", f"{rows} of {opened.display_url} could not be read and are not listed:")
            for row in unreadable:
                err.print(Text(f"  {printable(str(row))}"), soft_wrap=True)
            raise typer.Exit(Exit.STORE)


def _to_terminal() -> bool:
    """Whether a person reads stdout: the format follows the file, whatever FORCE_COLOR says of colours."""
    try:
        return out.file.isatty()
    except (AttributeError, ValueError):
        return False


@app.command("show")
def show(
    elicitation_id: Annotated[str, typer.Argument(help="The decision's id.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one decision, with sensitive answers redacted."""
    with _store(store) as opened:
        decision = _find(opened, elicitation_id, _operator(None))
        if as_json:
            _render.print_json(out, _render.decision_json(decision))
        else:
            out.print(_render.decision_table(decision, utc_now()))


@app.command("audit")
def audit(
    subject_id: Annotated[str, typer.Argument(help="A decision's or an operation's id.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show every recorded transition of a decision or operation, oldest first."""
    with _store(store) as opened:
        caller = _operator(None)
        try:
            entries = opened.audit_trail(subject_id, caller)
        except NotFound:
            entries = opened.audit_trail(_find(opened, subject_id, caller).elicitation_id, caller)
        if as_json:
            _render.print_json(out, [_render.audit_json(entry) for entry in entries])
        else:
            out.print(_render.audit_table(entries))


@app.command("cancel")
def cancel(
    elicitation_id: Annotated[str, typer.Argument(help="The decision to cancel.")],
    store: StoreOption = None,
    reason: Annotated[str, typer.Option(help="Why; recorded in the audit trail.")] = "cancelled by an operator",
    operator: Annotated[
        str | None, typer.Option("--as", help="Operator name for the audit trail. Default: $USER.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a waiting decision. A decision that already ended is left as it is."""
    actor = _operator(operator)
    with _store(store) as opened:
        decision = _find(opened, elicitation_id, actor)
        if decision.is_terminal:
            _say(err, "not cancelled:", "yellow", f"{decision.elicitation_id} already ended as {decision.status.value}")
            raise typer.Exit(Exit.CONFLICT)
        try:
            cancelled = opened.transition(decision, DecisionStatus.CANCELLED, caller=actor, reason=reason)
        except (TransitionConflict, RecordExpired) as error:
            _say(err, "not cancelled:", "yellow", str(error))
            raise typer.Exit(Exit.CONFLICT) from None
        if as_json:
            _render.print_json(out, _render.decision_json(cancelled))
        else:
            out.print(Text(printable(f"Cancelled {decision.elicitation_id} (was {decision.status.value}).")))


@app.command("sweep")
def sweep(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """Expire every overdue waiting decision and open operation; purge spent single-use tokens."""
    with _store(store) as opened:
        result = opened.sweep_expired()
        if as_json:
            _render.print_json(
                out, {"decisions": result.decisions, "operations": result.operations, "tokens": result.tokens}
            )
        else:
            out.print(
                Text(
                    f"Expired {result.decisions} decision(s) and {result.operations} operation(s); "
                    f"purged {result.tokens} spent token(s)."
                )
            )
