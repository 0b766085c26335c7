"""The store's calls from async code, `AsyncStore`: the one source of every call's signature and docstring.

Each call hands the core's coroutine for it to `_call`, which runs it inline, on PostgreSQL's async pool or
in a worker thread, as the store fits (see `_facade`). The blocking `Store` is generated from this file by
`tools/async_to_sync.py` into `_blocking.py`: the same calls without `async` and `await`, each run at once on
the store's own core. Edit this file, then run `python -m tools.async_to_sync`; `tests/unit/test_store_generated.py`
fails while the two differ. What the calls promise (binding, compare-and-set, late moves) is in
`mcp_elicit.store.protocol`, beside the records they take and give.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta

from mcp_elicit.model import (
    Actor,
    Approver,
    AuditEntry,
    Caller,
    Decision,
    DecisionStatus,
    Grant,
    JSONObject,
    JSONValue,
    Operation,
    OperationStatus,
    Principal,
    Verdict,
    Vote,
)
from mcp_elicit.model.audit_keys import AuditPublicKeys, AuditSigningKeys
from mcp_elicit.store._facade import AsyncStoreBase
from mcp_elicit.store.audit import (
    DEFAULT_MAX_EXPOSURE,
    SEAL_BATCH,
    Anchor,
    AuditReport,
    SealedRow,
    SealResult,
)
from mcp_elicit.store.errors import UnreadableRow
from mcp_elicit.store.protocol import (
    Claim,
    Consumption,
    DecisionFilter,
    DecisionPage,
    Delivery,
    DeliveryState,
    GrantFilter,
    GrantPage,
    JournalEntry,
    NotificationEvent,
    OperationRecords,
    OperationStart,
    SweepResult,
    VaultRecord,
    VoteCast,
)


class AsyncStore(AsyncStoreBase):
    """Every store call, awaited, over a blocking `Store`: `AsyncStore(store)`, as server code holds it."""

    async def verify_schema(self) -> None:
        """Reach the database afresh and check that it still holds this code's schema, for readiness checks.

        `schema_version` is what opening found; another instance may have migrated the database since.
        Raises `StoreUnavailable` when it cannot be reached, `SchemaTooNew` or `MigrationPending` when its
        version is no longer this code's, `StoreCorrupt` when its schema table is not what mcp-elicit wrote.
        """
        await self._call(lambda core: core.verify_schema())

    async def create_operation(self, operation: Operation) -> Operation:
        return await self._call(lambda core: core.create_operation(operation))

    async def get_operation(self, operation_id: str, caller: Caller) -> Operation:
        return await self._call(lambda core: core.get_operation(operation_id, caller))

    async def get_operation_records(self, operation_id: str, caller: Caller) -> OperationRecords:
        """The operation and its decisions in one read (`NotFound` as `get_operation`): a resuming call's start."""
        return await self._call(lambda core: core.get_operation_records(operation_id, caller))

    async def begin_operation(self, candidate: Operation, *, replay_since: datetime | None = None) -> OperationStart:
        """The open operation of `candidate`'s call, or `candidate` stored as that operation.

        The call is the candidate's principal, client, method, target and request digest, or its principal,
        client and idempotency key (a key is its caller's own). At most one open operation exists per call
        (a unique index, so a racing creator attaches). An overdue open one is expired on the way. A
        completed one updated at or after `replay_since` is returned instead of starting anew. A key the
        caller bound to another request raises `IdempotencyKeyConflict`; a fresh key is bound to this
        request until its operation ends.
        """
        return await self._call(lambda core: core.begin_operation(candidate, replay_since=replay_since))

    async def find_operations(
        self,
        caller: Principal,
        *,
        method: str,
        target: str,
        request_digest: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[Operation]:
        """The caller's operations for this call, newest first (by digest, or by idempotency key)."""
        return await self._call(
            lambda core: core.find_operations(
                caller, method=method, target=target, request_digest=request_digest, idempotency_key=idempotency_key
            )
        )

    async def count_open_operations(
        self, principal_id: str, *, method: str, targets: Collection[str], now: datetime
    ) -> int:
        """How many of the principal's operations (from any of their clients) of these targets are open and
        unexpired at `now`: the bound on a caller's pending approval tasks is counted here, across instances."""
        return await self._call(
            lambda core: core.count_open_operations(principal_id, method=method, targets=targets, now=now)
        )

    async def finish_operation(
        self,
        snapshot: Operation,
        to: OperationStatus,
        *,
        caller: Caller,
        result: JSONValue = None,
        reason: str = "",
        fence: Claim | None = None,
    ) -> Operation:
        """End an open operation by compare-and-set. With `fence` (the run lease the caller took), only while
        that lease is still the caller's, same holder and attempt: else `LeaseLost`."""
        return await self._call(
            lambda core: core.finish_operation(snapshot, to, caller=caller, result=result, reason=reason, fence=fence)
        )

    async def create_decision(self, decision: Decision) -> Decision:
        return await self._call(lambda core: core.create_decision(decision))

    async def get_decision(self, elicitation_id: str, caller: Caller) -> Decision:
        return await self._call(lambda core: core.get_decision(elicitation_id, caller))

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
        """Decisions visible to the caller, newest first; `expiring_before` keeps only waiting ones.

        A row that cannot be decoded raises `UnreadableRow`; with `on_unreadable`, it is handed there instead
        and left out, so that one corrupt row does not hide the others (it still counts towards `limit`).
        """
        return await self._call(
            lambda core: core.list_decisions(
                caller,
                status=status,
                principal_id=principal_id,
                operation_id=operation_id,
                expiring_before=expiring_before,
                id_prefix=id_prefix,
                limit=limit,
                on_unreadable=on_unreadable,
            )
        )

    async def decision_page(
        self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> DecisionPage:
        """Up to `limit` decisions visible to the caller, newest first (ties by id), past the cursor `after`.

        Keyset paging: a cursor is the last row's place in that order, not a row count, so the pages of one
        listing never repeat a row nor skip one that exists throughout, whatever is written meanwhile; each
        page is one short read. A cursor is opaque and holds no filter: give the same `where` with it.
        A text that is not a cursor raises `ValueError`.
        """
        return await self._call(lambda core: core.decision_page(caller, where, after=after, limit=limit))

    async def count_decisions(
        self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None
    ) -> int:
        """How many decisions a `decision_page` listing with these arguments holds in all pages together."""
        return await self._call(lambda core: core.count_decisions(caller, where, after=after))

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
        return await self._call(
            lambda core: core.transition(
                snapshot, to, caller=caller, reason=reason, content=content, expires_at=expires_at
            )
        )

    async def expire_if_overdue(self, elicitation_id: str, caller: Caller, *, reason: str) -> Decision:
        """The decision as it stands, expired on the spot (by the store's clock) when its TTL has passed."""
        return await self._call(lambda core: core.expire_if_overdue(elicitation_id, caller, reason=reason))

    async def note(self, decision: Decision, *, actor: Actor, reason: str) -> None:
        """Record an event about a decision that changes nothing (a wrong user at its page, say)."""
        await self._call(lambda core: core.note(decision, actor=actor, reason=reason))

    async def sweep_expired(self) -> SweepResult:
        """Expire every overdue waiting decision and open operation, and purge spent token entries.

        Records expire in transactions of at most `SWEEP_BATCH` each, so a backlog never holds many rows locked.
        """
        return await self._batch(lambda core: core.sweep_expired())

    async def audit_trail(
        self, subject_id: str, caller: Caller, *, on_unreadable: Callable[[UnreadableRow], None] | None = None
    ) -> list[AuditEntry]:
        """Every audit row of a decision, an operation or a grant the caller may see, oldest first.

        An unreadable row raises `UnreadableRow`, or with `on_unreadable` is handed there and left out, as
        in `list_decisions`.
        """
        return await self._call(lambda core: core.audit_trail(subject_id, caller, on_unreadable=on_unreadable))

    async def journal_record(
        self, operation_id: str, name: str, value: JSONValue, *, caller: Principal, fence: Claim | None = None
    ) -> JournalEntry:
        """Record a step's result unless one is recorded already; either way return the recorded one.

        With `fence` (the run lease the step ran under) the result is recorded only if none is recorded yet
        (else `AlreadyExists`) and while that lease is still the caller's, same holder and attempt (else
        `LeaseLost`): another holder took the operation over, and its record, not this one, counts.
        """
        return await self._call(lambda core: core.journal_record(operation_id, name, value, caller=caller, fence=fence))

    async def journal(self, operation_id: str, *, caller: Principal) -> list[JournalEntry]:
        """Every entry of the operation's journal, in one read: what a run replays instead of running again."""
        return await self._call(lambda core: core.journal(operation_id, caller=caller))

    async def journal_get(self, operation_id: str, name: str, *, caller: Principal) -> JournalEntry | None:
        return await self._call(lambda core: core.journal_get(operation_id, name, caller=caller))

    async def claim(
        self,
        operation_id: str,
        name: str,
        *,
        holder: str,
        lease_until: datetime,
        caller: Principal,
        succeeding: str | None = None,
    ) -> Claim:
        """Take the claim `name` of the operation if it is free, lapsed, or held by `holder` or `succeeding`.

        Returns the claim as it then stands: held by `holder`, or by someone else whose lease still runs.
        Taking over a lapsed claim of another holder is audited on the operation.
        """
        return await self._call(
            lambda core: core.claim(
                operation_id, name, holder=holder, lease_until=lease_until, caller=caller, succeeding=succeeding
            )
        )

    async def claims(self, operation_id: str, *, caller: Principal) -> list[Claim]:
        """The operation's claims as they stand, lapsed ones included (their `lease_until` says so)."""
        return await self._call(lambda core: core.claims(operation_id, caller=caller))

    async def renew_claim(
        self, operation_id: str, name: str, *, holder: str, lease_until: datetime, caller: Principal
    ) -> bool:
        """Extend `holder`'s lease; False if the claim is no longer its own."""
        return await self._call(
            lambda core: core.renew_claim(operation_id, name, holder=holder, lease_until=lease_until, caller=caller)
        )

    async def release_claim(
        self, operation_id: str, name: str, *, caller: Principal, holder: str | None = None
    ) -> None:
        """Drop the claim (only `holder`'s, when given) and tell waiters on the operation."""
        await self._call(lambda core: core.release_claim(operation_id, name, caller=caller, holder=holder))

    async def create_grant(self, grant: Grant) -> Grant:
        """Store the grant an accepted approval created, audited as `active`; the grant stored already when that
        approval created one before (a call run again creates nothing twice). `NotFound` unless the grant's
        decision is an accepted one of the grant's principal and client."""
        return await self._call(lambda core: core.create_grant(grant))

    async def covering_grant(self, caller: Principal, tool: str, scope: str | None) -> Grant | None:
        """The grant that lets the caller's call of `tool` run without asking now (by the store's clock), if any:
        the caller's own (principal and client), of that tool and scope value (`None`: an unscoped grant), neither
        revoked nor expired. One read."""
        return await self._call(lambda core: core.covering_grant(caller, tool, scope))

    async def grant_used(self, grant: Grant, operation_id: str, *, caller: Principal) -> bool:
        """Record that `grant` let the caller's operation run: its journal entry `GRANT_JOURNAL` and an audit row
        under the grant naming the operation, both once per operation (False when recorded before). Only while
        the grant still covers calls: else `GrantEnded`, and nothing is written."""
        return await self._call(lambda core: core.grant_used(grant, operation_id, caller=caller))

    async def get_grant(self, grant_id: str, caller: Caller) -> Grant:
        return await self._call(lambda core: core.get_grant(grant_id, caller))

    async def grant_page(
        self, caller: Caller, where: GrantFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> GrantPage:
        """Up to `limit` grants visible to the caller, newest first (ties by id), past the cursor `after`: keyset
        pages, as `decision_page`. An `Operator` sees everyone's, a `BrowserUser` their own of every client."""
        return await self._call(lambda core: core.grant_page(caller, where, after=after, limit=limit))

    async def revoke_grant(self, grant_id: str, *, caller: Caller, reason: str = "") -> Grant:
        """Revoke a grant the caller may see, by compare-and-set: it covers no call from this commit on. Audited
        with the caller as actor and `reason`. `GrantEnded` when it was revoked before or has expired (nothing
        changes); `NotFound` for another person's grant, exactly as for a missing one."""
        return await self._call(lambda core: core.revoke_grant(grant_id, caller=caller, reason=reason))

    async def cast_vote(
        self, elicitation_id: str, approver: Approver, verdict: Verdict, content: JSONObject
    ) -> VoteCast:
        """Record `approver`'s vote on a decision that names approvers, and carry the decision when it does: the
        approval that brings one proposal (`proposal_digest` of `content`) to the rule's quorum accepts it with
        that content and the approvals' notes joined; a rejection ends it (accepted with `content` when that
        holds `REJECT_FIELD` true, the gate's rejection, else declined). One transaction, in which concurrent
        votes on the decision queue. Audited on the decision; announced whether or not it moved.

        Refused, changing nothing: `NotFound`; `DecisionExpired` once its TTL passed (expired there);
        `DecisionConflict` once decided; `VoteRefused` naming why (`VoteRefusal`): no approvers, the
        requester's own call (four-eyes), no eligible role now, or this very vote cast before."""
        return await self._call(lambda core: core.cast_vote(elicitation_id, approver, verdict, content))

    async def votes(self, elicitation_id: str) -> list[Vote]:
        """The votes cast on a decision, oldest first, in one read; `NotFound` for no such decision."""
        return await self._call(lambda core: core.votes(elicitation_id))

    async def approvals_waiting(self, roles: Collection[str], *, principal_id: str, limit: int = 100) -> list[Decision]:
        """An approver's queue: up to `limit` decisions waiting for approvers, newest first, that members of any
        of `roles` may vote on now (escalation included, by the store's clock) and that were not asked for
        `principal_id` (four-eyes)."""
        return await self._call(lambda core: core.approvals_waiting(roles, principal_id=principal_id, limit=limit))

    async def approval_page(
        self, roles: Collection[str], *, principal_id: str, after: str | None = None, limit: int = 100
    ) -> DecisionPage:
        """One page of an approver's queue (`approvals_waiting`), past the cursor `after` of the page before;
        its `after` is set while more follow. `ValueError` for a cursor no listing gave."""
        return await self._call(
            lambda core: core.approval_page(roles, principal_id=principal_id, after=after, limit=limit)
        )

    async def consume_token(self, token_id: str, *, expires_at: datetime) -> Consumption:
        """Mark a single-use token spent. The entry must outlive the token, so pass the token's expiry."""
        return await self._call(lambda core: core.consume_token(token_id, expires_at=expires_at))

    async def token_consumed(self, token_id: str) -> bool:
        """Whether the ledger holds an entry for `token_id` (spent, or revoked), until a sweep purges it."""
        return await self._call(lambda core: core.token_consumed(token_id))

    async def oauth_client_put(self, client_id: str, metadata: JSONObject) -> None:
        """Record an OAuth client registration; a registration is never overwritten (`AlreadyExists`)."""
        await self._call(lambda core: core.oauth_client_put(client_id, metadata))

    async def oauth_client_get(self, client_id: str) -> JSONObject | None:
        return await self._call(lambda core: core.oauth_client_get(client_id))

    async def vault_put(
        self, principal_id: str, name: str, key_id: str, sealed: bytes, *, actor: str | None = None
    ) -> None:
        """Store or replace the entry, audited as `stored` in the same transaction (`actor` names who)."""
        await self._call(lambda core: core.vault_put(principal_id, name, key_id, sealed, actor=actor))

    async def vault_get(self, principal_id: str, name: str) -> VaultRecord | None:
        return await self._call(lambda core: core.vault_get(principal_id, name))

    async def vault_delete(self, principal_id: str, name: str, *, actor: str | None = None) -> bool:
        """Remove the entry, audited as `deleted`; False if there was none (and nothing is audited)."""
        return await self._call(lambda core: core.vault_delete(principal_id, name, actor=actor))

    async def vault_reseal(
        self, snapshot: VaultRecord, key_id: str, sealed: bytes, *, actor: str | None = None
    ) -> bool:
        """Replace the blob only if the entry still holds `snapshot`'s key id and blob (compare-and-set).

        False if it changed or vanished meanwhile: a concurrent `vault_put` always wins over a re-seal.
        """
        return await self._call(lambda core: core.vault_reseal(snapshot, key_id, sealed, actor=actor))

    async def vault_entries(
        self, key_id_not: str | None = None, limit: int = 1000, *, after: tuple[str, str] | None = None
    ) -> list[VaultRecord]:
        """Entries ordered by (principal_id, name), those past `after` only; `key_id_not` skips one key's."""
        return await self._call(lambda core: core.vault_entries(key_id_not, limit, after=after))

    async def outbox_subscribe(
        self, subscriptions: Mapping[str, frozenset[NotificationEvent]], *, renamed: Mapping[str, str] | None = None
    ) -> frozenset[str]:
        """Record which events each named subscription takes from now on (its earlier set replaced), so that
        every process's transitions, the CLI's included, write outbox rows for it.

        `renamed` maps names subscriptions may have had until now to their names in `subscriptions`; of those
        the store holds, it returns the former ones and, in the same transaction, unsubscribes them and gives
        their outbox rows the new name (a row whose event the new name already holds is dropped, so nothing
        is delivered twice)."""
        return await self._call(lambda core: core.outbox_subscribe(subscriptions, renamed=renamed))

    async def outbox_claim(self, subscriptions: Sequence[str], *, limit: int, lease: timedelta) -> list[Delivery]:
        """Take up to `limit` due pending deliveries of these subscriptions, oldest first, as one more attempt
        each: its next attempt is put `lease` ahead, so no one else takes it meanwhile, nor after a crash
        before `lease` has passed (on PostgreSQL rows another instance is claiming are skipped)."""
        return await self._call(lambda core: core.outbox_claim(subscriptions, limit=limit, lease=lease))

    async def outbox_delivered(self, delivery: Delivery) -> bool:
        """Settle a claimed delivery as delivered; False if it was settled already."""
        return await self._call(lambda core: core.outbox_delivered(delivery))

    async def outbox_failed(self, delivery: Delivery, *, retry_after: timedelta | None, error: str) -> bool:
        """Record a failed attempt: tried again `retry_after` from now, or dead with `None`. False when the
        delivery is no longer at this attempt (claimed again after its lease lapsed, or settled)."""
        return await self._call(lambda core: core.outbox_failed(delivery, retry_after=retry_after, error=error))

    async def outbox_deliveries(
        self, *, elicitation_id: str | None = None, state: DeliveryState | None = None, limit: int = 100
    ) -> list[Delivery]:
        """Outbox rows, oldest first, for operators and tests."""
        return await self._call(
            lambda core: core.outbox_deliveries(elicitation_id=elicitation_id, state=state, limit=limit)
        )

    async def outbox_purge(self, settled_before: datetime, *, stale_before: datetime | None = None) -> int:
        """Delete the deliveries settled (delivered or dead) before `settled_before`, and any that happened before
        `stale_before` (a webhook no instance delivers to any more leaves its rows pending); how many."""
        return await self._batch(lambda core: core.outbox_purge(settled_before, stale_before=stale_before))

    async def seal_audit(
        self,
        keys: AuditSigningKeys,
        *,
        batch: int = SEAL_BATCH,
        extends: Anchor | None = None,
        running: bool | None = None,
        written_after: int | None = None,
    ) -> SealResult:
        """Chain up to `batch` unsealed audit rows, oldest first (past rows it cannot read), and sign a checkpoint
        over the heads they moved with the ring's first key (see `mcp_elicit.store.audit`); read and signed in a
        snapshot, stored in one write transaction. Nothing to seal, another instance sealing (PostgreSQL), or
        another seal between the reading and the writing is a result with no checkpoint (`more` says to seal
        again). Raises `AuditSealRefused`, sealing nothing, when a head it would extend is not the one the
        checkpoints signed, or when `extends` (the checkpoint the caller signed last) is gone or changed.

        `running`: True from a served app's sealer as it runs, False from it as it stops, None for a seal by
        hand; the checkpoint says so (`CheckpointClaim.sealer_running`, a seal by hand repeating the last one's),
        and is signed with no row to chain when the last checkpoint says otherwise.

        `written_after`: a mark from `last_audit_seq`, taken before the caller wrote; a seal that can vouch only
        for what was written after it signs nothing while any unsealed row comes from before it (`earlier`
        says which), since those may be rows a checkpoint covered, unsealed and edited by hand.

        Cancelled with its caller, it stores all of its checkpoint or nothing (a call that waits on a database
        that does not answer can be given up on)."""
        return await self._abandonable(
            lambda core: core.seal_audit(
                keys, batch=batch, extends=extends, running=running, written_after=written_after
            )
        )

    async def last_audit_seq(self) -> int:
        """The `seq` of the newest audit row, 0 when there is none: the mark for `seal_audit(written_after=)`."""
        return await self._call(lambda core: core.last_audit_seq())

    async def verify_audit(
        self,
        keys: AuditPublicKeys,
        *,
        anchors: Sequence[Anchor] = (),
        max_exposure: timedelta | None = DEFAULT_MAX_EXPOSURE,
    ) -> AuditReport:
        """Check every chain, head and checkpoint in one snapshot, checkpoints' signatures with `keys`, which must
        come from where the verifier trusts (the published keys, the signing keys), never from this store; each
        of `anchors` (checkpoints recorded outside the store) must be there with its root; rows covered by no
        checkpoint for longer than `max_exposure` (by the time each says it was written; None: no window) are
        a break, whatever the checkpoints say."""
        return await self._batch(lambda core: core.verify_audit(keys, anchors=anchors, max_exposure=max_exposure))

    async def audit_export(
        self, *, after: int = 0, limit: int = 1000, since: datetime | None = None, operation_id: str | None = None
    ) -> list[SealedRow]:
        """Audit rows past `seq` `after`, oldest first, at or after `since`, of one operation (its own, its
        decisions' and the grants they approved) with `operation_id`; sealed or not, as stored."""
        return await self._call(
            lambda core: core.audit_export(after=after, limit=limit, since=since, operation_id=operation_id)
        )
