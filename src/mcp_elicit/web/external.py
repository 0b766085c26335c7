"""External completion of URL decisions: the single-use reference a checkout carries, and the provider's webhooks.

The decision's page opens the provider's page for a reference this module makes: random, sealed under the
page key so that it names its decision and nothing can forge one, and stored in the journal of the
decision's operation (with the principal it is for and the charge) the first time, so that a decision has
one reference and a reference one decision. The provider's webhooks name that reference; each event is
applied once, by the provider's event id (the token ledger spends the id; the journal keeps what became of
the event), in the provider's order:

- succeeded: the decision completes (`external_completed`, final), if the amount is the one charged; a
  success is never set aside for its order, the money having been taken;
- failed: the attempt is audited and the decision stays open (`external_pending`) for another attempt;
- cancelled or expired at the provider: the decision fails (`external_failed`, final);
- a failure (of either kind) older, in the provider's order, than an event already recorded for the reference
  is recorded and changes nothing: an old checkout's expiry does not end a decision a newer attempt reported on;
- any new event about a decision that has ended (a reused reference, a late event) changes nothing, is
  audited and refused: 410 after expiry, 409 otherwise; a second success for a reference already paid is a
  double charge, audited and logged as one to refund.

Guarantees: every move is the store's compare-and-set, so duplicates, replays and concurrent deliveries
have one effect; the reference completes only its own decision, of its own principal; a delivery whose
signature fails, whose body cannot be read or whose reference is unknown changes nothing and is answered
4xx with one log line naming the flow and the reason, never the body, the headers or the reference.

Of the final events of one reference, the first to claim the decision (a journal entry, written once) is the
only one that may move it; the others are refused as late, so that two deliveries racing never both count.

Does not guarantee: that the provider is honest, or that a success and a cancellation of one reference are
exclusive (they are at every provider we know; if both come, the first to arrive decides). A payment whose
success arrives after the decision ended, or a second payment for a reference already paid (the person
reopened the checkout while the first webhook was delayed), is refused here and must be refunded at the
provider: the log and the audit say so.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mcp_elicit.model import Decision, DecisionStatus, JSONObject, JSONValue, Operator, redact_text
from mcp_elicit.store import Consumption, DecisionConflict, DecisionExpired, NotFound
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.web.flows import FINAL_OUTCOMES, Charge, Checkout, EventOutcome, ExternalCompletion, ProviderEvent
from mcp_elicit.web.webhooks import SignatureInvalid

log = logging.getLogger(__name__)

HOOKS_PATH = "/elicit/hooks"
REFERENCE_PREFIX = "ref_"
MAX_REFERENCE = 400
MAX_EVENT_ID = 200
MAX_BODY = 256 * 1024
MAX_SAID = 300
REOPEN_AFTER = timedelta(minutes=2)
"""How long a checkout that has not reported keeps the page from opening another: a second checkout opened while
the first one's webhook is delayed is how one reference gets paid twice."""
EVENT_MEMORY = timedelta(days=7)
"""How long past its decision's deadline a spent event id is remembered (its retries are duplicates until then)."""
_JOURNAL = "mcp-elicit/external/"
_AAD = b"mcp-elicit external reference v1"
_MOVE_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class _Late:
    """One event being applied, with what refusing it needs."""

    flow_key: str
    flow: ExternalCompletion
    event: ProviderEvent
    entry: str
    said: str
    actor: Operator


class CheckoutRefused(Exception):
    """The checkout could not be opened; `plainly` says why, for the person's page."""

    def __init__(self, plainly: str) -> None:
        super().__init__(plainly)
        self.plainly = plainly


@dataclass(frozen=True, slots=True)
class Received:
    """The answer to one webhook delivery: an HTTP status and a small JSON body for the provider's log."""

    status: int
    body: JSONObject


def reference_entry(elicitation_id: str) -> str:
    """The journal entry holding the decision's reference."""
    return f"{_JOURNAL}{elicitation_id}/reference"


def final_entry(elicitation_id: str) -> str:
    """The journal entry naming the final event that claimed the decision (written once: the first claim holds)."""
    return f"{_JOURNAL}{elicitation_id}/final"


def event_entry(elicitation_id: str, event_id: str) -> str:
    """The journal entry holding what became of one provider event about the decision."""
    return f"{_JOURNAL}{elicitation_id}/event/{event_id}"


class ExternalCompletions:
    """The references and webhooks of the `ExternalCompletion` flows of one set of pages."""

    def __init__(
        self,
        store: AsyncStore,
        flows: Mapping[str, ExternalCompletion],
        page_key: bytes,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._reach = store
        self._flows = dict(flows)
        self._aead = AESGCM(hmac.new(page_key, b"mcp-elicit external reference", hashlib.sha256).digest())
        self._clock = clock

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    # -- the page's side -------------------------------------------------------------------------------

    async def charge(self, flow: ExternalCompletion, decision: Decision) -> Charge:
        """What the decision asks to pay, from its own records; `CheckoutRefused` when they do not say."""
        entries = await self._reach.journal(decision.operation_id, caller=decision.principal)
        steps = {entry.name: entry.value for entry in entries if not entry.name.startswith("mcp-elicit/")}
        try:
            return flow.charge(decision, steps)
        except (LookupError, TypeError, ValueError) as unsaid:
            log.warning("decision %s: its charge cannot be computed: %s", decision.elicitation_id, unsaid)
            raise CheckoutRefused("The server cannot say what this step charges, so it cannot be done.") from None

    async def last_failure(self, decision: Decision) -> str | None:
        """The provider's words on the latest failed attempt (in its order), if an attempt failed."""
        failed = [v for v in await self._events(decision) if v.get("outcome") == EventOutcome.FAILED]
        if not failed:
            return None
        latest = max(failed, key=lambda value: _order(value))
        return str(latest.get("said") or "no reason given")

    async def reopens_at(self, decision: Decision) -> datetime | None:
        """When the checkout may be opened again, if the last one opened less than `REOPEN_AFTER` ago has not
        reported any event since; None when it may be opened now."""
        entries = await self._reach.journal(decision.operation_id, caller=decision.principal)
        base = f"{_JOURNAL}{decision.elicitation_id}/"
        opened = [entry.recorded_at for entry in entries if entry.name.startswith(base + "opened/")]
        if not opened:
            return None
        last = max(opened)
        if any(entry.recorded_at >= last for entry in entries if entry.name.startswith(base + "event/")):
            return None
        until = last + REOPEN_AFTER
        return until if until > self._now() else None

    async def checkout(self, flow: ExternalCompletion, decision: Decision, return_url: str) -> str:
        """The provider's page for the decision (which must be `external_pending`), with its one reference."""
        charge = await self.charge(flow, decision)
        name = reference_entry(decision.elicitation_id)
        entry = await self._reach.journal_get(decision.operation_id, name, caller=decision.principal)
        if entry is None:
            made: JSONObject = {
                "reference": self._seal(decision.elicitation_id),
                "principal": decision.principal_id,
                "amount": charge.amount,
                "currency": charge.currency,
                "description": charge.description,
            }
            entry = await self._reach.journal_record(decision.operation_id, name, made, caller=decision.principal)
        stored = entry.value
        if not isinstance(stored, dict) or not isinstance(reference := stored.get("reference"), str):
            raise CheckoutRefused("The stored reference of this step cannot be read; nothing was charged.")
        if (stored.get("amount"), stored.get("currency")) != (charge.amount, charge.currency):
            log.warning("decision %s: its charge changed since its reference was made", decision.elicitation_id)
            raise CheckoutRefused("What this step charges changed since it was started; ask your assistant again.")
        try:
            url = await flow.start(Checkout(reference, charge, return_url, decision.expires_at))
        except Exception as failure:  # a provider's client may raise anything; the page says so
            log.warning(
                "decision %s: %s did not open a checkout: %s",
                decision.elicitation_id,
                flow.provider_title,
                type(failure).__name__,
            )
            raise CheckoutRefused(
                f"{flow.provider_title} could not be reached. Nothing was charged; try again."
            ) from None
        if not url.startswith(("https://", "http://")):
            log.warning("decision %s: %s gave a checkout address that is not http(s)", decision.elicitation_id,
                        flow.provider_title)  # fmt: skip
            raise CheckoutRefused(f"{flow.provider_title} gave an address this page will not send you to.")
        opened = f"{_JOURNAL}{decision.elicitation_id}/opened/{secrets.token_hex(8)}"
        await self._reach.journal_record(decision.operation_id, opened, {}, caller=decision.principal)
        return url

    # -- the provider's side ---------------------------------------------------------------------------

    async def receive(self, flow_key: str, headers: Mapping[str, str], body: bytes) -> Received:
        """Apply one webhook delivery for the flow `flow_key` (see the module's list of what each event does)."""
        flow = self._flows.get(flow_key)
        if flow is None:
            log.warning("webhook for %r refused: no external completion flow has that key", flow_key[:64])
            return Received(404, {"error": "unknown_flow"})
        try:
            flow.verifier.verify(headers, body)
        except SignatureInvalid as bad:
            log.warning("webhook for %s refused: %s", flow_key, bad)
            return Received(400, {"error": "bad_signature"})
        except Exception as broken:  # a verifier of the deployer's may raise anything on a malformed header
            log.warning("webhook for %s refused: its signature could not be checked (%s)", flow_key,
                        type(broken).__name__)  # fmt: skip
            return Received(400, {"error": "bad_signature"})
        try:
            event = flow.read_event(body)
        except Exception as unreadable:  # a body nested too deep, a reader's own bug: the provider is told 400
            log.warning("webhook for %s refused: its event cannot be read (%s)", flow_key, type(unreadable).__name__)
            return Received(400, {"error": "unreadable_event"})
        if event is None:
            return Received(200, {"status": "ignored", "why": "not an event about a payment step"})
        if (
            not isinstance(event, ProviderEvent)
            or not isinstance(event.event_id, str)
            or not isinstance(event.reference, str)
            or isinstance(event.order, bool)
            or not isinstance(event.order, int)
            or not isinstance(event.outcome, EventOutcome)
        ):
            log.warning("webhook for %s refused: its reader gave something other than a ProviderEvent", flow_key)
            return Received(400, {"error": "unreadable_event"})
        if not event.event_id or len(event.event_id) > MAX_EVENT_ID or not event.event_id.isprintable():
            log.warning("webhook for %s refused: its event id is empty, too long or not printable", flow_key)
            return Received(400, {"error": "unreadable_event"})
        decision = await self._referenced(flow_key, event)
        if isinstance(decision, Received):
            return decision
        return await self._apply(flow_key, flow, decision, event)

    async def _referenced(self, flow_key: str, event: ProviderEvent) -> Decision | Received:
        """The decision the event's reference was made for, once checked against the stored one."""
        unknown = Received(404, {"error": "unknown_reference"})
        elicitation_id = self._unseal(event.reference)
        if elicitation_id is None:
            log.warning("webhook for %s refused: event %s names a reference this server did not make", flow_key,
                        event.event_id)  # fmt: skip
            return unknown
        try:
            decision = await self._reach.get_decision(elicitation_id, Operator(f"webhook:{flow_key}"))
        except NotFound:
            log.warning("webhook for %s refused: event %s names decision %s, which is gone", flow_key, event.event_id,
                        elicitation_id)  # fmt: skip
            return unknown
        entry = await self._reach.journal_get(
            decision.operation_id, reference_entry(elicitation_id), caller=decision.principal
        )
        stored = entry.value if entry is not None else None
        if (
            decision.key != flow_key
            or not isinstance(stored, dict)
            or not hmac.compare_digest(str(stored.get("reference", "")), event.reference)
        ):
            log.warning("webhook for %s refused: event %s names a reference decision %s does not hold", flow_key,
                        event.event_id, elicitation_id)  # fmt: skip
            return unknown
        return decision

    async def _apply(
        self, flow_key: str, flow: ExternalCompletion, decision: Decision, event: ProviderEvent
    ) -> Received:
        eid = decision.elicitation_id
        now = self._now()
        spent = await self._reach.consume_token(
            f"external-event:{flow_key}:{event.event_id}", expires_at=max(decision.expires_at, now) + EVENT_MEMORY
        )
        entry = event_entry(eid, event.event_id)
        if spent is Consumption.ALREADY_USED:
            done = await self._reach.journal_get(decision.operation_id, entry, caller=decision.principal)
            if done is not None or decision.is_terminal or event.outcome not in FINAL_OUTCOMES:
                log.info("webhook for %s: event %s of decision %s is a duplicate; nothing changed", flow_key,
                         event.event_id, eid)  # fmt: skip
                return Received(200, {"status": "duplicate"})
            # A final event spent by a delivery that has not recorded its outcome (still running, or died midway)
            # while its decision waits: applying it again is safe, every move being a compare-and-set.
        said = _shown(event.said)
        actor = Operator(f"webhook:{flow_key}")
        late = _Late(flow_key, flow, event, entry, said, actor)
        if decision.is_terminal or decision.is_overdue(now):
            expired = decision.status is DecisionStatus.EXPIRED or decision.is_overdue(now)
            return await self._refuse(late, decision, ended="expired" if expired else decision.status.value,
                                      expired=expired)  # fmt: skip
        if event.outcome is not EventOutcome.SUCCEEDED:
            newer = [value for value in await self._events(decision) if _order(value) > event.order]
            if newer:
                await self._record(decision, entry, event, said, "older")
                return Received(200, {"status": "ignored", "why": "older than an event already recorded"})
            if event.outcome is EventOutcome.FAILED:
                await self._record(decision, entry, event, said, "attempt failed")
                await self._reach.note(decision, actor=actor, reason=f"attempt failed at {flow.provider_title}: {said}")
                return Received(200, {"status": "recorded", "decision": decision.status.value})
        record = await self._reach.journal_get(decision.operation_id, reference_entry(eid), caller=decision.principal)
        charged = record.value if record is not None and isinstance(record.value, dict) else {}
        if (
            event.outcome is EventOutcome.SUCCEEDED
            and event.amount is not None
            and ((event.amount, event.currency) != (charged.get("amount"), charged.get("currency")))
        ):
            what = f"{event.outcome} event {event.event_id} from {flow.provider_title}"
            reason = f"{what} reports another amount than the one charged; nothing changed"
            await self._reach.note(decision, actor=actor, reason=reason)
            await self._record(decision, entry, event, said, "wrong amount")
            log.warning("webhook for %s refused: decision %s: %s", flow_key, eid, reason)
            return Received(422, {"error": "amount_mismatch"})
        return await self._finish(late, decision)

    async def _finish(self, late: _Late, decision: Decision) -> Received:
        """Move the decision for a final event, once it holds the decision's claim."""
        flow, event, entry, said = late.flow, late.event, late.entry, late.said
        claim = await self._reach.journal_record(
            decision.operation_id,
            final_entry(decision.elicitation_id),
            {"event": event.event_id, "outcome": event.outcome.value},
            caller=decision.principal,
        )
        claimed = claim.value if isinstance(claim.value, dict) else {}
        if claimed.get("event") != event.event_id:
            first = f"{claimed.get('outcome')} event {claimed.get('event')}"
            return await self._refuse(late, decision, ended=f"{first} came first", expired=False,
                                      paid_before=claimed.get("outcome") == EventOutcome.SUCCEEDED,
                                      applied="lost to another event")  # fmt: skip
        if event.outcome is EventOutcome.SUCCEEDED:
            to = DecisionStatus.EXTERNAL_COMPLETED
            reason = f"{flow.provider_title} reports it done (event {event.event_id}{_amount(event)})"
        else:
            to = DecisionStatus.EXTERNAL_FAILED
            reason = f"{flow.provider_title} reports it {event.outcome} (event {event.event_id}): {said}"
        for _ in range(_MOVE_ATTEMPTS):
            if decision.is_terminal:
                break
            try:
                decision = await self._reach.transition(decision, to, caller=late.actor, reason=reason)
            except DecisionExpired as overtaken:
                return await self._refuse(late, overtaken.current, ended="expired", expired=True)
            except DecisionConflict as moved:
                decision = moved.current
            else:
                await self._record(decision, entry, event, said, str(to))
                return Received(200, {"status": "applied", "decision": decision.status.value})
        if decision.status is to:  # only another delivery of this very event holds the claim and moves it so
            await self._record(decision, entry, event, said, str(to))
            return Received(200, {"status": "duplicate"})
        expired = decision.status is DecisionStatus.EXPIRED
        return await self._refuse(late, decision, ended=decision.status.value, expired=expired)

    async def _refuse(
        self,
        late: _Late,
        decision: Decision,
        *,
        ended: str,
        expired: bool,
        paid_before: bool | None = None,
        applied: str = "late",
    ) -> Received:
        """Refuse an event that comes after the decision ended (or after another final event claimed it): audited,
        recorded, logged once; a success so refused is money to give back, and says so."""
        event = late.event
        what = f"{event.outcome} event {event.event_id} from {late.flow.provider_title}{_amount(event)}"
        if paid_before is None:
            paid_before = decision.status is DecisionStatus.EXTERNAL_COMPLETED
        if event.outcome is EventOutcome.SUCCEEDED and paid_before:
            reason = f"second payment for this reference: refund it at the provider ({what}); nothing changed"
        else:
            reason = f"late {what} after the decision ended ({ended}); nothing changed"
            if event.outcome is EventOutcome.SUCCEEDED:
                reason += "; refund it at the provider"
        await self._reach.note(decision, actor=late.actor, reason=reason)
        await self._record(decision, late.entry, event, late.said, applied)
        log.warning("webhook for %s refused: decision %s: %s", late.flow_key, decision.elicitation_id, reason)
        if expired:
            return Received(410, {"error": "decision_expired"})
        return Received(409, {"error": "decision_ended", "status": decision.status.value})

    async def _record(self, decision: Decision, entry: str, event: ProviderEvent, said: str, applied: str) -> None:
        value: JSONObject = {"outcome": event.outcome.value, "order": event.order, "said": said, "applied": applied}
        await self._reach.journal_record(decision.operation_id, entry, value, caller=decision.principal)

    async def _events(self, decision: Decision) -> list[dict[str, JSONValue]]:
        prefix = f"{_JOURNAL}{decision.elicitation_id}/event/"
        entries = await self._reach.journal(decision.operation_id, caller=decision.principal)
        return [e.value for e in entries if e.name.startswith(prefix) and isinstance(e.value, dict)]

    def _seal(self, elicitation_id: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = self._aead.encrypt(nonce, elicitation_id.encode(), _AAD)
        return REFERENCE_PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def _unseal(self, reference: str) -> str | None:
        if not reference.startswith(REFERENCE_PREFIX) or len(reference) > MAX_REFERENCE:
            return None
        token = reference[len(REFERENCE_PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            return self._aead.decrypt(raw[:12], raw[12:], _AAD).decode()
        except (binascii.Error, ValueError, InvalidTag):
            return None


def _amount(event: ProviderEvent) -> str:
    if event.amount is None or event.currency is None:
        return ""
    return f", {event.currency} {event.amount / 100:,.2f}"


def _order(value: Mapping[str, JSONValue]) -> int:
    order = value.get("order")
    return order if isinstance(order, int) else 0


def _shown(words: str) -> str:
    """A provider's words as they may reach the audit: printable, bounded, URLs and credentials redacted."""
    return redact_text("".join(c if c.isprintable() else " " for c in words)[:MAX_SAID]) or "no reason given"
