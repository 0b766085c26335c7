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

Guarantees: the approval belongs to the call's operation, which is bound to the caller and the digest of the
call's arguments, so it cannot approve another call; the fields the person can change are the editable ones,
every other argument is the call's own; an answer that does not fit the form, or edits that the tool's own
validation refuses, approve nothing. A `when` predicate that raises applies the gate (fails closed).

Does not guarantee: that the person read what they approved.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from mcp_elicit.model import JSONObject, JSONValue, looks_secret, redact_content, render_arguments
from mcp_elicit.model.form_schema import UnsupportedSchema, parse_form
from mcp_elicit.printable import printable

__all__ = [
    "APPROVAL_KEY",
    "DEFAULT_APPROVAL_TTL",
    "NOTE_FIELD",
    "REJECT_FIELD",
    "Approved",
    "Edit",
    "Gate",
    "GateRefused",
    "GatedTool",
    "Rejected",
]

log = logging.getLogger(__name__)

APPROVAL_KEY: Final = "@approval"
"""The question key of a call's approval: `@` is outside what `Flow` accepts as a key, so no body's question has it."""
REJECT_FIELD: Final = "approval_reject"
NOTE_FIELD: Final = "approval_note"
MAX_NOTE: Final = 1000
DEFAULT_APPROVAL_TTL: Final = timedelta(hours=1)
_CONTROLS: Final = frozenset({REJECT_FIELD, NOTE_FIELD})
_FORMATS: Final = frozenset({"email", "uri", "date", "date-time"})
_KEPT: Final = {
    "string": ("minLength", "maxLength"),
    "number": ("minimum", "maximum"),
    "integer": ("minimum", "maximum"),
    "boolean": (),
}
_SHOWN_CHANGE: Final = 120

ArgumentsCheck = Callable[[Mapping[str, Any]], object]
Validate = Callable[[dict[str, Any]], dict[str, Any]]


def is_approval(key: str) -> bool:
    """Whether a question key is a call's approval (`@approval`, or `@approval#2` asked again): a question that
    counts only when a person was shown it, so never answered by the model's own arguments or without a round."""
    return key == APPROVAL_KEY or key.startswith(f"{APPROVAL_KEY}#")


class GateRefused(ValueError):
    """A gate that cannot be declared on this tool: said when the tool is registered, naming what and why."""


@dataclass(frozen=True, slots=True)
class Gate:
    """The tool runs only after a person approved its call (see the module's docstring for what they can do).

    `when` decides from the call's arguments (as the tool's body receives them) whether the gate applies; by
    default it always does. `editable` names arguments the person may change before approving: plain strings,
    numbers, integers, booleans or string enums, checked when the tool is registered. `message` heads the
    question (default "Approve this call?"); `ttl` is how long the approval waits before the call ends unrun.
    """

    when: ArgumentsCheck | None = None
    editable: Sequence[str] = ()
    message: str | None = None
    ttl: timedelta = DEFAULT_APPROVAL_TTL

    def __post_init__(self) -> None:
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
        return "\n".join(lines)

    def schema(self, arguments: Mapping[str, JSONValue]) -> JSONObject:
        """The approval form: the editable arguments prefilled with the call's values, a note, a box to reject."""
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
        schema: JSONObject = {"type": "object", "properties": properties}
        parse_form(schema)  # the one reader of forms must take what is asked; a bug here fails before asking
        return schema

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
        return Approved(self.validate(merged), tuple(edits), note)

    def content(self, answer: Approved | Rejected) -> dict[str, JSONValue]:
        """The answer in its form's shape, as the decision records it (what `read` takes back)."""
        recorded: dict[str, JSONValue] = {}
        if isinstance(answer, Rejected):
            recorded[REJECT_FIELD] = True
        else:
            recorded.update({edit.name: edit.after for edit in answer.edits})
        if answer.note:
            recorded[NOTE_FIELD] = answer.note
        return recorded


def told_the_model(answer: Approved | Rejected) -> list[str]:
    """What the model reads of the person's decision, besides the tool's result (nothing for a plain approval)."""
    said: list[str] = []
    if isinstance(answer, Rejected):
        said.append("The user rejected this call; nothing ran.")
    elif answer.edits:
        changes = "; ".join(f"{edit.name}: {_shown(edit.before)} → {_shown(edit.after)}" for edit in answer.edits)
        said.append(f"The user changed the arguments before approving ({changes}); the tool ran with the changes.")
    if answer.note:
        said.append(f"Note from the user: {answer.note}")
    return said


DISMISSED: Final = (
    "The approval of this call was dismissed without a decision; nothing ran. Calling the tool again asks again."
)
EXPIRED: Final = "Nobody approved this call in time; nothing ran. Calling the tool again asks again."


def _note(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    said = printable(" ".join(value.split()))
    return said or None


def _shown(value: JSONValue) -> str:
    text = printable(json.dumps(value, ensure_ascii=False))
    return text if len(text) <= _SHOWN_CHANGE else text[: _SHOWN_CHANGE - 1] + "…"


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
    if kind not in _KEPT:
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
