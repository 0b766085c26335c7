"""The notification outbox: events written in the transaction of the transition that causes them.

A transition queues its events (`Core._outbox`); just before its commit one statement writes a row per
subscription taking them, off the rows as the whole unit leaves them. Deliverers claim due rows under a
lease, and settle them delivered or dead, or retry later. An event announced for later (a decision's escalation) is
written the same way, its occurrence and first attempt at that moment: no deliverer claims it before.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from mcp_elicit.model import DecisionStatus, redact_text
from mcp_elicit.store._core import Core, _Cells, _marks
from mcp_elicit.store._engine import Tx
from mcp_elicit.store._schema import WAITING_SQL
from mcp_elicit.store.protocol import TASK_JOURNAL, Delivery, DeliveryState, NotificationEvent

SUBSCRIPTIONS_RECHECK = 1.0
"""Seconds a store trusts what it last found of the webhook subscriptions: one another process adds is
written to by this one's transitions from at most this long after."""
OUTBOX_COLUMNS = (
    "event_id, subscription, event_type, elicitation_id, operation_id, principal_id, status, method, target, "
    "deadline, occurred_at, state, attempts, next_attempt_at, last_error"
)
_OF_DECISION = "(SELECT d.{} FROM elicit_decisions d WHERE d.elicitation_id = elicit_outbox.elicitation_id)"
OUTBOX_ABOUT = (
    f"COALESCE({_OF_DECISION.format('about')}, ''), {_OF_DECISION.format('approvers')},"
    f" {_OF_DECISION.format('created_at')}"
)
"""What the decision's call is about (`Decision.about`), who decides it (`Decision.approvers`) and when it was
asked, read with the row rather than copied into it: none changes once asked, and a scalar subquery is locked by
no `FOR UPDATE` of the claim."""
OUTBOX_NAMES = (*OUTBOX_COLUMNS.split(", "), "about", "approvers", "created_at")
OUTBOX_KEY = "event_id = %s AND subscription = %s AND state = 'pending'"
_OUTBOX_ERROR_LENGTH = 300


class OutboxCore(Core):
    _subscriptions_seen: tuple[float, bool] = (-SUBSCRIPTIONS_RECHECK, False)
    """When the store last looked for webhook subscriptions (`time.monotonic()`), and whether it found any."""

    async def _subscribed(self, tx: Tx) -> bool:
        """Whether any webhook subscription exists, looked up at most once a `SUBSCRIPTIONS_RECHECK`: without
        one, a transition writes no outbox statement at all (the common case costs nothing)."""
        checked, found = self._subscriptions_seen
        now = time.monotonic()
        if now - checked < SUBSCRIPTIONS_RECHECK:
            return found
        found = await tx.one("SELECT 1 FROM elicit_subscriptions LIMIT 1") is not None
        self._subscriptions_seen = (now, found)
        return found

    def _write_outbox(
        self, tx: Tx, events: Sequence[NotificationEvent], elicitation_ids: Sequence[str], at: datetime
    ) -> None:
        """One outbox row per subscription taking one of `events`, for each decision, just before the commit
        of the transition that causes it: one statement, which finds nothing to write where nothing is subscribed.

        Read off the rows as the whole unit leaves them (status, deadline, the operation's method and target),
        never the message or an answer, the same on every engine: a decision created and answered in one unit
        (an answer given with the call) was never waiting, and only its end is announced. The event id is the
        event and the decision's id: an event happens once per decision, so every retry and every subscription
        carries the same id.
        """
        task = NotificationEvent.TASK_INPUT_REQUIRED in events
        stamp = self._to_time(at)
        tx.defer(
            f"INSERT INTO elicit_outbox ({OUTBOX_COLUMNS}) SELECT s.event_type || ':' || d.elicitation_id, s.name,"
            " s.event_type, d.elicitation_id, d.operation_id, d.principal_id, d.status, o.method, o.target,"
            " d.expires_at, %s, 'pending', 0, %s, NULL FROM elicit_subscriptions s"
            f" JOIN elicit_decisions d ON d.elicitation_id IN ({_marks(len(elicitation_ids))})"
            " JOIN elicit_operations o ON o.operation_id = d.operation_id"
            f" WHERE s.event_type IN ({_marks(len(events))})"
            f" AND (s.event_type = '{NotificationEvent.DECISION_ENDED.value}' OR d.status IN {WAITING_SQL})"
            + (
                f" AND (s.event_type <> '{NotificationEvent.TASK_INPUT_REQUIRED.value}' OR (d.approvers IS NULL"
                " AND EXISTS (SELECT 1 FROM elicit_journal j WHERE j.operation_id = d.operation_id AND j.name = %s)))"
                if task
                else ""
            )
            + " ON CONFLICT DO NOTHING",
            (stamp, stamp, *elicitation_ids, *(event.value for event in events), *((TASK_JOURNAL,) if task else ())),
        )

    def _delivery(self, row: Sequence[Any], claimed_at: datetime | None = None) -> Delivery:
        c, t = _Cells("outbox row", OUTBOX_NAMES, row), self._from_time
        return Delivery(
            event_id=c.text(0), subscription=c.text(1), event=c.choice(2, NotificationEvent), elicitation_id=c.text(3),
            operation_id=c.text(4), principal_id=c.text(5), status=c.choice(6, DecisionStatus), method=c.text(7),
            target=c.text(8), deadline=c.read(9, t), occurred_at=c.read(10, t), state=c.choice(11, DeliveryState),
            attempts=c.integer(12), next_attempt_at=c.read(13, t), last_error=c.optional_text(14),
            about=c.text(15), approvers=c.read(16, self._approver_rule),
            asked_at=None if row[17] is None else c.read(17, t), claimed_at=claimed_at,
        )  # fmt: skip

    async def outbox_subscribe(
        self, subscriptions: Mapping[str, frozenset[NotificationEvent]], *, renamed: Mapping[str, str] | None = None
    ) -> frozenset[str]:
        self._subscriptions_seen = (-SUBSCRIPTIONS_RECHECK, False)  # look again at the next transition
        async with self._write() as tx:
            held: set[str] = set()
            if renamed:
                # Compared here, not in SQL: a former name (a URL's path) is never sent to a store that lacks it.
                names = "SELECT name FROM elicit_subscriptions UNION SELECT subscription FROM elicit_outbox"
                held = {row[0] for row in await tx.all(names)}
            found = {former: name for former, name in (renamed or {}).items() if former in held and former != name}
            for former, name in found.items():
                await tx.execute("DELETE FROM elicit_subscriptions WHERE name = %s", (former,))
                # An event under both names (instances of both kinds ran) keeps one row: a settled one if any.
                await tx.execute(
                    "DELETE FROM elicit_outbox WHERE subscription = %s AND state = 'pending' AND event_id IN"
                    " (SELECT event_id FROM elicit_outbox WHERE subscription = %s AND state <> 'pending')",
                    (name, former),
                )
                await tx.execute(
                    "DELETE FROM elicit_outbox WHERE subscription = %s"
                    " AND event_id IN (SELECT event_id FROM elicit_outbox WHERE subscription = %s)",
                    (former, name),
                )
                await tx.execute("UPDATE elicit_outbox SET subscription = %s WHERE subscription = %s", (name, former))
            for name, events in subscriptions.items():
                kept = sorted(NotificationEvent(event).value for event in events)
                if kept:
                    # DO NOTHING, not delete-then-insert: instances starting together subscribe the same names.
                    await tx.executemany(
                        "INSERT INTO elicit_subscriptions (name, event_type) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                        [(name, event) for event in kept],
                    )
                await tx.execute(
                    "DELETE FROM elicit_subscriptions WHERE name = %s"
                    + (f" AND event_type NOT IN ({_marks(len(kept))})" if kept else ""),
                    (name, *kept),
                )
        return frozenset(found)

    async def outbox_claim(self, subscriptions: Sequence[str], *, limit: int, lease: timedelta) -> list[Delivery]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if lease <= timedelta(0):
            raise ValueError(f"a claim's lease must be positive, got {lease}")
        if not subscriptions:
            return []
        now = self._clock()
        until = now + lease
        async with self._write() as tx:
            rows = await tx.all(
                f"SELECT {OUTBOX_COLUMNS}, {OUTBOX_ABOUT} FROM elicit_outbox"
                " WHERE state = 'pending' AND next_attempt_at <= %s"
                f" AND subscription IN ({_marks(len(subscriptions))}) ORDER BY next_attempt_at, event_id, subscription"
                f" LIMIT %s{self._for_update}",
                (self._to_time(now), *subscriptions, limit),
            )
            due = [self._delivery(row, now) for row in rows]
            if due:
                await tx.executemany(
                    "UPDATE elicit_outbox SET attempts = attempts + 1, next_attempt_at = %s"
                    " WHERE event_id = %s AND subscription = %s",
                    [(self._to_time(until), d.event_id, d.subscription) for d in due],
                )
        return [replace(d, attempts=d.attempts + 1, next_attempt_at=until) for d in due]

    async def outbox_delivered(self, delivery: Delivery) -> bool:
        async with self._write() as tx:
            settled = await tx.execute(
                f"UPDATE elicit_outbox SET state = 'delivered', settled_at = %s, last_error = NULL WHERE {OUTBOX_KEY}",
                (self._to_time(self._clock()), delivery.event_id, delivery.subscription),
            )
        return settled == 1

    async def outbox_failed(self, delivery: Delivery, *, retry_after: timedelta | None, error: str) -> bool:
        now = self._clock()
        reason = redact_text(error)[:_OUTBOX_ERROR_LENGTH]
        if retry_after is None:
            change, values = "state = 'dead', settled_at = %s", (self._to_time(now),)
        else:
            change, values = "next_attempt_at = %s", (self._to_time(now + max(retry_after, timedelta(0))),)
        async with self._write() as tx:
            moved = await tx.execute(
                f"UPDATE elicit_outbox SET {change}, last_error = %s WHERE {OUTBOX_KEY} AND attempts = %s",
                (*values, reason, delivery.event_id, delivery.subscription, delivery.attempts),
            )
        return moved == 1

    async def outbox_deliveries(
        self, *, elicitation_id: str | None = None, state: DeliveryState | None = None, limit: int = 100
    ) -> list[Delivery]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        clauses, values = "", []
        if elicitation_id is not None:
            clauses, values = " AND elicitation_id = %s", [elicitation_id]
        if state is not None:
            clauses += " AND state = %s"
            values.append(DeliveryState(state).value)
        async with self._read() as tx:
            rows = await tx.all(
                f"SELECT {OUTBOX_COLUMNS}, {OUTBOX_ABOUT} FROM elicit_outbox WHERE 1 = 1{clauses}"
                " ORDER BY occurred_at, event_id, subscription LIMIT %s",
                (*values, limit),
            )
        return [self._delivery(row) for row in rows]

    async def outbox_purge(self, settled_before: datetime, *, stale_before: datetime | None = None) -> int:
        stale, values = ("", ()) if stale_before is None else (" OR occurred_at < %s", (self._to_time(stale_before),))
        async with self._write() as tx:
            return await tx.execute(
                f"DELETE FROM elicit_outbox WHERE (state <> 'pending' AND settled_at < %s){stale}",
                (self._to_time(settled_before), *values),
            )
