"""A gate: a tool's call runs only once a person approved that exact call, as it was shown to them.

The approval is a form decision of the call's operation under the key `APPROVAL_KEY` (which no author's key can
take), so it is asked, answered, recorded and audited as every question is, on every era and through every
fallback: `elicitation/create` on the live call, a 2026-07-28 round, a task's input request, the web form, the
inbox. What the person is shown is the call itself: the tool, each argument rendered in full (secret-looking
names and credential-shaped values redacted, see `render_arguments`) and the arguments the author marked
editable as fields prefilled with the call's values, with a note to the assistant and a box to reject.

How MCP's three answers map (the same on every era):
- accept, nothing changed: **approve**; the tool runs with the call's arguments.
- accept with changed values: **edit**; the merged arguments are validated as the tool validates its input (an
  invalid edit is asked again with the problem named) and the tool runs with them; the model is told what
  changed. An editable field left out means "unchanged" (a 2025-06-18 client need not show defaults).
- accept with `REJECT_FIELD` ticked, or decline: **reject**; nothing runs and the model is told, with the note.
- the note (`NOTE_FIELD`), with an approval or a rejection: **respond**; the model reads it beside the result.
- cancel: no decision. Nothing runs, the call ends in an error saying so, and calling the tool again asks again.

With `Gate(grants=Grants(...))` the form also asks how long the approval stands (`GRANT_FIELD`): just this call
(the default), for this session, or always (see `Grants`). A standing grant lets later calls of the tool from
the same principal and client (and of the same scope value, when the gate scopes grants) run without asking.

Guarantees: the approval belongs to the call's operation, which is bound to the caller and the digest of the
call's arguments, so it cannot approve another call; the fields the person can change are the editable ones,
every other argument is the call's own; an answer that does not fit the form, or edits that the tool's own
validation refuses, approve nothing. A `when` predicate that raises applies the gate (fails closed).

A call a grant let through tells the model so, first in its result ("Ran without asking: the user's session
approval of ..."), recorded with the result so that a replay or a task's result says the same.

Does not guarantee: that the person read what they approved. Nor, for a call a grant let through, that the
person knows of that call: a grant is their standing approval, until it expires or is revoked.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from mcp_elicit.approvals.backends import ApprovalBackend, InboxApproval
from mcp_elicit.model import (
    GRANT_FIELD,
    NOTE_FIELD,
    REJECT_FIELD,
    ApproverRule,
    Grant,
    GrantKind,
    JSONObject,
    JSONValue,
    looks_like_credential,
    looks_secret,
    redact_content,
    render_arguments,
)
from mcp_elicit.model.form_schema import UnsupportedSchema, parse_form
from mcp_elicit.printable import printable

__all__ = [
    "APPROVAL_KEY",
    "DEFAULT_APPROVAL_TTL",
    "DEFAULT_SESSION_TTL",
    "GRANT_FIELD",
    "NOTE_FIELD",
    "REJECT_FIELD",
    "Approved",
    "Edit",
    "Gate",
    "GateRefused",
    "GatedTool",
    "GrantOffer",
    "Grants",
    "Rejected",
]

log = logging.getLogger(__name__)

APPROVAL_KEY: Final = "@approval"
"""The question key of a call's approval: `@` is outside what `Flow` accepts as a key, so no body's question has it."""
MAX_NOTE: Final = 1000
DEFAULT_APPROVAL_TTL: Final = timedelta(hours=1)
ONCE: Final = "once"
"""The choice of `GRANT_FIELD` that grants nothing beyond the call: the default."""
DEFAULT_SESSION_TTL: Final = timedelta(hours=8)
MAX_GRANT_TTL: Final = timedelta(days=3650)
"""The longest a standing grant may run: ten years is already never in practice, and any date stays printable."""
MAX_SCOPE: Final = 200
_CONTROLS: Final = frozenset({REJECT_FIELD, NOTE_FIELD, GRANT_FIELD})
_FORMATS: Final = frozenset({"email", "uri", "date", "date-time"})
_KEPT: Final = {
    "string": ("minLength", "maxLength"),
    "number": ("minimum", "maximum"),
    "integer": ("minimum", "maximum"),
    "boolean": (),
}
_SHOWN_CHANGE: Final = 120

ArgumentsCheck = Callable[[Mapping[str, Any]], object]
ScopeOf = Callable[[Mapping[str, Any]], str]
Validate = Callable[[dict[str, Any]], dict[str, Any]]


def is_approval(key: str) -> bool:
    """Whether a question key is a call's approval (`@approval`, or `@approval#2` asked again): a question that
    counts only when a person was shown it, so never answered by the model's own arguments or without a round."""
    return key == APPROVAL_KEY or key.startswith(f"{APPROVAL_KEY}#")


class GateRefused(ValueError):
    """A gate that cannot be declared on this tool: said when the tool is registered, naming what and why."""


@dataclass(frozen=True, slots=True)
class Grants:
    """What the person may answer besides "just this call": that this app may call the tool without asking again.

    `session`: for this session, this principal and client (the app), for that long (8 hours by default; `None`
    offers no session grant). `always`: until that long from now, the longest standing approval the author allows
    (`None`, the default, offers none). A grant covers calls of this tool only, from the same principal and
    client, and is revocable at once (`mcp-elicit grants revoke`, the inbox).

    `scope` narrows a grant to calls like the approved one: a function of the call's arguments (as the body
    receives them) to a short text, e.g. `lambda a: f"env={a['env']}"`; a grant then covers only calls whose
    scope equals the approved call's, and the choices say so. The text is stored and shown: never a secret. A
    scope that raises, or gives anything but a short printable text, offers no grant for that call and lets
    none through (it fails closed, asking).
    """

    session: timedelta | None = DEFAULT_SESSION_TTL
    always: timedelta | None = None
    scope: ScopeOf | None = None

    def __post_init__(self) -> None:
        for name, ttl in (("session", self.session), ("always", self.always)):
            if ttl is not None and not isinstance(ttl, timedelta):
                raise TypeError(f"Grants({name}=...) is a timedelta, or None to not offer it")
            if ttl is not None and ttl <= timedelta(0):
                raise ValueError(f"Grants({name}=...) needs a positive TTL, got {ttl}")
        for name, ttl in (("session", self.session), ("always", self.always)):
            if ttl is not None and ttl > MAX_GRANT_TTL:
                raise ValueError(f"Grants({name}=...) may be at most {MAX_GRANT_TTL.days} days, got {ttl}")
        if self.session is None and self.always is None:
            raise ValueError("Grants() offers nothing with session=None and always=None; leave grants out instead")
        if self.session is not None and self.always is not None and self.always < self.session:
            raise ValueError(f"Grants(always={self.always}) is shorter than the session grant ({self.session})")
        if self.scope is not None and not callable(self.scope):
            raise TypeError("Grants(scope=...) takes a function of the call's arguments")

    @property
    def kinds(self) -> tuple[GrantKind, ...]:
        return tuple(kind for kind, ttl in ((GrantKind.SESSION, self.session), (GrantKind.ALWAYS, self.always)) if ttl)

    def allows(self, grant: Grant, now: datetime) -> bool:
        """Whether a grant given earlier still counts under the gate as it is now: of a kind it still offers, and
        no older than that kind's TTL now is (an author who takes `always` back, or shortens it, takes back the
        grants given under it)."""
        if grant.kind not in self.kinds:
            return False
        return now < grant.created_at + self.ttl(grant.kind)

    def ttl(self, kind: GrantKind) -> timedelta:
        ttl = self.session if kind is GrantKind.SESSION else self.always
        if ttl is None:
            raise ValueError(f"this gate offers no {kind.value} grant")
        return ttl

    def offer(self, arguments: Mapping[str, Any], tool: str) -> GrantOffer | None:
        """The grants one call's approval offers, with the call's scope; `None` when its scope cannot be told."""
        if self.scope is None:
            return GrantOffer(self, None)
        try:
            scope = self.scope(arguments)
        except Exception as error:  # fails closed: no grant is offered, none lets the call through
            log.warning("tool %s: the grants' scope= raised %s; no standing grant applies", tool, type(error).__name__)
            return None
        if not isinstance(scope, str) or not 0 < len(scope) <= MAX_SCOPE or not scope.isprintable():
            log.warning("tool %s: the grants' scope= gave no short printable text; no standing grant applies", tool)
            return None
        if looks_like_credential(scope):
            log.warning("tool %s: the grants' scope= gave a credential-shaped text; no standing grant applies", tool)
            return None
        return GrantOffer(self, scope)


@dataclass(frozen=True, slots=True)
class GrantOffer:
    """The standing grants one call's approval offers: its gate's `Grants`, and the scope a grant would have."""

    grants: Grants
    scope: str | None

    def choices(self, tool: str) -> list[JSONValue]:
        """The titled choices of `GRANT_FIELD`, "just this call" first; each says what it lets through, for how long."""
        scoped = f" with {self.scope}" if self.scope is not None else ""
        choices: list[JSONValue] = [{"const": ONCE, "title": "Just this call"}]
        for kind in self.grants.kinds:
            ttl = _duration(self.grants.ttl(kind))
            if kind is GrantKind.SESSION:
                title = f"Also {tool} calls{scoped} from this app for this session ({ttl})"
            else:
                title = f"Always allow {tool} calls{scoped} from this app (for {ttl})"
            choices.append({"const": kind.value, "title": title})
        return choices


@dataclass(frozen=True, slots=True)
class Gate:
    """The tool runs only after a person approved its call (see the module's docstring for what they can do).

    `when` decides from the call's arguments (as the tool's body receives them) whether the gate applies; by
    default it always does. `editable` names arguments the person may change before approving: plain strings,
    numbers, integers, booleans or string enums, checked when the tool is registered. `message` heads the
    question (default "Approve this call?"); `ttl` is how long the approval waits before the call ends unrun.
    `grants` lets the person approve later calls too, for this session or always (see `Grants`).

    `approvers` names who decides instead of the requester: signed-in members of its roles, `quorum` of them on
    the same arguments, never the requester themself (see `ApproverRule`). The call then waits for them, however
    it came (a task, still-waiting rounds, the live call until `Elicitation(approver_wait=...)`), and is never
    asked through the requester's own client. Such a gate offers no standing grants: each call is decided.
    """

    when: ArgumentsCheck | None = None
    editable: Sequence[str] = ()
    message: str | None = None
    ttl: timedelta = DEFAULT_APPROVAL_TTL
    grants: Grants | None = None
    approvers: ApproverRule | None = None
    approval: ApprovalBackend | None = None

    def __post_init__(self) -> None:
        if self.approval is not None:
            if not isinstance(self.approval, ApprovalBackend):
                raise TypeError("Gate(approval=...) takes an approval backend: PolicyApproval(...), AgentApproval(...)")
            if self.approvers is not None:
                raise ValueError("Gate(approvers=..., approval=...): say who decides once, with one or the other")
            object.__setattr__(self, "approvers", self.approval.rule)
        if self.when is not None and not callable(self.when):
            raise TypeError("Gate(when=...) takes a function of the call's arguments")
        if inspect.iscoroutinefunction(self.when):
            raise TypeError("Gate(when=...) decides at once from the arguments: a plain function, not an async one")
        if isinstance(self.editable, str):
            raise TypeError("Gate(editable=...) takes a list of argument names, not one string")
        editable = tuple(self.editable)
        if any(not isinstance(name, str) or not name for name in editable):
            raise TypeError("Gate(editable=...) names arguments by their non-empty names")
        if len(set(editable)) != len(editable):
            raise ValueError(f"Gate(editable=...) names an argument twice: {list(editable)}")
        object.__setattr__(self, "editable", editable)
        if self.message is not None and not self.message.strip():
            raise ValueError("Gate(message=...) is the question's heading; leave it out rather than empty")
        if self.ttl <= timedelta(0):
            raise ValueError(f"an approval needs a positive TTL, got {self.ttl}")
        if self.grants is not None and not isinstance(self.grants, Grants):
            raise TypeError("Gate(grants=...) takes Grants(session=..., always=..., scope=...)")
        if self.approvers is not None and not isinstance(self.approvers, ApproverRule):
            raise TypeError("Gate(approvers=...) takes ApproverRule(roles=[...], quorum=..., ...)")
        if self.approvers is not None and self.grants is not None:
            raise ValueError(
                "Gate(approvers=..., grants=...): a standing grant is the requester's own approval of later calls, "
                "and a gate with approvers is never answered by the requester; leave grants out"
            )

    @property
    def backend(self) -> ApprovalBackend | None:
        """What decides the approval out of band: `approval`, or the inbox of `approvers`; None when the requester
        approves their own call."""
        if self.approval is not None:
            return self.approval
        return None if self.approvers is None else InboxApproval(self.approvers)

    def applies(self, arguments: Mapping[str, Any], tool: str) -> bool:
        if self.when is None:
            return True
        try:
            return bool(self.when(arguments))
        except Exception as error:  # the gate fails closed: an error in deciding asks the person
            log.warning("tool %s: the gate's when= check raised %s; asking for approval", tool, type(error).__name__)
            return True

    def bind(self, tool: str, input_schema: Mapping[str, Any], validate: Validate) -> GatedTool:
        """This gate on `tool`, whose arguments have the JSON Schema `input_schema` and are checked by `validate`
        (JSON in, the body's values out, pydantic's `ValidationError` for what it refuses); `GateRefused` if the
        gate cannot be declared on it."""
        properties = input_schema.get("properties")
        if not isinstance(properties, Mapping):
            properties = {}
        definitions = input_schema.get("$defs")
        fields: dict[str, JSONObject] = {}
        for name in self.editable:
            where = f"Gate(editable=...) of tool {tool!r}: argument {name!r}"
            if name in _CONTROLS:
                raise GateRefused(f"{where} has the name of the approval form's own field; rename the argument")
            prop = properties.get(name)
            if not isinstance(prop, Mapping):
                raise GateRefused(f"{where} is not an argument of the tool (it has {sorted(properties)})")
            fields[name] = _editable_field(where, name, _resolved(prop, definitions))
        return GatedTool(tool, self, fields, validate)


@dataclass(frozen=True, slots=True)
class Edit:
    """One argument the person changed before approving: its value as called and as approved (JSON)."""

    name: str
    before: JSONValue
    after: JSONValue


@dataclass(frozen=True, slots=True)
class Approved:
    """Run the tool with `arguments` (as its body takes them); `edits` say what the person changed."""

    arguments: dict[str, Any]
    edits: tuple[Edit, ...] = ()
    note: str | None = None
    grant: GrantKind | None = None
    """The standing grant the person chose besides this call, if any."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """Nothing runs; `note` is what the person told the model, if anything."""

    note: str | None = None


@dataclass(frozen=True, slots=True)
class GatedTool:
    """A gate bound to one tool: its editable fields in the restricted form schema, checked at registration."""

    tool: str
    gate: Gate
    fields: Mapping[str, JSONObject] = field(repr=False)
    validate: Validate = field(repr=False)

    def message(self, arguments: Mapping[str, JSONValue]) -> str:
        """The question as the person reads it: the heading, the tool, every argument (redacted), what is editable."""
        heading = self.gate.message or "Approve this call?"
        lines = [heading, "", f"Tool: {self.tool}", *render_arguments(arguments)]
        if self.fields:
            lines += ["", f"You may change {', '.join(self.fields)} before approving."]
        rule = self.gate.approvers
        if rule is not None:
            needed = "an approver" if rule.quorum == 1 else f"{rule.quorum} approvers"
            lines += ["", f"Needs {needed} of {rule.named}; the requester cannot approve it."]
        return "\n".join(lines)

    def schema(self, arguments: Mapping[str, JSONValue], offer: GrantOffer | None = None) -> JSONObject:
        """The approval form: the editable arguments prefilled with the call's values, a note, a box to reject, and
        with `offer`, how long the approval stands."""
        properties: dict[str, JSONValue] = {}
        for name, prop in self.fields.items():
            shown = dict(prop)
            value = arguments.get(name)
            # The schema is stored with the decision: a value the redaction rule would hide is not prefilled.
            if value is not None and redact_content({name: value}, query="secret") == {name: value}:
                shown["default"] = value
            properties[name] = shown
        properties[NOTE_FIELD] = {
            "type": "string",
            "title": "Note to the assistant (optional)",
            "description": "Sent to the assistant with your decision.",
            "maxLength": MAX_NOTE,
        }
        properties[REJECT_FIELD] = {
            "type": "boolean",
            "title": "Reject this call",
            "description": "Nothing runs; your note says why.",
            "default": False,
        }
        if offer is not None:
            properties[GRANT_FIELD] = {
                "type": "string",
                "title": "Approve",
                "description": "Later calls you allow here run without asking until then; you can revoke it any time.",
                "oneOf": offer.choices(self.tool),
                "default": ONCE,
            }
        return {"type": "object", "properties": properties}

    def read(self, content: Mapping[str, Any], arguments: Mapping[str, JSONValue]) -> Approved | Rejected:
        """The person's answer (already fitted to `schema`): a rejection, or the arguments to run with.

        The merged arguments go through the tool's own validation; the pydantic `ValidationError` it raises for
        an edit it refuses is the caller's to turn into the question asked again, naming the argument.
        """
        note = _note(content.get(NOTE_FIELD))
        if content.get(REJECT_FIELD) is True:
            return Rejected(note)
        merged: dict[str, Any] = dict(arguments)
        edits = []
        for name in self.fields:
            if name in content and content[name] != arguments.get(name):
                merged[name] = content[name]
                edits.append(Edit(name, arguments.get(name), content[name]))
        chosen = content.get(GRANT_FIELD)
        grant = GrantKind(chosen) if chosen in tuple(GrantKind) else None
        return Approved(self.validate(merged), tuple(edits), note, grant)

    def content(self, answer: Approved | Rejected) -> dict[str, JSONValue]:
        """The answer in its form's shape, as the decision records it (what `read` takes back)."""
        recorded: dict[str, JSONValue] = {}
        if isinstance(answer, Rejected):
            recorded[REJECT_FIELD] = True
        else:
            recorded.update({edit.name: edit.after for edit in answer.edits})
            if answer.grant is not None:
                recorded[GRANT_FIELD] = answer.grant.value
        if answer.note:
            recorded[NOTE_FIELD] = answer.note
        return recorded


def told_the_model(answer: Approved | Rejected, *, approvers: bool = False) -> list[str]:
    """What the model reads of the decision, besides the tool's result (nothing for a plain approval): the user's,
    or with `approvers`, the approvers' (whose notes each name their approver)."""
    said: list[str] = []
    who, one = ("The approvers", "An approver") if approvers else ("The user", "The user")
    if isinstance(answer, Rejected):
        said.append(f"{one} rejected this call; nothing ran.")
    elif answer.edits:
        changes = "; ".join(f"{edit.name}: {_shown(edit.before)} → {_shown(edit.after)}" for edit in answer.edits)
        said.append(f"{who} changed the arguments before approving ({changes}); the tool ran with the changes.")
    if answer.note:
        said.append(f"Note from {who.lower()}: {answer.note}")
    return said


def told_of_grant(grant: Grant) -> str:
    """What the model reads of a standing grant the person gave with their approval."""
    scoped = f" with {grant.scope}" if grant.scope is not None else ""
    until = grant.expires_at.strftime("%Y-%m-%d %H:%M UTC")
    if grant.kind is GrantKind.SESSION:
        return (
            f"The user also approved {grant.tool} calls{scoped} from this app for this session, until {until}: "
            "they run without asking."
        )
    return f"The user always allows {grant.tool} calls{scoped} from this app, until {until}: they run without asking."


def told_of_use(grant: Grant, grants: Grants) -> str:
    """What the model reads of a call a standing grant let through: that nobody was asked, on whose approval, and
    until when it stands (the gate's TTL now, where the author shortened it since)."""
    scoped = f" with {grant.scope}" if grant.scope is not None else ""
    ends = grant.expires_at
    if grant.kind in grants.kinds:
        ends = min(ends, grant.created_at + grants.ttl(grant.kind))
    until = ends.strftime("%Y-%m-%d %H:%M UTC")
    which = "session" if grant.kind is GrantKind.SESSION else "standing"
    approval = f"the user's {which} approval of {grant.tool} calls{scoped} from this app"
    return f"Ran without asking: {approval}, until {until}."


def grant_not_kept(kind: GrantKind, before: str | None, after: str | None) -> str:
    """What the model reads when the person's edit changed the scope the grant they chose was shown for."""
    return (
        f"The user's {kind.value} approval was not kept: their change of the arguments changed the scope it was "
        f"offered for ({before} → {after}), so later calls are asked again."
    )


DISMISSED: Final = (
    "The approval of this call was dismissed without a decision; nothing ran. Calling the tool again asks again."
)
EXPIRED: Final = "Nobody approved this call in time; nothing ran. Calling the tool again asks again."


def _duration(ttl: timedelta) -> str:
    seconds = int(ttl.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


def _note(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    said = printable(" ".join(value.split()))
    return said or None


def _shown(value: JSONValue) -> str:
    text = printable(json.dumps(value, ensure_ascii=False))
    return text if len(text) <= _SHOWN_CHANGE else text[: _SHOWN_CHANGE - 1] + "…"


def editable_arguments(input_schema: Mapping[str, Any]) -> list[str]:
    """The arguments of a tool with this input schema that a person can edit on the approval form (those
    `Gate.bind` takes as `editable`): plain strings, numbers, integers, booleans and string enums that do not look
    secret, in the schema's order."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    editable = []
    for name, prop in properties.items():
        if name in _CONTROLS or not isinstance(prop, Mapping):
            continue
        try:
            _editable_field(name, name, _resolved(prop, input_schema.get("$defs")))
        except GateRefused:
            continue
        editable.append(name)
    return editable


def _resolved(prop: Mapping[str, Any], definitions: object) -> Mapping[str, Any]:
    """The property with a local `$ref` (pydantic's for an Enum, alone or in `allOf`) replaced by what it names."""
    reference = prop.get("$ref")
    if reference is None and isinstance(prop.get("allOf"), list) and len(prop["allOf"]) == 1:
        reference = prop["allOf"][0].get("$ref") if isinstance(prop["allOf"][0], Mapping) else None
    if not isinstance(reference, str):
        return prop
    name = reference.removeprefix("#/$defs/")
    found = definitions.get(name) if isinstance(definitions, Mapping) else None
    if not isinstance(found, Mapping):
        return prop
    return {**found, **{k: v for k, v in prop.items() if k not in ("$ref", "allOf")}}


def _editable_field(where: str, name: str, prop: Mapping[str, Any]) -> JSONObject:
    kind = prop.get("type")
    if not isinstance(kind, str) or kind not in _KEPT:
        shape = "optional (it may be null)" if "anyOf" in prop or isinstance(kind, list) else f"of type {kind!r}"
        raise GateRefused(
            f"{where} is {shape}: only plain strings, numbers, integers, booleans and string enums can be "
            "edited in the approval form"
        )
    if looks_secret(name, prop.get("description"), kind="boolean" if kind == "boolean" else "text"):
        raise GateRefused(f"{where} looks like a secret, which a form may never ask for; it cannot be editable")
    shown: dict[str, JSONValue] = {"type": kind, "title": str(prop.get("title") or name)}
    if isinstance(prop.get("description"), str):
        shown["description"] = prop["description"]
    for keyword in _KEPT[kind]:
        if isinstance(prop.get(keyword), int | float) and not isinstance(prop.get(keyword), bool):
            shown[keyword] = prop[keyword]
    if kind == "string":
        if "enum" in prop:
            if not all(isinstance(choice, str) for choice in prop["enum"]):
                raise GateRefused(f"{where} is an enum whose values are not all strings")
            shown["enum"] = list(prop["enum"])
        if prop.get("format") in _FORMATS:
            shown["format"] = prop["format"]
    elif "enum" in prop:
        raise GateRefused(f"{where} is an enum of {kind} values: only string enums can be edited in a form")
    try:
        parse_form({"type": "object", "properties": {name: shown}})
    except UnsupportedSchema as unsupported:
        raise GateRefused(f"{where} cannot be a form field: {unsupported}") from None
    return shown
