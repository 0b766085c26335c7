"""Votes: approvers answering a decision that names them, counted in the transaction that records each vote.

A vote locks its decision's row first (PostgreSQL `FOR UPDATE`; SQLite writes hold the database lock), so
votes on one decision are counted one after the other and the one that reaches the quorum moves the decision
exactly once. Every check comes before anything is written, and a refused vote changes nothing (but an overdue
decision, which is expired right there as a late move expires it). One row per (approver, verdict, proposal):
a vote cast again is refused by the primary key and counts once. Every vote is audited on its decision; the
vote that carries it (the quorum's last approval, or any rejection) also moves it, with the usual transition
audit row, outbox row and announcement. The others announce the decision too, so that a call waiting on it
can tell its requester the new count.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from mcp_elicit.model import (
    GRANT_FIELD,
    NOTE_FIELD,
    REJECT_FIELD,
    Approver,
    ApproverRule,
    Decision,
    DecisionStatus,
    JSONObject,
    SubjectKind,
    Tally,
    Verdict,
    Vote,
    check_decision_transition,
    joined_notes,
    proposal_digest,
    redact_content,
)
from mcp_elicit.store import hooks
from mcp_elicit.store._core import DECISION_COLUMNS, DECISION_NAMES, _Cells, _committed, _marks
from mcp_elicit.store._decisions import DecisionsCore, _cursor
from mcp_elicit.store._engine import Tx
from mcp_elicit.store.errors import NotFound, StoreError, VoteRefusal, VoteRefused
from mcp_elicit.store.protocol import DecisionPage, VoteCast

VOTE_COLUMNS = "elicitation_id, approver_id, verdict, proposal, content, roles, cast_at"
VOTE_NAMES = tuple(VOTE_COLUMNS.split(", "))
_VOTES_OF_JOIN = ", ".join(f"v.{name}" for name in VOTE_NAMES)
_CREATED = DECISION_NAMES.index("created_at")
_QUEUE_BATCH = 100


class VotesCore(DecisionsCore):
    def _vote_row(self, v: Vote) -> tuple[object, ...]:
        return (
            v.elicitation_id, v.approver_id, v.verdict.value, v.proposal, self._to_json(v.content),
            self._to_json(list(v.roles)), self._to_time(v.cast_at),
        )  # fmt: skip

    def _vote(self, row: Sequence[Any]) -> Vote:
        c = _Cells("vote", VOTE_NAMES, row)
        return Vote(
            elicitation_id=c.text(0), approver_id=c.text(1), verdict=c.choice(2, Verdict), proposal=c.text(3),
            content=c.read(4, self._stored_object), roles=c.read(5, self._names), cast_at=c.read(6, self._from_time),
        )  # fmt: skip

    async def _select_votes(self, tx: Tx, elicitation_id: str) -> list[Vote]:
        rows = await tx.all(
            f"SELECT {VOTE_COLUMNS} FROM elicit_votes WHERE elicitation_id = %s"
            " ORDER BY cast_at, approver_id, verdict, proposal",
            (elicitation_id,),
        )
        return [self._vote(row) for row in rows]

    async def cast_vote(
        self, elicitation_id: str, approver: Approver, verdict: Verdict, content: JSONObject
    ) -> VoteCast:
        verdict = Verdict(verdict)
        if GRANT_FIELD in content:
            raise ValueError(
                "a vote gives no standing grant: grants are the requester's own, and approvers decide each call"
            )
        if verdict is Verdict.APPROVE and content.get(REJECT_FIELD) is True:
            raise ValueError("an approval cannot carry the rejection field: cast a rejection instead")
        now = self._clock()
        async with self._write() as tx:
            row = await tx.one(
                f"SELECT {DECISION_COLUMNS} FROM elicit_decisions WHERE elicitation_id = %s{self._lock_row}",
                (elicitation_id,),
            )
            if row is None:
                outcome: VoteCast | StoreError = NotFound(f"no decision {elicitation_id}")
            else:
                outcome = await self._vote_on(tx, self._decision(row), approver, verdict, content, now)
        if isinstance(outcome, StoreError):
            raise outcome
        return outcome

    async def _vote_on(
        self, tx: Tx, decision: Decision, approver: Approver, verdict: Verdict, content: JSONObject, now: datetime
    ) -> VoteCast | StoreError:
        """The vote recorded, audited and counted, the decision moved when it carries it; or why not, with nothing
        written but the expiry of an overdue decision."""
        if decision.is_overdue(now) or decision.status is not DecisionStatus.REQUESTED:
            return await self._refusal(tx, decision, DecisionStatus.ACCEPTED, now, late="late vote after the TTL")
        rule = decision.approvers
        if rule is None:
            return VoteRefused(
                decision.elicitation_id, VoteRefusal.NOT_APPROVERS,
                f"decision {decision.elicitation_id} names no approvers: its requester answers it, nobody votes on it",
            )  # fmt: skip
        refused = _ineligible(decision, rule, approver, now)
        if refused is not None:
            return refused
        eligible = set(rule.eligible_roles(decision.created_at, now))
        vote = Vote(
            elicitation_id=decision.elicitation_id, approver_id=approver.principal_id, verdict=verdict,
            proposal=proposal_digest(decision.origin_request_digest, content), content=dict(content),
            roles=tuple(sorted(eligible & approver.roles)), cast_at=now,
        )  # fmt: skip
        inserted = await tx.execute(
            f"INSERT INTO elicit_votes ({VOTE_COLUMNS}) VALUES ({_marks(len(VOTE_NAMES))}) ON CONFLICT DO NOTHING",
            self._vote_row(vote),
        )
        if inserted != 1:
            return _already(decision, approver, verdict)
        votes = await self._select_votes(tx, decision.elicitation_id)
        tally = Tally.of(rule, votes)
        approving = [v for v in votes if v.verdict is Verdict.APPROVE and v.proposal == vote.proposal]
        details: JSONObject = {
            "proposal": vote.proposal,
            "verdict": verdict.value,
            "roles": list(vote.roles),
            "content": redact_content(vote.content, decision.sensitive_fields),
        }
        reason = f"approved ({len(approving)} of {rule.quorum})" if verdict is Verdict.APPROVE else "rejected"
        status = decision.status
        self._audit(
            tx, SubjectKind.DECISION, decision.elicitation_id, status, status, approver.actor, reason, details, now
        )
        moved: Decision | None = None
        carried: JSONObject = {"proposal": vote.proposal}
        if verdict is Verdict.REJECT:
            gate = vote.content.get(REJECT_FIELD) is True
            to = DecisionStatus.ACCEPTED if gate else DecisionStatus.DECLINED
            check_decision_transition(decision.mode, status, to)
            moved = await self._move(
                tx, decision, to, actor=approver.actor, reason="rejected by an approver", details=carried,
                content=_signed(vote.content, [vote]) if gate else None, now=now,
            )  # fmt: skip
        elif len(approving) >= rule.quorum:
            check_decision_transition(decision.mode, status, DecisionStatus.ACCEPTED)
            answer = _signed(vote.content, approving)
            carried["approvers"] = [v.approver_id for v in approving]
            moved = await self._move(
                tx, decision, DecisionStatus.ACCEPTED, actor=approver.actor, reason="approved by quorum",
                details=carried, content=answer, now=now,
            )  # fmt: skip
        if moved is not None:
            _committed(hooks.DecisionEnded(moved))
        self._moved(decision.elicitation_id)
        return VoteCast(moved or decision, vote, tally)

    async def votes(self, elicitation_id: str) -> list[Vote]:
        async with self._read() as tx:
            # The decision's row with each of its votes (one row with NULLs when it has none): one read that tells
            # a decision without votes from none.
            rows = await tx.all(
                f"SELECT {_VOTES_OF_JOIN} FROM elicit_decisions d LEFT JOIN elicit_votes v"
                " ON v.elicitation_id = d.elicitation_id WHERE d.elicitation_id = %s"
                " ORDER BY v.cast_at, v.approver_id, v.verdict, v.proposal",
                (elicitation_id,),
            )
        if not rows:
            raise NotFound(f"no decision {elicitation_id}")
        return [self._vote(row) for row in rows if row[0] is not None]

    async def approvals_waiting(self, roles: Collection[str], *, principal_id: str, limit: int = 100) -> list[Decision]:
        return (await self.approval_page(roles, principal_id=principal_id, limit=limit)).decisions

    async def approval_page(
        self, roles: Collection[str], *, principal_id: str, after: str | None = None, limit: int = 100
    ) -> DecisionPage:
        if isinstance(roles, str):
            raise TypeError(f"roles is a collection of role names, not one string: write [{roles!r}]")
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        held = frozenset(roles)
        now = self._clock()
        stamp = self._to_time(now)
        key: tuple[object, ...] = ()
        if after is not None:
            created, elicitation_id = self._decision_cursor_key(after)
            key = (created, created, elicitation_id)
        waiting: list[tuple[Decision, Sequence[Any]]] = []
        async with self._read() as tx:
            while len(waiting) <= limit:
                # The range of elicit_decisions_approvals, in its order; the roles are read from each rule.
                rows = await tx.all(
                    f"SELECT {DECISION_COLUMNS} FROM elicit_decisions WHERE approvers IS NOT NULL"
                    " AND status = 'requested' AND expires_at > %s AND principal_id <> %s"
                    + (" AND created_at <= %s AND (created_at < %s OR elicitation_id > %s)" if key else "")
                    + " ORDER BY created_at DESC, elicitation_id LIMIT %s",
                    (stamp, principal_id, *key, _QUEUE_BATCH),
                )
                for row in rows:
                    decision = self._decision(row)
                    rule = decision.approvers
                    if rule is not None and held.intersection(rule.eligible_roles(decision.created_at, now)):
                        waiting.append((decision, row))
                if len(rows) < _QUEUE_BATCH:
                    break
                last = rows[-1]
                key = (last[_CREATED], last[_CREATED], last[0])
        last_shown = waiting[limit - 1][1] if len(waiting) > limit else None
        cursor = None if last_shown is None else _cursor(last_shown[_CREATED], last_shown[0])
        return DecisionPage([decision for decision, _ in waiting[:limit]], [], cursor)


def _signed(content: JSONObject, votes: Sequence[Vote]) -> JSONObject:
    """The answer a decision keeps from the votes that carried it: each note after the name of who wrote it."""
    answer = {name: value for name, value in content.items() if name != NOTE_FIELD}
    notes = joined_notes(votes)
    if notes is not None:
        answer[NOTE_FIELD] = notes
    return answer


def _ineligible(decision: Decision, rule: ApproverRule, approver: Approver, now: datetime) -> VoteRefused | None:
    """Why `approver` may not vote on `decision` now, if they may not."""
    if approver.principal_id == decision.principal_id:
        return VoteRefused(
            decision.elicitation_id, VoteRefusal.OWN_CALL,
            f"{approver.principal_id} asked for decision {decision.elicitation_id}, and may not approve their own call",
        )  # fmt: skip
    eligible = rule.eligible_roles(decision.created_at, now)
    if not approver.roles.intersection(eligible):
        return VoteRefused(
            decision.elicitation_id, VoteRefusal.NOT_ELIGIBLE,
            f"{approver.principal_id} may not vote on decision {decision.elicitation_id}: only members of "
            f"{', '.join(eligible)} may now",
        )  # fmt: skip
    return None


def _already(decision: Decision, approver: Approver, verdict: Verdict) -> VoteRefused:
    did = "approved" if verdict is Verdict.APPROVE else "rejected"
    return VoteRefused(
        decision.elicitation_id, VoteRefusal.ALREADY_VOTED,
        f"{approver.principal_id} already {did} this answer to decision {decision.elicitation_id}; a vote counts once",
    )  # fmt: skip
