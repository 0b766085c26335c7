"""External completion of URL decisions: the single-use reference a checkout carries, and the provider's webhooks.

The decision's page opens the provider's page for a reference this module makes: random, sealed under the
page key so that it names its decision and nothing can forge one, and stored in the journal of the
decision's operation (with the principal it is for and the charge) the first time, so that a decision has
one reference and a reference one decision. The provider's webhooks name that reference; each event is
applied once, by the provider's event id, in the provider's order:

- succeeded: the decision completes (`external_completed`, final), if the amount is the one charged; a
  success is never set aside for its order, the money having been taken;
- failed: the attempt is audited and the decision stays open (`external_pending`) for another attempt;
- cancelled or expired at the provider: the decision fails (`external_failed`, final);
- a failure (of either kind) older, in the provider's order, than an event already recorded for the reference
  is recorded and changes nothing: an old checkout's expiry does not end a decision a newer attempt reported on;
- any new event about a decision that has ended (a reused reference, a late event) changes nothing, is
  audited and refused: 410 after expiry, 409 otherwise; a success so refused is money to refund, and a second
  success for a reference already paid is audited and logged as a second payment to refund.

What became of an event is its entry in the journal (`event_entry`), written once, in the same transaction as
the event's effect: the decision's move, or its audit note. So an event is applied exactly once: a duplicate
or a replay finds the entry; a delivery that died midway (its process killed, the store lost mid-call) left
nothing, and the provider's retry applies the event; of two deliveries of one event at once, one writes the
entry. Of two final events, the compare-and-set moves the decision for one, whose entry says so, and the
other is refused as late (a success as a second payment), however long either was held up on the way.

Guarantees besides: the reference completes only its own decision, of its own principal; a delivery whose
signature fails, whose body cannot be read, whose event has a field of the wrong type or form (checked before
anything is written, so that the provider's corrected retry still applies) or whose reference is unknown
changes nothing and is answered 4xx with one log line naming the flow and the reason, never the body, the
headers or the reference.

The page opens at most one checkout at a time: each opening is first claimed in the journal (a numbered
entry, written once), and only the request that wrote it asks the provider; the claim keeps any other from
opening until the checkout reports an event, `REOPEN_AFTER` passes, or the provider call fails (then it is
released). A charge that cannot be computed is refused before the decision moves.

Does not guarantee: that the provider is honest, or that a success and a cancellation of one reference are
exclusive (they are at every provider we know; if both come, the first to move the decision decides). A
payment whose success arrives after the decision ended, or a second payment for a reference already paid (the
person reopened the checkout while the first webhook was delayed), is refused here and must be refunded at
the provider: the log and the audit say so.
"""

from __future__ import annotations

import base64
import binascii
import functools
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
from mcp_elicit.store import DecisionConflict, DecisionExpired, JournalEntry, NotFound
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.web.flows import (
    CURRENCY_CODE,
    Charge,
    Checkout,
    EventOutcome,
    ExternalCompletion,
    ProviderEvent,
)
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
_JOURNAL = "mcp-elicit/external/"
_AAD = b"mcp-elicit external reference v1"
_MOVE_ATTEMPTS = 3
_NO_CHARGE = "The server cannot say what this step charges, so it cannot be done."


@dataclass(frozen=True, slots=True)
class _Delivery:
    """One delivery of an event being applied, with what recording and refusing it need."""

    flow_key: str
    flow: ExternalCompletion
    event: ProviderEvent
    entry: str
    said: str
    actor: Operator


class _RecordedFirst(Exception):
    """Another delivery of the same event recorded what became of it first: this one's unit is rolled back."""


class CheckoutStillOpen(Exception):
    """The last checkout opened has not reported and may still be paid: another is not opened before `reopens`."""

    def __init__(self, reopens: datetime) -> None:
        super().__init__(f"the checkout may be opened again at {reopens.isoformat()}")
        self.reopens = reopens


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


def event_entry(elicitation_id: str, event_id: str) -> str:
    """The journal entry holding what became of one provider event about the decision."""
    return f"{_kind(elicitation_id, 'event')}{event_id}"


def _opening_entry(elicitation_id: str, opening: int) -> str:
    return f"{_kind(elicitation_id, 'opened')}{opening}"


def _released_entry(elicitation_id: str, opening: int) -> str:
    return f"{_kind(elicitation_id, 'released')}{opening}"


def _kind(elicitation_id: str, kind: str) -> str:
    """The prefix of the decision's journal entries of one kind."""
    return f"{_JOURNAL}{elicitation_id}/{kind}/"


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
        """What the decision asks to pay, from its own records; `CheckoutRefused` when they do not say (the flow's
        `charge` raised, whatever it raised, or gave something other than a `Charge`)."""
        entries = await self._reach.journal(decision.operation_id, caller=decision.principal)
        steps = {entry.name: entry.value for entry in entries if not entry.name.startswith("mcp-elicit/")}
        try:
            charge = flow.charge(decision, steps)
        except Exception as unsaid:  # a deployer's function over the decision's records may raise anything
            log.warning("decision %s: its charge cannot be computed: %s: %s", decision.elicitation_id,
                        type(unsaid).__name__, unsaid)  # fmt: skip
            raise CheckoutRefused(_NO_CHARGE) from None
        if not isinstance(charge, Charge):
            log.warning("decision %s: its flow's charge gave a %s, not a Charge", decision.elicitation_id,
                        type(charge).__name__)  # fmt: skip
            raise CheckoutRefused(_NO_CHARGE)
        return charge

    async def last_failure(self, decision: Decision) -> str | None:
        """The provider's words on the latest failed attempt (in its order), if an attempt failed."""
        failed = [v for v in await self._events(decision) if v.get("outcome") == EventOutcome.FAILED]
        if not failed:
            return None
        latest = max(failed, key=lambda value: _order(value))
        return str(latest.get("said") or "no reason given")

    async def reopens_at(self, decision: Decision) -> datetime | None:
        """When the checkout may be opened again (see `_opening`); None when it may be opened now."""
        entries = await self._reach.journal(decision.operation_id, caller=decision.principal)
        return self._opening(decision, entries)[1]

    async def checkout(self, flow: ExternalCompletion, decision: Decision, charge: Charge, return_url: str) -> str:
        """The provider's page for the decision (which must be `external_pending`) and its `charge` (computed by
        `charge` before the decision moved), with its one reference.

        Only the request that wins the opening's claim (`_claim_opening`) asks the provider for a checkout;
        another one at the same moment gets `CheckoutStillOpen`, like any request in the window. If the provider
        cannot be reached, or gives an address the person will not be sent to, no checkout reached the person, so
        the claim is released and Continue may be pressed again at once; a claim whose release was lost (the
        store gone at that moment) lapses with the window, `REOPEN_AFTER`.
        """
        reference = await self._reference(decision, charge)
        opening = await self._claim_opening(decision)
        try:
            url = await flow.start(Checkout(reference, charge, return_url, decision.expires_at))
        except Exception as failure:  # a provider's client may raise anything; the page says so
            log.warning("decision %s: %s did not open a checkout: %s", decision.elicitation_id, flow.provider_title,
                        type(failure).__name__)  # fmt: skip
            await self._release_opening(decision, opening)
            raise CheckoutRefused(
                f"{flow.provider_title} could not be reached. Nothing was charged; try again."
            ) from None
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            log.warning("decision %s: %s gave a checkout address that is not http(s)", decision.elicitation_id,
                        flow.provider_title)  # fmt: skip
            await self._release_opening(decision, opening)
            raise CheckoutRefused(f"{flow.provider_title} gave an address this page will not send you to.")
        return url

    async def _reference(self, decision: Decision, charge: Charge) -> str:
        """The decision's one reference, made and stored with its principal and charge the first time."""
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
        return reference

    def _opening(self, decision: Decision, entries: list[JournalEntry]) -> tuple[int, datetime | None]:
        """The number of the decision's last opening of a checkout (0: none yet), and until when it keeps another
        from opening: `REOPEN_AFTER` from its claim, unless it was released (its provider call failed) or an event
        was recorded after it (the checkout it opened has reported, or the one before it did meanwhile). None:
        another may open now."""
        eid = decision.elicitation_id
        openings = _numbered(entries, _kind(eid, "opened"))
        if not openings:
            return 0, None
        last = max(openings)
        opened = openings[last].recorded_at
        released = any(entry.name == _released_entry(eid, last) for entry in entries)
        reported = any(entry.recorded_at > opened for entry in entries if entry.name.startswith(_kind(eid, "event")))
        until = opened + REOPEN_AFTER
        return last, None if released or reported or until <= self._now() else until

    async def _claim_opening(self, decision: Decision) -> int:
        """Claim the next opening of a checkout, before the provider is asked for one: the opening's number,
        written once to the journal (the store's insert-once), so that of two requests racing past the window
        exactly one finds its own mark in it and calls the provider. `CheckoutStillOpen` for the other, and for
        any request while the last opening holds (`_opening`)."""
        entries = await self._reach.journal(decision.operation_id, caller=decision.principal)
        last, until = self._opening(decision, entries)
        if until is not None:
            raise CheckoutStillOpen(until)
        claim, mine = await self._write_once(decision, _opening_entry(decision.elicitation_id, last + 1), {})
        if not mine:
            raise CheckoutStillOpen(claim.recorded_at + REOPEN_AFTER)
        return last + 1

    async def _write_once(self, decision: Decision, name: str, value: JSONObject) -> tuple[JournalEntry, bool]:
        """The journal entry `name` as it stands once `value` was written to it unless it was written already,
        and whether this call wrote it: `value` gets a mark of the call's own, so that the call tells its entry
        from an equal one another call wrote (two requests, or two deliveries of one event)."""
        mine: JSONObject = {**value, "by": secrets.token_hex(8)}
        entry = await self._reach.journal_record(decision.operation_id, name, mine, caller=decision.principal)
        return entry, entry.value == mine

    async def _release_opening(self, decision: Decision, opening: int) -> None:
        name = _released_entry(decision.elicitation_id, opening)
        await self._reach.journal_record(decision.operation_id, name, {}, caller=decision.principal)

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
        if (unusable := _unusable(event)) is not None:
            log.warning("webhook for %s refused: the event its reader gave %s", flow_key, unusable)
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
        delivery = _Delivery(flow_key, flow, event, event_entry(eid, event.event_id), _shown(event.said),
                             Operator(f"webhook:{flow_key}"))  # fmt: skip
        if decision.is_terminal or decision.is_overdue(now):
            expired = decision.status is DecisionStatus.EXPIRED or decision.is_overdue(now)
            return await self._refuse(delivery, decision, ended="expired" if expired else decision.status.value,
                                      expired=expired)  # fmt: skip
        if event.outcome is not EventOutcome.SUCCEEDED:
            newer = [value for value in await self._events(decision) if _order(value) > event.order]
            if newer:
                if not await self._record(decision, delivery, "older"):
                    return _duplicate(delivery, eid)
                return Received(200, {"status": "ignored", "why": "older than an event already recorded"})
            if event.outcome is EventOutcome.FAILED:
                failed = f"attempt failed at {flow.provider_title}: {delivery.said}"
                if not await self._record(decision, delivery, "attempt failed", note=failed):
                    return _duplicate(delivery, eid)
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
            if not await self._record(decision, delivery, "wrong amount", note=reason):
                return _duplicate(delivery, eid)
            log.warning("webhook for %s refused: decision %s: %s", flow_key, eid, reason)
            return Received(422, {"error": "amount_mismatch"})
        return await self._finish(delivery, decision)

    async def _finish(self, delivery: _Delivery, decision: Decision) -> Received:
        """Move the decision for a final event, the event's entry recorded in the move's own transaction
        (`_move`): of two final events racing, the compare-and-set lets exactly one move it, and whatever the
        other one meets afterwards, the journal names the event that moved it, so a second payment is never
        taken for a duplicate nor a duplicate for a second payment."""
        flow, event = delivery.flow, delivery.event
        if event.outcome is EventOutcome.SUCCEEDED:
            to = DecisionStatus.EXTERNAL_COMPLETED
            reason = f"{flow.provider_title} reports it done (event {event.event_id}{_amount(event)})"
        else:
            to = DecisionStatus.EXTERNAL_FAILED
            reason = f"{flow.provider_title} reports it {event.outcome} (event {event.event_id}): {delivery.said}"
        for _ in range(_MOVE_ATTEMPTS):
            if decision.is_terminal:
                break
            try:
                moved = await self._reach.atomically(functools.partial(self._move, decision, delivery, to, reason))
            except _RecordedFirst:
                return _duplicate(delivery, decision.elicitation_id)
            if isinstance(moved, DecisionExpired):
                return await self._refuse(delivery, moved.current, ended="expired", expired=True)
            if isinstance(moved, DecisionConflict):
                decision = moved.current
                continue
            return Received(200, {"status": "applied", "decision": moved.status.value})
        expired = decision.status is DecisionStatus.EXPIRED
        return await self._refuse(delivery, decision, ended=decision.status.value, expired=expired)

    async def _move(
        self, decision: Decision, delivery: _Delivery, to: DecisionStatus, reason: str
    ) -> Decision | DecisionExpired | DecisionConflict:
        """The move and the event's entry, in one unit (`_finish`). A lost compare-and-set is given back, not
        raised, so that the unit still commits what the store wrote finding out why (an overdue decision expired
        on the spot)."""
        try:
            moved = await self._reach.transition(decision, to, caller=delivery.actor, reason=reason)
        except (DecisionExpired, DecisionConflict) as lost:
            return lost
        await self._write_entry(moved, delivery, str(to))
        return moved

    async def _refuse(self, delivery: _Delivery, decision: Decision, *, ended: str, expired: bool) -> Received:
        """Refuse an event that comes after the decision ended: audited, recorded, logged once; a success so
        refused is money to give back, and says so. A success meeting a paid decision is a second payment: the
        success that paid it recorded its entry with the move, so this event, finding none of its own, is
        another one."""
        event = delivery.event
        what = f"{event.outcome} event {event.event_id} from {delivery.flow.provider_title}{_amount(event)}"
        if event.outcome is EventOutcome.SUCCEEDED and decision.status is DecisionStatus.EXTERNAL_COMPLETED:
            reason = f"second payment for this reference: refund it at the provider ({what}); nothing changed"
        else:
            reason = f"late {what} after the decision ended ({ended}); nothing changed"
            if event.outcome is EventOutcome.SUCCEEDED:
                reason += "; refund it at the provider"
        if not await self._record(decision, delivery, "late", note=reason):
            return _duplicate(delivery, decision.elicitation_id)
        log.warning("webhook for %s refused: decision %s: %s", delivery.flow_key, decision.elicitation_id, reason)
        if expired:
            return Received(410, {"error": "decision_expired"})
        return Received(409, {"error": "decision_ended", "status": decision.status.value})

    async def _record(self, decision: Decision, delivery: _Delivery, applied: str, *, note: str | None = None) -> bool:
        """Record what became of the event, with its audit `note`, in one transaction; False, and nothing written,
        when another delivery of the event recorded it first.

        The entry is the only mark that an event was applied, written together with its effects or not at all:
        a delivery that dies midway leaves the event to the provider's retry, which applies it once, and of two
        deliveries at once, one notes it."""

        async def write() -> None:
            await self._write_entry(decision, delivery, applied)
            if note is not None:
                await self._reach.note(decision, actor=delivery.actor, reason=note)

        try:
            await self._reach.atomically(write)
        except _RecordedFirst:
            return False
        return True

    async def _write_entry(self, decision: Decision, delivery: _Delivery, applied: str) -> None:
        """Write the event's entry in the unit under way, or raise `_RecordedFirst` to roll the unit back."""
        event = delivery.event
        value: JSONObject = {"outcome": event.outcome.value, "order": event.order, "said": delivery.said,
                             "applied": applied}  # fmt: skip
        _, mine = await self._write_once(decision, delivery.entry, value)
        if not mine:
            raise _RecordedFirst

    async def _events(self, decision: Decision) -> list[dict[str, JSONValue]]:
        prefix = _kind(decision.elicitation_id, "event")
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


def _unusable(event: object) -> str | None:
    """Why the event a flow's reader gave cannot be applied, None if it can. Checked before anything is
    written: a reader that puts a wrong type into a field would otherwise fail the delivery partway with a 500,
    or have its value written into the event's entry and the audit; a 400 naming the field says what to fix,
    and the corrected retry applies. Names fields and types, never values (a provider's words may carry what
    the log must not)."""
    if not isinstance(event, ProviderEvent):
        return f"is a {type(event).__name__}, not a ProviderEvent"
    eid, currency = event.event_id, event.currency
    right = {
        "event_id": isinstance(eid, str) and 0 < len(eid) <= MAX_EVENT_ID and eid.isprintable(),
        "reference": isinstance(event.reference, str),
        "order": _whole(event.order),
        "outcome": isinstance(event.outcome, EventOutcome),
        "amount": event.amount is None or _whole(event.amount),
        "currency": currency is None or (isinstance(currency, str) and bool(CURRENCY_CODE.fullmatch(currency))),
        "said": isinstance(event.said, str),
    }
    wrong = [f"{name} ({type(getattr(event, name)).__name__})" for name, ok in right.items() if not ok]
    if wrong:
        return f"has a wrong {', '.join(wrong)}: see ProviderEvent for each field's type and form"
    return None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _numbered(entries: list[JournalEntry], prefix: str) -> dict[int, JournalEntry]:
    """The entries named `prefix` and a number, by that number."""
    tails = ((entry.name[len(prefix) :], entry) for entry in entries if entry.name.startswith(prefix))
    return {int(tail): entry for tail, entry in tails if tail.isdecimal()}


def _duplicate(delivery: _Delivery, elicitation_id: str) -> Received:
    log.info("webhook for %s: event %s of decision %s is a duplicate; nothing changed", delivery.flow_key,
             delivery.event.event_id, elicitation_id)  # fmt: skip
    return Received(200, {"status": "duplicate"})


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
