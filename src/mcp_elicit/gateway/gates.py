"""Approval gates from the gateway's config file: a `[[gate]]` table per upstream tool, bound to the tool once the
upstream lists it.

A table is checked whole when the file is read (unknown keys, a `when` or `scope` that cannot be read, a bad
duration, approvers without roles), so a mistake stops the gateway at start, named by its key. What can only be
checked against the tool (that the editable arguments and the names `when` reads are among its arguments) is
checked when the tool is bound: at start, and again whenever the upstream's tool list changes.

The gate is the approvals module's `Gate`, with the same guarantees: what runs upstream is the call the person
approved (edits only to its editable arguments, validated against the tool's input schema), once. A gate whose
`when` reads an argument the tool no longer has always applies: it fails closed rather than let calls through
on a predicate that cannot be true any more.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.validators import validator_for
from mcp_types import Tool
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from mcp_elicit.approvals import (
    DEFAULT_APPROVAL_TTL,
    Gate,
    GatedTool,
    GateRefused,
    Grants,
    editable_arguments,
)
from mcp_elicit.approvals.gate import Validate
from mcp_elicit.gateway.predicate import Expression, Predicate
from mcp_elicit.model import ApproverRule

log = logging.getLogger(__name__)

ALL: Literal["all"] = "all"
LONGEST = timedelta(days=3650)
"""No duration in the file is longer: a clock plus one must stay a date."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(?:(\d+)([smhd]))+")
_PART = re.compile(r"(\d+)([smhd])")


def duration(value: object) -> object:
    """`90s`, `15m`, `8h`, `30d`, `1h30m`, or a number of seconds; anything else is left to pydantic to refuse."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return _bounded(value, value)
    if isinstance(value, str):
        text = value.strip().lower()
        if _DURATION.fullmatch(text):
            return _bounded(sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(text)), value)
        raise PydanticCustomError(
            "duration", "a duration such as '90s', '15m', '8h', '30d' or '1h30m', not {given}", {"given": repr(value)}
        )
    return value


def _bounded(seconds: float, given: object) -> timedelta:
    if not 0 <= seconds <= LONGEST.total_seconds():
        raise PydanticCustomError(
            "duration", "a duration from 0 to {days} days, not {given}", {"days": LONGEST.days, "given": repr(given)}
        )
    return timedelta(seconds=seconds)


Duration = Annotated[timedelta, BeforeValidator(duration)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class GrantsTable(_Table):
    """`[gate.grants]`: what the person may approve besides this one call."""

    session: Duration | Literal[False] = Field(default=timedelta(hours=8))
    """How long a "this session" approval stands; `false` offers none."""
    always: Duration | None = None
    """How long an "always" approval stands, at most; none by default."""
    scope: str | None = None
    """An expression over the arguments whose text a grant is limited to (`"env"`: calls with the same env)."""

    @field_validator("scope")
    @classmethod
    def _readable(cls, scope: str | None) -> str | None:
        if scope is not None:
            Expression.compile(scope)
        return scope

    @model_validator(mode="after")
    def _offers(self) -> GrantsTable:
        self.grants()
        return self

    def grants(self) -> Grants:
        scope = None if self.scope is None else Expression.compile(self.scope)
        return Grants(session=self.session or None, always=self.always, scope=scope)


class ApproversTable(_Table):
    """`[gate.approvers]`: who decides instead of the caller."""

    roles: list[str]
    quorum: int = 1
    escalate_after: Duration | None = None
    escalate_to: list[str] = []

    @model_validator(mode="after")
    def _a_rule(self) -> ApproversTable:
        self.rule()
        return self

    def rule(self) -> ApproverRule:
        return ApproverRule(self.roles, self.quorum, self.escalate_after, self.escalate_to)


class GateTable(_Table):
    """`[[gate]]`: calls of one upstream tool run only once approved. `tool` alone gates every call of it, every
    editable argument editable."""

    tool: str = Field(min_length=1)
    """The tool as its upstream names it (without the gateway's prefix)."""
    upstream: str | None = None
    """Which upstream's tool, by its name; needed only when the gateway relays several."""
    when: str | None = None
    """A predicate over the call's arguments; the gate applies only to calls for which it is true."""
    editable: Literal["all"] | list[str] = ALL
    """The arguments the person may change before approving: `"all"` (every one a form can show), or a list."""
    message: str | None = None
    ttl: Duration = DEFAULT_APPROVAL_TTL
    """How long the approval waits before the call ends unrun."""
    grants: GrantsTable | None = None
    approvers: ApproversTable | None = None
    fallback: Literal["error", "web"] = "error"
    """For a client that cannot be asked: fail the call saying so, or send the person to the gateway's page."""

    @field_validator("when")
    @classmethod
    def _compiles(cls, when: str | None) -> str | None:
        if when is not None:
            Predicate.compile(when)
        return when

    @model_validator(mode="after")
    def _as_a_gate(self) -> GateTable:
        """What `Gate` itself refuses (approvers with grants, a role name, a quorum), refused with the file."""
        self.gate_for(())
        return self

    def gate_for(self, editable: tuple[str, ...] | list[str], defaults: Mapping[str, Any] | None = None) -> Gate:
        """The gate; `defaults` are the tool's argument defaults, which `when` reads for an argument the call leaves
        out (the upstream runs with them)."""
        when = None if self.when is None else Predicate.compile(self.when)
        return Gate(
            when=None if when is None else _with_defaults(when, dict(defaults or {})),
            editable=editable,
            message=self.message,
            ttl=self.ttl,
            grants=None if self.grants is None else self.grants.grants(),
            approvers=None if self.approvers is None else self.approvers.rule(),
        )

    def bind(self, tool: Tool, named: str | None = None) -> GatedTool:
        """This gate on the upstream's `tool` as it lists it now; `GateRefused` saying what does not fit. `named` is
        what the person is shown and grants are kept under (default: the tool's name): behind a gateway, the
        upstream's name with it, so that a grant for one upstream's tool never lets another's through."""
        named = named or tool.name
        schema = tool.input_schema
        properties = schema.get("properties")
        known = list(properties) if isinstance(properties, Mapping) else []
        where = f"the gate of tool {self.tool!r}"
        if self.editable == ALL:
            editable = editable_arguments(schema)
        else:
            editable = list(self.editable)
            missing = [name for name in editable if name not in known]
            if missing:
                raise GateRefused(f"{where}: editable names {missing}, not arguments of the tool (it has {known})")
        defaults = {
            name: prop["default"]
            for name, prop in (properties.items() if isinstance(properties, Mapping) else ())
            if isinstance(prop, Mapping) and "default" in prop
        }
        gate = self.gate_for(editable, defaults)
        if self.when is not None:
            unknown = Predicate.compile(self.when).unknown(known)
            if unknown:
                raise GateRefused(f"{where}: when reads {unknown}, not arguments of the tool (it has {known})")
        return gate.bind(named, schema, schema_validator(tool.name, schema))


def _with_defaults(when: Predicate, defaults: dict[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    def applies(arguments: Mapping[str, Any]) -> bool:
        return when({**defaults, **arguments})

    return applies


def schema_validator(tool: str, schema: Mapping[str, Any]) -> Validate:
    """The check of approved arguments against the tool's input schema (JSON Schema 2020-12 unless it says
    otherwise), raising pydantic's `ValidationError` as the approval form expects; `GateRefused` for a schema that
    is not one."""
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as error:
        raise GateRefused(f"tool {tool!r}: its input schema is not a valid JSON Schema: {error.message}") from None
    validator = cls(schema)

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        errors = sorted(validator.iter_errors(arguments), key=lambda error: list(map(str, error.absolute_path)))
        if errors:
            details: list[InitErrorDetails] = [
                {
                    "type": PydanticCustomError("schema", "{message}", {"message": error.message}),
                    "loc": tuple(error.absolute_path) or ("arguments",),
                    "input": error.instance,
                }
                for error in errors
            ]
            raise ValidationError.from_exception_data(tool, details)
        return arguments

    return validate
