"""Form definitions: the one place that turns a pydantic model into a form question and checks its answer.

Guarantees:

- A model that `form_spec` accepts renders to the restricted `requestedSchema` that MCP 2025-11-25 and
  2026-07-28 define (`{"type": "object", "properties": {...}, "required": [...]}`, flat, one
  `PrimitiveSchemaDefinition` per field) and to nothing else: no `$ref`, no `anyOf` for optionals, no
  `pattern`, no exclusive bounds, no generated titles. Every constraint the server enforces is one the
  client is shown; a constraint the schema cannot express is refused instead of being enforced in secret.
  `gt`/`lt` on an integer are shown as the equivalent `minimum`/`maximum`; on a float they are refused.
  A `default` is rendered; a `default_factory` is not, since its value is only decided at validation.
- A model that cannot be rendered exactly fails when the form is defined, not when a user is waiting:
  `UnsupportedField` names the model, the field and what is supported.
- A field whose name, title or description looks like a secret (`looks_secret`, the project's single
  vocabulary), or whose type is a pydantic secret type, is refused with `SecretField`. The spec forbids
  form mode for passwords, API keys, access tokens and payment credentials; they go through URL mode
  (`ask_url`). The field's type counts: a boolean is never a secret, and a number only when it could be
  the secret itself (`pin`, `cvv`, `card_number`, `otp`), not when it counts one (`max_tokens`, "How many
  tokens to mint"). There is no override: a false positive is resolved by renaming the field.
- `FormSpec.validate` takes any JSON value and returns a model instance or raises `InvalidAnswer`, whose
  problems each name their field (or `answer` for the whole) and never quote the answer, so they can be
  logged and shown back as they are.
  Content types follow the spec's `schema.ts`: string, number, boolean or list of strings. A boolean is not
  a number, a string is not a number, `null` is not an answer (an optional field is answered by leaving it
  out), non-finite numbers are refused.

Does not guarantee:

- That the answer is true or that it came from a person: the client may fill the form itself.
- That author validators (`AfterValidator`, `field_validator`, ...) raise only `ValueError` or
  `AssertionError`, or keep the answer out of their messages; they run unchanged, and what else they raise
  propagates from `validate`.
- That `Email` values are deliverable: the check is a documented shape (see `Email`), not RFC 5322.
- That fields marked `sensitive` are hidden from the client: they are ordinary form fields, listed in
  `sensitive_fields` so that audit and logs redact them.

Why not the SDK's renderer: `mcp.server.elicitation.render_elicitation_schema` (mcp 2.3) emits `$ref` for
`Enum` fields and then refuses them, has no titled single- or multi-select, passes `pattern`,
`exclusiveMinimum` and `exclusiveMaximum` through, adds a model title and a generated title per field,
and can only be customised through its private `_ElicitationJsonSchema`. This module reads the model's
fields directly instead, so each keyword it emits is one it chose.

Enum titles: annotate the field with `Titled`, keyed by the wire value, on the field itself rather than on
the item of a list:

    priority: Annotated[Literal["p1", "p2"], Titled({"p1": "Page now", "p2": "Next morning"})]
    regions: Annotated[list[Region], Titled({"eu": "Europe", "us": "United States"}), Field(min_length=1)]

Sensitive, not secret: `Field(json_schema_extra={"sensitive": True})` marks personal data (an address, a
phone number) that a form may ask for but audit and logs must redact.
"""

from __future__ import annotations

import copy
import datetime
import enum
import math
import re
import types
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeAlias, TypeVar, Union, get_args, get_origin

import annotated_types
from pydantic import (
    AfterValidator,
    AnyUrl,
    BaseModel,
    BeforeValidator,
    PlainValidator,
    RootModel,
    Secret,
    SecretBytes,
    SecretStr,
    ValidationError,
    WrapValidator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from mcp_elicit.model.json import JSONValue
from mcp_elicit.model.redaction import ValueKind, looks_secret

__all__ = ["Email", "FormSpec", "InvalidAnswer", "SecretField", "Titled", "UnsupportedField", "form_spec"]

T = TypeVar("T", bound=BaseModel)

_SUPPORTED = (
    "a form field must be str (optionally date, datetime, AnyUrl/HttpUrl or Email), int, float, bool, "
    "a Literal of strings or an Enum of strings (optionally Annotated with Titled), or a list of such choices; "
    "any of them may be made optional with `| None = None`"
)
_CONSTRAINTS = "min_length/max_length on strings and lists, ge/le on numbers, gt/lt on integers"
_Kind: TypeAlias = Literal["string", "integer", "number", "boolean", "choice", "choices"]
_LENGTH_KEYWORDS: dict[_Kind, tuple[str, str]] = {
    "string": ("minLength", "maxLength"),
    "choices": ("minItems", "maxItems"),
}


class UnsupportedField(TypeError):
    """The model asks for something the restricted requestedSchema cannot express exactly."""

    def __init__(self, model: type[BaseModel], field_name: str, why: str) -> None:
        self.model = model
        self.field_name = field_name
        super().__init__(f"{model.__name__}.{field_name}: {why}")


class SecretField(TypeError):
    """The model asks for a secret, which the spec forbids in form mode."""

    def __init__(self, model: type[BaseModel], field_name: str, why: str) -> None:
        self.model = model
        self.field_name = field_name
        super().__init__(
            f"{model.__name__}.{field_name} {why}: the MCP spec forbids requesting secrets (passwords, API keys, "
            "access tokens, payment credentials) in form mode; collect it through URL mode (ask_url), never a form"
        )


class InvalidAnswer(ValueError):
    """An answer that does not fit its form; each problem names its field and none quotes the answer."""

    def __init__(self, model: type[BaseModel], problems: list[str]) -> None:
        self.model = model
        self.problems = problems
        super().__init__(f"invalid answer to {model.__name__}: " + "; ".join(problems))


class Titled:
    """Display titles for the choices of a `Literal`/`Enum` field or of a list of them, keyed by wire value.

    It must title every choice, so that the client never shows a bare wire value beside titled ones.
    `legacy_enum_names=True` renders a single choice in the deprecated `enum` + `enumNames` shape
    (`LegacyTitledEnumSchema`), for clients that predate titled `oneOf` choices.
    """

    __slots__ = ("legacy_enum_names", "titles")

    def __init__(self, titles: Mapping[str, str], *, legacy_enum_names: bool = False) -> None:
        self.titles: Mapping[str, str] = types.MappingProxyType(
            {key.value if isinstance(key, enum.Enum) else key: title for key, title in titles.items()}
        )
        self.legacy_enum_names = legacy_enum_names

    def __repr__(self) -> str:
        legacy = ", legacy_enum_names=True" if self.legacy_enum_names else ""
        return f"Titled({dict(self.titles)!r}{legacy})"


class _EmailFormat:
    __slots__ = ()


_EMAIL_FORMAT = _EmailFormat()
_EMAIL_SHAPE = re.compile(r"[^@\s]{1,64}@[^@\s.]+(?:\.[^@\s.]+)+")


def _check_email(value: str) -> str:
    if len(value) > 254 or _EMAIL_SHAPE.fullmatch(value) is None:
        raise ValueError("must be an email address such as name@example.org")
    return value


Email: TypeAlias = Annotated[str, _EMAIL_FORMAT, AfterValidator(_check_email)]
"""A string rendered with `format: email` and checked for shape only.

The shape: at most 254 characters, one `@`, a local part of 1 to 64 characters without spaces, and a domain
of at least two non-empty dot-separated labels without spaces (`name@example.org`, `ü@bücher.de`). It
says nothing of deliverability, which only sending a message proves. pydantic's `EmailStr` is not used: it
needs `email-validator` and `dnspython` in every install, for a stricter syntax check that still proves
nothing about the mailbox.
"""


@dataclass(frozen=True)
class _Field:
    kind: _Kind
    required: bool
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class FormSpec(Generic[T]):
    """A model checked once for form use: its requestedSchema, its sensitive fields and its answer check."""

    model: type[T]
    sensitive_fields: tuple[str, ...]
    _schema: dict[str, JSONValue] = field(repr=False)
    _fields: Mapping[str, _Field] = field(repr=False)

    @property
    def schema(self) -> dict[str, JSONValue]:
        """The requestedSchema, copied because the spec is cached and shared by every caller."""
        return copy.deepcopy(self._schema)

    def content(self, answer: T) -> dict[str, JSONValue]:
        """An answer in its wire shape: what `validate` accepts back (unanswered optional fields left out)."""
        dumped: dict[str, JSONValue] = answer.model_dump(mode="json", exclude_none=True)
        return dumped

    def validate(self, content: object) -> T:
        """The model instance for a form answer, or `InvalidAnswer` with its problems.

        Unknown, missing and mistyped fields are reported together; constraint problems (lengths, bounds,
        formats, author validators) are found by pydantic once those are fixed, so that pydantic never sees
        a value of a type the spec does not allow and never coerces `"3"` or `true` into a number.
        """
        if not isinstance(content, dict):
            raise InvalidAnswer(self.model, [f"the answer must be an object of field values, not {_type_of(content)}"])
        problems: list[str] = []
        unknown = [key for key in content if key not in self._fields]
        if unknown:
            shown = ", ".join(_shown_key(key) for key in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            problems.append(f"unknown field{'s' if len(unknown) > 1 else ''} {shown}{more}")
        for name, spec in self._fields.items():
            if name in content:
                problem = _problem(spec, content[name])
                if problem is not None:
                    problems.append(f"{name}: {problem}")
            elif spec.required:
                problems.append(f"{name}: required")
        if problems:
            raise InvalidAnswer(self.model, problems)
        try:
            return self.model.model_validate(content)
        except ValidationError as error:
            raise InvalidAnswer(self.model, [_pydantic_problem(e) for e in error.errors(include_url=False)]) from None


_specs: weakref.WeakKeyDictionary[type[BaseModel], FormSpec[Any]] = weakref.WeakKeyDictionary()


def form_spec(model: type[T]) -> FormSpec[T]:
    """The form for `model`, built and checked on first use and cached for the life of the class.

    Raises `SecretField` or `UnsupportedField` when the model cannot be asked as a form.
    """
    cached = _specs.get(model)
    if cached is not None:
        spec: FormSpec[T] = cached
        return spec
    spec = _build(model)
    _specs[model] = spec
    return spec


def _build(model: type[T]) -> FormSpec[T]:
    if issubclass(model, RootModel):
        raise UnsupportedField(model, "root", "a RootModel has no named fields to put in a form; " + _SUPPORTED)
    properties: dict[str, JSONValue] = {}
    fields: dict[str, _Field] = {}
    sensitive: list[str] = []
    for name, info in model.model_fields.items():
        fields[name], properties[name], is_sensitive = _field(model, name, info)
        if is_sensitive:
            sensitive.append(name)
    schema: dict[str, JSONValue] = {"type": "object", "properties": properties}
    required: list[JSONValue] = [name for name, spec in fields.items() if spec.required]
    if required:
        schema["required"] = required
    return FormSpec(model=model, sensitive_fields=tuple(sensitive), _schema=schema, _fields=fields)


def _field(model: type[BaseModel], name: str, info: FieldInfo) -> tuple[_Field, dict[str, JSONValue], bool]:
    annotation, metadata, optional = _unwrap(info.annotation)
    value_kind = _value_kind(annotation)
    for part, text in (("name", name), ("title", info.title), ("description", info.description)):
        if text is not None and looks_secret(text, kind=value_kind):
            raise SecretField(model, name, f"looks like a secret (its {part} {text!r})")
    sensitive = _sensitive_mark(model, name, info)
    for alias in (info.alias, info.validation_alias):
        if alias is not None and alias != name:
            raise UnsupportedField(model, name, "aliases are not supported; the field name is the form's key")

    metadata = [*_expand(info.metadata), *metadata]
    if _is_secret_type(annotation):
        raise SecretField(model, name, f"has the secret type {_type_name(annotation)}")
    if optional and info.is_required():
        raise UnsupportedField(
            model, name, "a form cannot answer null, so an optional field needs a default: write `| None = None`"
        )

    kind, prop, choices = _render_type(model, name, annotation, metadata)
    if info.title is not None:
        prop["title"] = info.title
    if info.description is not None:
        prop["description"] = info.description
    _render_constraints(model, name, kind, metadata, prop)
    spec = _Field(kind=kind, required=info.is_required(), choices=choices)
    if info.default is not PydanticUndefined and info.default is not None:
        default = _json_default(model, name, info.default)
        problem = _problem(spec, default)
        if problem is not None:
            raise UnsupportedField(model, name, f"its default is not a valid answer: it {problem}")
        prop["default"] = default
    return spec, prop, sensitive


def _sensitive_mark(model: type[BaseModel], name: str, info: FieldInfo) -> bool:
    extra = info.json_schema_extra
    if extra is None:
        return False
    if not isinstance(extra, dict):
        raise UnsupportedField(model, name, 'json_schema_extra must be a dict such as {"sensitive": True}')
    unknown = sorted(set(extra) - {"sensitive"})
    if unknown:
        raise UnsupportedField(
            model, name, f"json_schema_extra keys {unknown} are not part of the restricted schema; only 'sensitive'"
        )
    mark = extra.get("sensitive", False)
    if not isinstance(mark, bool):
        raise UnsupportedField(model, name, "json_schema_extra 'sensitive' must be True or False")
    return mark


def _unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    metadata: list[Any] = []
    optional = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *extra = get_args(annotation)
            metadata.extend(_expand(extra))
        elif origin in (Union, types.UnionType) and type(None) in get_args(annotation) and not optional:
            rest = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(rest) != 1:
                return annotation, metadata, optional
            annotation, optional = rest[0], True
        else:
            return annotation, metadata, optional


def _expand(metadata: Any) -> Iterator[Any]:
    for item in metadata:
        if isinstance(item, FieldInfo):
            yield from _expand(item.metadata)
        elif isinstance(item, annotated_types.GroupedMetadata):
            yield from _expand(item)
        else:
            yield item


def _value_kind(annotation: Any) -> ValueKind:
    if annotation is bool:
        return "boolean"
    return "number" if annotation in (int, float) else "text"


def _is_secret_type(annotation: Any) -> bool:
    base = get_origin(annotation) or annotation
    return isinstance(base, type) and issubclass(base, (SecretStr, SecretBytes, Secret))


def _render_type(
    model: type[BaseModel], name: str, annotation: Any, metadata: list[Any]
) -> tuple[_Kind, dict[str, JSONValue], tuple[str, ...]]:
    email = any(isinstance(item, _EmailFormat) for item in metadata)
    if email and annotation is not str:
        raise UnsupportedField(model, name, "Email applies to str only")
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        choices = _choices(item)
        if choices is None:
            raise UnsupportedField(
                model, name, f"a list must be of Literal or Enum choices, not {item!r}; {_SUPPORTED}"
            )
        titles = _titles(model, name, choices, metadata)
        if _legacy(metadata):
            raise UnsupportedField(model, name, "legacy_enum_names applies to a single choice, not to a list")
        items: dict[str, JSONValue] = (
            {"anyOf": [{"const": c, "title": titles[c]} for c in choices]}
            if titles
            else {"type": "string", "enum": list(choices)}
        )
        return "choices", {"type": "array", "items": items}, choices
    choices = _choices(annotation)
    if choices is not None:
        titles = _titles(model, name, choices, metadata)
        if titles and _legacy(metadata):
            legacy: dict[str, JSONValue] = {
                "type": "string",
                "enum": list(choices),
                "enumNames": [titles[c] for c in choices],
            }
            return "choice", legacy, choices
        if titles:
            return "choice", {"type": "string", "oneOf": [{"const": c, "title": titles[c]} for c in choices]}, choices
        return "choice", {"type": "string", "enum": list(choices)}, choices
    scalar = _scalar(annotation, email)
    if scalar is None:
        raise UnsupportedField(model, name, f"{_type_name(annotation)} is not supported; {_SUPPORTED}")
    kind, prop = scalar
    return kind, prop, ()


def _scalar(annotation: Any, email: bool) -> tuple[_Kind, dict[str, JSONValue]] | None:
    if annotation is bool:
        return "boolean", {"type": "boolean"}
    if annotation is int:
        return "integer", {"type": "integer"}
    if annotation is float:
        return "number", {"type": "number"}
    if annotation is str:
        return "string", {"type": "string", "format": "email"} if email else {"type": "string"}
    if annotation is datetime.date:
        return "string", {"type": "string", "format": "date"}
    if annotation is datetime.datetime:
        return "string", {"type": "string", "format": "date-time"}
    if get_origin(annotation) is None and isinstance(annotation, type) and issubclass(annotation, AnyUrl):
        return "string", {"type": "string", "format": "uri"}
    return None


def _choices(annotation: Any) -> tuple[str, ...] | None:
    if get_origin(annotation) is Literal:
        values = get_args(annotation)
        return values if all(type(value) is str for value in values) else None
    if get_origin(annotation) is None and isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = tuple(member.value for member in annotation)
        return values if values and all(type(value) is str for value in values) else None
    return None


def _legacy(metadata: list[Any]) -> bool:
    return any(isinstance(item, Titled) and item.legacy_enum_names for item in metadata)


def _titles(model: type[BaseModel], name: str, choices: tuple[str, ...], metadata: list[Any]) -> Mapping[str, str]:
    marks = [item for item in metadata if isinstance(item, Titled)]
    if not marks:
        return {}
    if len(marks) > 1:
        raise UnsupportedField(model, name, "give Titled once")
    titles = marks[0].titles
    missing = [c for c in choices if c not in titles]
    extra = [key for key in titles if key not in choices]
    if missing or extra:
        raise UnsupportedField(
            model, name, f"Titled must title exactly the choices {list(choices)}: missing {missing}, unknown {extra}"
        )
    if not all(isinstance(title, str) and title for title in titles.values()):
        raise UnsupportedField(model, name, "Titled titles must be non-empty strings")
    return titles


def _render_constraints(
    model: type[BaseModel], name: str, kind: _Kind, metadata: list[Any], prop: dict[str, JSONValue]
) -> None:
    lengths = _LENGTH_KEYWORDS.get(kind)
    numeric = kind in ("integer", "number")
    for item in metadata:
        match item:
            case _EmailFormat() | AfterValidator() | BeforeValidator() | PlainValidator() | WrapValidator():
                continue
            case Titled() if kind in ("choice", "choices"):
                continue
            case Titled():
                raise UnsupportedField(model, name, "Titled applies to Literal or Enum choices and lists of them only")
            case annotated_types.MinLen(min_length=length) if lengths is not None:
                prop[lengths[0]] = length
            case annotated_types.MaxLen(max_length=length) if lengths is not None:
                prop[lengths[1]] = length
            case annotated_types.Ge(ge=bound) if numeric:
                prop["minimum"] = _number(model, name, bound)
            case annotated_types.Le(le=bound) if numeric:
                prop["maximum"] = _number(model, name, bound)
            case annotated_types.Gt(gt=bound) if kind == "integer":
                prop["minimum"] = math.floor(_number(model, name, bound)) + 1
            case annotated_types.Lt(lt=bound) if kind == "integer":
                prop["maximum"] = math.ceil(_number(model, name, bound)) - 1
            case annotated_types.Gt() | annotated_types.Lt() if kind == "number":
                raise UnsupportedField(
                    model,
                    name,
                    "gt/lt on a float cannot be shown to the client, the restricted schema has no exclusive bounds; "
                    "use ge/le",
                )
            case _:
                raise UnsupportedField(
                    model,
                    name,
                    f"the constraint {item!r} cannot be shown to the client in the restricted schema (supported: "
                    f"{_CONSTRAINTS}); check it in the tool or with an AfterValidator instead",
                )


def _number(model: type[BaseModel], name: str, bound: object) -> int | float:
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound):
        raise UnsupportedField(model, name, f"the bound {bound!r} must be a finite int or float")
    return bound


def _json_default(model: type[BaseModel], name: str, value: object) -> JSONValue:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, AnyUrl):
        return str(value)
    if isinstance(value, list | tuple):
        return [_json_default(model, name, item) for item in value]
    raise UnsupportedField(model, name, f"its default {type(value).__name__} has no JSON form")


def _problem(spec: _Field, value: object) -> str | None:
    if spec.kind == "string":
        return None if isinstance(value, str) else f"must be a string, not {_type_of(value)}"
    if spec.kind == "boolean":
        return None if isinstance(value, bool) else f"must be a boolean, not {_type_of(value)}"
    if spec.kind == "integer":
        integral = isinstance(value, int) and not isinstance(value, bool)
        if integral or (isinstance(value, float) and value.is_integer()):
            return None
        return f"must be an integer, not {_type_of(value)}"
    if spec.kind == "number":
        if (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value)
        ):
            return None
        return f"must be a number, not {_type_of(value)}"
    allowed = ", ".join(repr(c) for c in spec.choices)
    if spec.kind == "choice":
        if isinstance(value, str):
            return None if value in spec.choices else f"must be one of {allowed}"
        return f"must be one of {allowed}, not {_type_of(value)}"
    if not isinstance(value, list):
        return f"must be a list of choices among {allowed}, not {_type_of(value)}"
    for index, item in enumerate(value):
        if not isinstance(item, str) or item not in spec.choices:
            return f"item {index} must be one of {allowed}"
    return None


def _type_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number" if math.isfinite(value) else "a non-finite number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _type_name(annotation: Any) -> str:
    return annotation.__name__ if isinstance(annotation, type) else repr(annotation)


def _shown_key(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 66 else text[:63] + "..."


def _pydantic_problem(error: Mapping[str, Any]) -> str:
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    return f"{where or 'answer'}: {error['msg']}"
