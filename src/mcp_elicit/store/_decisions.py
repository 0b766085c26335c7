"""Decisions: the questions put to a person, their listings, and their moves by compare-and-set.

A move that matches no row is followed by a second read in the same transaction that says why (missing,
someone else's, lost race, overdue), and an overdue decision is expired right there, so a late signal can
never wake it. Listings are keyset pages in the order of the `elicit_decisions_newest` index.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp_elicit.model import (
    Actor,
    Caller,
    Decision,
    DecisionStatus,
    JSONObject,
    JSONValue,
    SubjectKind,
    check_decision_transition,
    redact_content,
    redact_url,
)
from mcp_elicit.model.transitions import TERMINAL_DECISION_STATUSES
from mcp_elicit.store import hooks
from mcp_elicit.store._core import (
    DECISION_COLUMNS,
    DECISION_NAMES,
    Core,
    _binding,
    _committed,
    _decoded,
    _lost,
    _marks,
    _quoted,
    json_text,
)
from mcp_elicit.store._engine import ForeignKeyViolation, Tx, UniqueViolation
from mcp_elicit.store._schema import WAITING_SQL
from mcp_elicit.store.errors import (
    AlreadyExists,
    DecisionConflict,
    DecisionExpired,
    NotFound,
    StoreError,
    UnreadableRow,
    VoteRefusal,
    VoteRefused,
)
from mcp_elicit.store.protocol import DecisionFilter, DecisionPage, NotificationEvent

_ID_PREFIX = re.compile(r"[0-9a-fA-F-]{1,36}")
_ASKED = (NotificationEvent.DECISION_WAITING, NotificationEvent.TASK_INPUT_REQUIRED)
_ENDED = (NotificationEvent.DECISION_ENDED,)
_ESCALATED = (NotificationEvent.DECISION_ESCALATED,)


class DecisionsCore(Core):
    async def create_decision(self, decision: Decision) -> Decision:
        observer = hooks.installed()
        if observer is None:
            return await self._create_decision(decision)
        created = await observer.creating(decision, functools.partial(self._create_decision, decision))
        _committed(hooks.DecisionCreated(created))
        return created

    async def _create_decision(self, decision: Decision) -> Decision:
        if decision.status is not DecisionStatus.REQUESTED or decision.completion_version != 0:
            raise ValueError("a decision is created requested, at version 0")
        details: JSONObject = {
            "mode": decision.mode.value,
            "operation_id": decision.operation_id,
            "key": decision.key,
            "expires_at": decision.expires_at.isoformat(),
        }
        if decision.url is not None:
            details["url"] = redact_url(decision.url)
        if decision.approvers is not None:
            details["approvers"] = decision.approvers.dumped()
        try:
            async with self._write() as tx:
                await tx.execute(
                    f"INSERT INTO elicit_decisions ({DECISION_COLUMNS}) VALUES ({_marks(len(DECISION_NAMES))})",
                    self._decision_row(decision),
                )
                self._audit(
                    tx, SubjectKind.DECISION, decision.elicitation_id, None, decision.status,
                    decision.principal.actor, "requested", details, decision.created_at,
                )  # fmt: skip
                self._outbox(tx, _ASKED, [decision.elicitation_id], decision.created_at)
                escalation = (
                    None if decision.approvers is None else decision.approvers.escalates_at(decision.created_at)
                )
                if escalation is not None and escalation < decision.expires_at:
                    # Written now, due then: a deliverer claims it no sooner, and sends it if the decision still waits.
                    self._outbox(tx, _ESCALATED, [decision.elicitation_id], escalation)
        except UniqueViolation as clash:
            if "operation_key" in str(clash) or "elicit_decisions.key" in str(clash):
                raise AlreadyExists(
                    f"operation {decision.operation_id} already has a question under key {decision.key!r}"
                ) from None
            raise AlreadyExists(f"decision {decision.elicitation_id} already exists") from None
        except ForeignKeyViolation:
            raise NotFound(f"no operation {decision.operation_id} for decision {decision.elicitation_id}") from None
        return decision

    async def _select_decision(self, tx: Tx, elicitation_id: str, caller: Caller) -> Decision | None:
        where, params = _binding(caller)
        row = await tx.one(
            f"SELECT {DECISION_COLUMNS} FROM elicit_decisions WHERE elicitation_id = %s{where}",
            (elicitation_id, *params),
        )
        return None if row is None else self._decision(row)

    async def get_decision(self, elicitation_id: str, caller: Caller) -> Decision:
        async with self._read() as tx:
            decision = await self._select_decision(tx, elicitation_id, caller)
        if decision is None:
            raise NotFound(f"no decision {elicitation_id}")
        return decision

    async def list_decisions(
        self,
        caller: Caller,
        *,
        status: DecisionStatus | None = None,
        principal_id: str | None = None,
        operation_id: str | None = None,
        expiring_before: datetime | None = None,
        id_prefix: str | None = None,
        limit: int = 100,
        on_unreadable: Callable[[UnreadableRow], None] | None = None,
    ) -> list[Decision]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where = DecisionFilter(status, principal_id, operation_id, expiring_before, id_prefix)
        return _decoded(await self._decision_rows(caller, where, None, limit), self._decision, on_unreadable)

    async def decision_page(
        self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> DecisionPage:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        rows = await self._decision_rows(caller, where or DecisionFilter(), after, limit + 1)
        unreadable: list[UnreadableRow] = []
        decisions = _decoded(rows[:limit], self._decision, unreadable.append)
        last = rows[limit - 1] if len(rows) > limit else None
        return DecisionPage(decisions, unreadable, None if last is None else _cursor(last[_CREATED], last[0]))

    async def count_decisions(
        self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None
    ) -> int:
        found = self._decision_filter(caller, where or DecisionFilter(), after)
        if found is None:
            return 0
        clauses, values = found
        async with self._read() as tx:
            row = await tx.one(f"SELECT count(*) FROM elicit_decisions WHERE 1 = 1{clauses}", values)
        return int(row[0])

    async def _decision_rows(self, caller: Caller, where: DecisionFilter, after: str | None, limit: int) -> list[Any]:
        found = self._decision_filter(caller, where, after)
        if found is None:
            return []
        clauses, values = found
        async with self._read() as tx:
            # The order is the elicit_decisions_newest index's, so a page reads its own rows and no others.
            return await tx.all(
                f"SELECT {DECISION_COLUMNS} FROM elicit_decisions WHERE 1 = 1{clauses}"
                " ORDER BY created_at DESC, elicitation_id LIMIT %s",
                (*values, limit),
            )

    def _decision_filter(
        self, caller: Caller, where: DecisionFilter, after: str | None
    ) -> tuple[str, list[object]] | None:
        """The clauses to append to `WHERE 1 = 1`, and their values; `None` when no decision can match."""
        if where.id_prefix is not None and not _ID_PREFIX.fullmatch(where.id_prefix):
            return None
        binding, params = _binding(caller)
        clauses: list[str] = [binding] if binding else []
        values: list[object] = list(params)
        for clause, value in (
            (" AND status = %s", None if where.status is None else DecisionStatus(where.status).value),
            (" AND principal_id = %s", where.principal_id),
            (" AND operation_id = %s", where.operation_id),
            (" AND elicitation_id LIKE %s", where.id_prefix and where.id_prefix.lower() + "%"),
            (
                f" AND status IN {WAITING_SQL} AND expires_at < %s",
                where.expiring_before and self._to_time(where.expiring_before),
            ),
        ):
            if value is not None:
                clauses.append(clause)
                values.append(value)
        if after is not None:
            created, elicitation_id = self._decision_cursor_key(after)
            # The first condition is the index's range; the second drops the rows of the cursor's own instant
            # up to and including the cursor's row.
            clauses.append(" AND created_at <= %s AND (created_at < %s OR elicitation_id > %s)")
            values.extend((created, created, elicitation_id))
        return "".join(clauses), values

    def _decision_cursor_key(self, after: str) -> tuple[object, object]:
        """The (created_at as stored, id) a decision listing's cursor resumes past; `ValueError` for no cursor."""
        created, elicitation_id = _parse_cursor(after)
        if not self._raw_cursor_keys and (type(created) is not int or not isinstance(elicitation_id, str)):
            raise ValueError(f"{_quoted(after)} is not a cursor of a decision listing")
        if type(created) is int:
            try:
                created = self._to_time(_EPOCH + timedelta(microseconds=created))
            except OverflowError:
                raise ValueError(f"{_quoted(after)} is not a cursor of a decision listing") from None
        return created, elicitation_id

    async def transition(
        self,
        snapshot: Decision,
        to: DecisionStatus,
        *,
        caller: Caller,
        reason: str = "",
        content: JSONObject | None = None,
        expires_at: datetime | None = None,
    ) -> Decision:
        move = functools.partial(
            self._transition, snapshot, to, caller=caller, reason=reason, content=content, expires_at=expires_at
        )
        observer = hooks.installed()
        if observer is None:
            return await move()
        moved = await observer.transitioning(snapshot, to, move)
        if moved.is_terminal:
            _committed(hooks.DecisionEnded(moved))
        return moved

    async def _transition(
        self,
        snapshot: Decision,
        to: DecisionStatus,
        *,
        caller: Caller,
        reason: str,
        content: JSONObject | None,
        expires_at: datetime | None,
    ) -> Decision:
        if to is DecisionStatus.EXPIRED:
            raise ValueError("expiry is decided by the clock: it happens in sweeps and on late signals")
        check_decision_transition(snapshot.mode, snapshot.status, to)
        if (content is not None) != (to is DecisionStatus.ACCEPTED):
            raise ValueError("content goes with an accepted form decision, and only there")
        if expires_at is not None and to in TERMINAL_DECISION_STATUSES:
            raise ValueError(f"a TTL is for a waiting state, and {to} is terminal")
        now = self._clock()
        details: JSONObject = {}
        if expires_at is not None:
            details["expires_at"] = expires_at.isoformat()
        where, params = _binding(caller)
        if to is not DecisionStatus.CANCELLED:  # only votes decide a decision with approvers (`cast_vote`)
            where += " AND approvers IS NULL"
        async with self._write() as tx:
            moved = await self._move(
                tx, snapshot, to, actor=caller.actor, reason=reason, details=details, content=content,
                expires_at=expires_at, now=now, binding=(where, params),
            )  # fmt: skip
            if moved is None:
                failure = await self._why_not(tx, snapshot, to, caller, now)
        if moved is None:
            raise failure
        return moved

    async def _move(
        self,
        tx: Tx,
        snapshot: Decision,
        to: DecisionStatus,
        *,
        actor: str,
        reason: str,
        details: JSONObject,
        content: JSONObject | None,
        now: datetime,
        expires_at: datetime | None = None,
        binding: tuple[str, tuple[str, ...]] = ("", ()),
    ) -> Decision | None:
        """Move `snapshot` to `to` by compare-and-set in `tx`, with its audit row (`details` and the version and
        redacted content), its outbox row when it ends and its announcement; `None` when the set matched no row."""
        version = snapshot.completion_version + 1
        new_expiry = snapshot.expires_at if expires_at is None else expires_at
        new_content = snapshot.content if content is None else content
        details = {"version": version, **details}
        if content is not None:
            details["content"] = redact_content(content, snapshot.sensitive_fields)
        where, params = binding
        stamp = self._to_time(now)
        changed = await tx.execute(
            "UPDATE elicit_decisions SET status = %s, completion_version = %s, content = %s, updated_at = %s,"
            " expires_at = %s WHERE elicitation_id = %s AND status = %s AND completion_version = %s"
            f" AND expires_at > %s{where}",
            (to.value, version, self._optional_json(new_content), stamp, self._to_time(new_expiry),
             snapshot.elicitation_id, snapshot.status.value, snapshot.completion_version, stamp, *params),
        )  # fmt: skip
        if changed != 1:
            return None
        self._audit(tx, SubjectKind.DECISION, snapshot.elicitation_id, snapshot.status, to, actor, reason, details, now)
        if to in TERMINAL_DECISION_STATUSES:
            self._outbox(tx, _ENDED, [snapshot.elicitation_id], now)
        self._moved(snapshot.elicitation_id)
        return replace(
            snapshot, status=to, completion_version=version, content=new_content, updated_at=now,
            expires_at=new_expiry,
        )  # fmt: skip

    async def _why_not(
        self, tx: Tx, snapshot: Decision, to: DecisionStatus, caller: Caller, now: datetime
    ) -> StoreError:
        """The error for a lost compare-and-set, expiring an overdue record on the way."""
        current = await self._select_decision(tx, snapshot.elicitation_id, caller)
        if current is None:
            raise NotFound(f"no decision {snapshot.elicitation_id}")
        waiting = not current.is_terminal and not current.is_overdue(now)
        if current.approvers is not None and to is not DecisionStatus.CANCELLED and waiting:
            return VoteRefused(
                current.elicitation_id, VoteRefusal.VOTES_ONLY,
                f"decision {current.elicitation_id} is decided only by the votes of its approvers "
                f"({', '.join(current.approvers.roles)}); it can be cancelled, not answered",
            )  # fmt: skip
        return await self._refusal(tx, current, to, now, late=f"late {to} after the TTL")

    async def _refusal(
        self, tx: Tx, current: Decision, to: DecisionStatus, now: datetime, *, late: str
    ) -> DecisionExpired | DecisionConflict:
        """Why `current` cannot move to `to`: it is overdue (expired right here, audited with `late`), expired,
        or elsewhere than the move expected."""
        if current.is_overdue(now):
            await self._expire_decisions(
                tx, [(current.elicitation_id, current.status, current.completion_version)], now, late
            )
            expired = replace(
                current, status=DecisionStatus.EXPIRED, completion_version=current.completion_version + 1,
                updated_at=now,
            )  # fmt: skip
            return DecisionExpired(expired, to)
        if current.status is DecisionStatus.EXPIRED:
            return DecisionExpired(current, to)
        _lost(SubjectKind.DECISION)
        return DecisionConflict(current, to)

    async def expire_if_overdue(self, elicitation_id: str, caller: Caller, *, reason: str) -> Decision:
        now = self._clock()
        async with self._write() as tx:
            current = await self._select_decision(tx, elicitation_id, caller)
            if current is None:
                raise NotFound(f"no decision {elicitation_id}")
            if current.is_overdue(now):
                await self._expire_decisions(
                    tx, [(elicitation_id, current.status, current.completion_version)], now, reason
                )
                current = replace(
                    current, status=DecisionStatus.EXPIRED, completion_version=current.completion_version + 1,
                    updated_at=now,
                )  # fmt: skip
        return current

    async def note(self, decision: Decision, *, actor: Actor, reason: str) -> None:
        async with self._write() as tx:
            self._audit(
                tx, SubjectKind.DECISION, decision.elicitation_id, decision.status, decision.status, actor.actor,
                reason, {"version": decision.completion_version}, self._clock(),
            )  # fmt: skip

    async def _expire_decisions(self, tx: Tx, rows: Sequence[tuple[str, str, int]], now: datetime, reason: str) -> None:
        """Expire these decisions by compare-and-set; only those this transaction moved are audited."""
        stamp = self._to_time(now)
        moved = [
            (elicitation_id, status, version + 1)
            for elicitation_id, status, version in rows
            if await tx.execute(
                "UPDATE elicit_decisions SET status = 'expired', completion_version = completion_version + 1,"
                " updated_at = %s WHERE elicitation_id = %s AND status = %s AND completion_version = %s",
                (stamp, elicitation_id, status, version),
            )
        ]
        await self._audit_many(tx, SubjectKind.DECISION, moved, "expired", reason, now)
        if moved:
            _committed(hooks.Expired(SubjectKind.DECISION, len(moved)))
            self._outbox(tx, _ENDED, [row[0] for row in moved], now)
        for elicitation_id, _, _ in moved:
            self._moved(elicitation_id)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_MICROSECOND = timedelta(microseconds=1)


_CREATED = DECISION_NAMES.index("created_at")


def _cursor(created: Any, elicitation_id: Any) -> str:
    """A listing cursor: the sort key of a page's last row as stored, so an unreadable row has one too.

    Usually `<microseconds since 1970>.<id>`, short enough to give on a command line. A key no healthy row
    holds (only a corrupt SQLite row can: text where the time belongs, an id of another kind) is kept as
    stored instead, `~` and base64 JSON, so the next page resumes past that row in the engine's own order.
    """
    time: JSONValue
    if type(created) is int:
        time = created
    elif isinstance(created, datetime):
        time = ((created if created.tzinfo else created.replace(tzinfo=UTC)) - _EPOCH) // _MICROSECOND
    else:
        time = _raw_key(created)
    if type(time) is int and isinstance(elicitation_id, str) and _PLAIN_ID.fullmatch(elicitation_id):
        return f"{time}.{elicitation_id}"
    key = [time, elicitation_id if isinstance(elicitation_id, str) else _raw_key(elicitation_id)]
    return "~" + base64.urlsafe_b64encode(json_text(key).encode()).decode().rstrip("=")


_PLAIN_ID = re.compile(r"[0-9A-Za-z_-]+")


_MICROSECONDS = re.compile(r"-?[0-9]{1,20}")


def _raw_key(value: Any) -> JSONValue:
    if isinstance(value, bytes | memoryview):
        return {"blob": bytes(value).hex()}
    return {"raw": value}


def _parse_cursor(token: str) -> tuple[object, object]:
    """The (time, id) key of a cursor; the time still in microseconds when it is one."""
    if not token.startswith("~"):
        time, dot, elicitation_id = token.partition(".")
        if dot and _MICROSECONDS.fullmatch(time) and _PLAIN_ID.fullmatch(elicitation_id):
            return int(time), elicitation_id
        raise ValueError(f"{_quoted(token)} is not a cursor of a decision listing")
    try:
        key = json.loads(base64.urlsafe_b64decode(token[1:] + "=" * (-len(token[1:]) % 4)))
    except ValueError:
        key = None
    if isinstance(key, list) and len(key) == 2:
        created = key[0] if type(key[0]) is int else _raw_value(key[0])
        identity = key[1] if isinstance(key[1], str) else _raw_value(key[1])
        if created is not _NOT_A_KEY and identity is not _NOT_A_KEY:
            return created, identity
    raise ValueError(f"{_quoted(token)} is not a cursor of a decision listing")


_NOT_A_KEY = object()


def _raw_value(key: object) -> object:
    if isinstance(key, dict) and len(key) == 1:
        if "raw" in key and (key["raw"] is None or type(key["raw"]) in (str, int, float)):
            return key["raw"]
        if "blob" in key and isinstance(key["blob"], str):
            try:
                return bytes.fromhex(key["blob"])
            except ValueError:
                return _NOT_A_KEY
    return _NOT_A_KEY
