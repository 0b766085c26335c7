"""`mcp-elicit decisions ...`: the operator's view of pending and past decisions.

Exit codes: 0 done; 1 the decision is not found (or the id prefix names several), already ended, or the
cancel lost a race; 2 the store cannot be used, a stored row included, or the audit's signing keys are set but
cannot be read; 3 (`cancel`, `sweep`) the change was made, but the audit trail was found edited by hand and not
sealed. Everything printed, errors too, passes through `printable`: stored text reaches the terminal as text,
never as control sequences or markup.

`cancel` and `sweep` (and `grants revoke`) write audit rows: with the audit's signing keys set
(`MCP_ELICIT_AUDIT_KEYS`) they seal the rows written after they started before they return, as a served app
would, and nothing while an older row waits unsealed (see `_sealing`); a store that fails then is said on stderr
and leaves the exit code as the command's own outcome set it; a seal refused over an edited trail, or held back by
unsealed rows well older than the command, exits 3.

`ls` reads the store a page at a time (keyset pages, `Store.decision_page`) and, into a pipe or as JSON,
writes each page before reading the next: a listing of any length holds one page in memory.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Iterator
from itertools import islice
from typing import Annotated

import typer
from rich.highlighter import JSONHighlighter
from rich.text import Text

from mcp_elicit.cli import _render
from mcp_elicit.cli._store import SEAL_REFUSED_HELP, AmbiguousId, Exit, StoreOption, err, operator_store, out, say
from mcp_elicit.model import Decision, DecisionStatus, Operator
from mcp_elicit.printable import hidden, printable
from mcp_elicit.store import (
    DecisionFilter,
    NotFound,
    RecordExpired,
    Store,
    TransitionConflict,
    UnreadableRow,
    utc_now,
)

app = typer.Typer(help="List, inspect, audit, cancel and expire decisions.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")]
PAGE = 500
"""Decisions `ls` reads at a time, whatever `--limit` says."""
_JSON = json.JSONEncoder(ensure_ascii=False)


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


def _unreadable_exit(store: Store, rows: list[UnreadableRow], *notes: str) -> None:
    """After the rows that could be read: name each one that could not on stderr (by id and column, never by
    what it holds), say what else that leaves out, and end with the store's exit code. Nothing when none."""
    if not rows:
        return
    count = "1 row" if len(rows) == 1 else f"{len(rows)} rows"
    left = "is" if len(rows) == 1 else "are"
    say(err, "error:", "red", f"{count} of {store.display_url} could not be read and {left} left out:")
    for row in rows:
        err.print(Text(f"  {printable(str(row))}"), soft_wrap=True)
    for note in notes:
        err.print(Text(printable(note)), soft_wrap=True)
    raise typer.Exit(Exit.STORE)


def _operator(name: str | None) -> Operator:
    if name:
        return Operator(name)
    try:
        return Operator(getpass.getuser())
    except (KeyError, OSError):
        return Operator()


class _Listing:
    """What `ls` lists, read a page at a time, with what the lines after it need: how many rows were read,
    the unreadable ones (decisions, and the rows a task status is read from), the operations whose task
    status could not be read, and the cursor of the next page."""

    def __init__(self, store: Store, caller: Operator, where: DecisionFilter, after: str | None, limit: int) -> None:
        self.store, self.caller, self.where, self.after = store, caller, where, after
        self.rows = 0
        self.unreadable: list[UnreadableRow] = []
        self.without_status: list[str] = []
        self.next_after: str | None = None
        self._left = limit

    def pages(self) -> Iterator[list[Decision]]:
        """The pages; the first is read at once, so that a bad cursor is refused before anything is written."""
        try:
            first = self._read(self.after)
        except ValueError as error:  # only a cursor given can be one: the later ones are the store's own
            raise typer.BadParameter(str(error), param_hint="--after") from None
        return self._from(first)

    def _from(self, page: list[Decision]) -> Iterator[list[Decision]]:
        while True:
            yield page
            if self.next_after is None or self._left == 0:
                return
            page = self._read(self.next_after)

    def _read(self, after: str | None) -> list[Decision]:
        page = self.store.decision_page(self.caller, self.where, after=after, limit=min(PAGE, self._left))
        self.rows += page.rows
        self._left -= page.rows
        self.unreadable.extend(page.unreadable)
        self.next_after = page.after
        return page.decisions

    def tasks_of(self, decisions: list[Decision]) -> dict[str, str]:
        """The task status of each operation of `decisions` that is a task (the others are left out). An
        operation whose status cannot be read is left out too, and its unreadable row kept for the report."""
        if not decisions:
            return {}
        from mcp_elicit.server.tasks.state import task_status  # brings the MCP SDK: only once there are rows

        tasks: dict[str, str] = {}
        for operation_id in dict.fromkeys(decision.operation_id for decision in decisions):
            if operation_id in self.without_status:
                continue
            try:
                status = task_status(self.store, operation_id, self.caller)
            except NotFound:
                continue
            except UnreadableRow as row:
                self.without_status.append(operation_id)
                if str(row) not in map(str, self.unreadable):
                    self.unreadable.append(row)
                continue
            if status is not None:
                tasks[operation_id] = status
        return tasks

    def notes(self) -> list[str]:
        """What the unreadable rows leave out besides themselves."""
        without = "are listed without a task status."
        return [f"The decisions of operation {operation_id} {without}" for operation_id in self.without_status]

    def summary(self) -> str | None:
        """Where these rows are in the whole listing, and how to go on; nothing for a listing shown whole."""
        if self.rows == 0 or (self.next_after is None and self.after is None):
            return None
        total = self.store.count_decisions(self.caller, self.where)
        first = 1
        if self.after is not None:
            first = total - self.store.count_decisions(self.caller, self.where, after=self.after) + 1
        last = first + self.rows - 1
        total = max(total, last)
        span = f" ({first:,} to {last:,})" if self.after is not None else ""
        listed = f"Listed {self.rows:,} of {total:,} decisions{span}, newest first"
        if self.next_after is None:
            return f"{listed}; that is the last page."
        return f"{listed}; the next page (same filters):\n  --after {self.next_after}"


@app.command("ls")
def list_decisions(
    store: StoreOption = None,
    status: Annotated[DecisionStatus | None, typer.Option(help="Only decisions in this status.")] = None,
    principal: Annotated[str | None, typer.Option(help="Only decisions of this principal.")] = None,
    operation: Annotated[str | None, typer.Option(help="Only decisions of this operation.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 100,
    after: Annotated[
        str | None,
        typer.Option(
            metavar="CURSOR",
            help="Go on past the decisions a listing showed: the cursor it printed after them (same filters).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List decisions, newest first.

    At a terminal: a table with short ids and the start of each message. Otherwise (a pipe, a file): a
    header line, then one tab-separated line per decision with its full id. `--json`: a JSON array, one
    decision a line. A decision asked by a tool call that runs as an MCP task shows that task's status
    (`task`: working, input_required, completed, failed, cancelled). A listing cut short by `--limit`
    ends with "Listed 100 of 10,000 decisions" and the
    cursor of the next page (on stderr unless at a terminal); `--after CURSOR` lists that page. A row
    that cannot be read is named on stderr and every other is listed (a decision whose operation cannot be
    read, without its task status); the exit code is then 2.
    """
    with operator_store(store) as opened:
        listing = _Listing(
            opened, _operator(None), DecisionFilter(status=status, principal_id=principal, operation_id=operation),
            after, limit,
        )  # fmt: skip
        pages = ((page, listing.tasks_of(page)) for page in listing.pages())
        if as_json:
            listed = _write_json(pages)
        elif not _to_terminal():
            listed = _write_plain(pages)
        else:
            decisions, tasks = [], {}
            for page, page_tasks in pages:
                decisions.extend(page)
                tasks.update(page_tasks)
            if decisions:
                out.print(_render.decisions_table(decisions, utc_now(), tasks))
            listed = len(decisions)
        if not listed and not as_json:
            past = " past the cursor given" if after is not None else ""
            empty = f"No decisions in {opened.display_url}" + (f" with status {status.value}" if status else "")
            (out if _to_terminal() else err).print(Text(printable(f"{empty}{past}.")), soft_wrap=True)
        summary = listing.summary()
        if summary is not None:
            person = _to_terminal() and not as_json
            (out if person else err).print(Text(summary), soft_wrap=not person)
        _unreadable_exit(opened, listing.unreadable, *listing.notes())


def _write_plain(pages: Iterator[tuple[list[Decision], dict[str, str]]]) -> int:
    """The header line, then each page's tab-separated lines as it comes (not through rich, which would turn the
    tabs into spaces); how many decisions were written."""
    sys.stdout.write("\t".join(_render.PLAIN_COLUMNS) + "\n")
    written = 0
    for page, tasks in pages:
        if page:
            sys.stdout.write("".join(line + "\n" for line in islice(_render.plain_lines(page, tasks), 1, None)))
            sys.stdout.flush()
            written += len(page)
    return written


def _write_json(pages: Iterator[tuple[list[Decision], dict[str, str]]]) -> int:
    """A JSON array written as it is read, one decision a line; how many decisions were written."""
    terminal = _to_terminal()
    written = 0
    _emit("[", terminal)
    for page, tasks in pages:
        for decision in page:
            shown = _render.decision_json(decision, tasks.get(decision.operation_id))
            _emit(("," if written else "") + "\n" + _json_line(shown), terminal)
            written += 1
        sys.stdout.flush()
    _emit("\n]\n", terminal)
    return written


def _emit(text: str, terminal: bool) -> None:
    if terminal:
        out.print(JSONHighlighter()(Text(text)), end="", soft_wrap=True)
    else:
        sys.stdout.write(text)


def _json_line(value: object) -> str:
    """Compact JSON in which every character `printable` would show is escaped instead of written, as
    `_render.json_text` does; the quick test first, since such characters are rare."""
    text = _JSON.encode(value)
    if text.isprintable():
        return text
    return "".join(json.dumps(character)[1:-1] if hidden(character) else character for character in text)


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
    """Show one decision, with sensitive answers redacted; one that approvers decide, with their votes."""
    with operator_store(store) as opened:
        decision = _find(opened, elicitation_id, _operator(None))
        votes = opened.votes(decision.elicitation_id) if decision.approvers is not None else None
        if as_json:
            _render.print_json(out, _render.decision_json(decision, votes=votes))
        else:
            out.print(_render.decision_table(decision, utc_now(), votes))


@app.command("audit")
def audit(
    subject_id: Annotated[
        str,
        typer.Argument(help="A decision's, grant's or operation's id (of a decision or grant, a unique start of it)."),
    ],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show every recorded transition of a decision or operation, oldest first.

    At a terminal: a table. Otherwise (a pipe, a file): a header line, then one tab-separated line per
    transition (`details` as JSON), as `ls` writes. `--json`: a JSON array. An audit row that cannot be read
    is named on stderr and the others are shown; the exit code is then 2.
    """
    with operator_store(store) as opened:
        caller = _operator(None)
        unreadable: list[UnreadableRow] = []
        try:
            entries = opened.audit_trail(subject_id, caller, on_unreadable=unreadable.append)
        except NotFound:
            found = _audited(opened, subject_id, caller)
            entries = opened.audit_trail(found, caller, on_unreadable=unreadable.append)
        if as_json:
            _render.print_json(out, [_render.audit_json(entry) for entry in entries])
        elif _to_terminal():
            out.print(_render.audit_table(entries))
        else:
            sys.stdout.write("".join(line + "\n" for line in _render.audit_plain_lines(entries)))
        _unreadable_exit(opened, unreadable)


def _audited(store: Store, reference: str, caller: Operator) -> str:
    """The id of the decision or the grant a unique id prefix names: a prefix that starts one of each names neither."""
    from mcp_elicit.cli.grants import _find as _find_grant  # `grants` builds on this module

    def decision() -> str:
        return _find(store, reference, caller).elicitation_id

    def grant() -> str:
        return _find_grant(store, reference, caller).grant_id

    named: list[tuple[str, str]] = []
    for kind, find in (("a decision", decision), ("a grant", grant)):
        try:
            named.append((kind, find()))
        except NotFound:
            continue
    if len(named) > 1:
        both = " and ".join(f"{kind} id ({found})" for kind, found in named)
        raise AmbiguousId(f"{reference!r} starts {both}; give more of the id")
    if not named:
        raise NotFound(f"no decision, grant or operation {reference}")
    return named[0][1]


@app.command("cancel", epilog=SEAL_REFUSED_HELP)
def cancel(
    elicitation_id: Annotated[str, typer.Argument(help="The decision to cancel.")],
    store: StoreOption = None,
    reason: Annotated[str, typer.Option(help="Why; recorded in the audit trail.")] = "cancelled by an operator",
    operator: Annotated[
        str | None, typer.Option("--as", help="Operator name for the audit trail. Default: $USER.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a waiting decision. A decision that already ended is left as it is.

    A decision of a tool call that runs as an MCP task (or the task's operation id) cancels the task: its
    open questions and its operation; the task's body stops at its next look.
    """
    from mcp_elicit.server.tasks.state import task_status

    actor = _operator(operator)
    with operator_store(store, writes=True) as opened:
        decision: Decision | None = None
        try:
            operation_id = opened.get_operation(elicitation_id, actor).operation_id
        except NotFound:
            decision = _find(opened, elicitation_id, actor)
            operation_id = decision.operation_id
        if task_status(opened, operation_id, actor) is not None:
            _cancel_task(opened, operation_id, actor, reason, as_json)
            return
        if decision is None:
            say(err, "not cancelled:", "yellow", f"{elicitation_id} is an operation, not a task: cancel its decisions")
            raise typer.Exit(Exit.NOT_FOUND)
        if decision.is_terminal:
            say(err, "not cancelled:", "yellow", f"{decision.elicitation_id} already ended as {decision.status.value}")
            raise typer.Exit(Exit.CONFLICT)
        try:
            cancelled = opened.transition(decision, DecisionStatus.CANCELLED, caller=actor, reason=reason)
        except (TransitionConflict, RecordExpired) as error:
            say(err, "not cancelled:", "yellow", str(error))
            raise typer.Exit(Exit.CONFLICT) from None
        if as_json:
            _render.print_json(out, _render.decision_json(cancelled))
        else:
            out.print(Text(printable(f"Cancelled {decision.elicitation_id} (was {decision.status.value}).")))


def _cancel_task(store: Store, operation_id: str, actor: Operator, reason: str, as_json: bool) -> None:
    from mcp_elicit.server.tasks.state import TaskAlreadyEnded, cancel_task

    try:
        cancelled = cancel_task(store, operation_id, actor, reason)
    except TaskAlreadyEnded as ended:
        say(err, "not cancelled:", "yellow", str(ended))
        raise typer.Exit(Exit.CONFLICT) from None
    if as_json:
        _render.print_json(out, {"task": cancelled.operation_id, "status": cancelled.status.value})
    else:
        out.print(Text(printable(f"Cancelled the task {operation_id} and its open questions.")))


@app.command("sweep", epilog=SEAL_REFUSED_HELP)
def sweep(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """Expire every overdue waiting decision and open operation; purge spent single-use tokens."""
    with operator_store(store, writes=True) as opened:
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
