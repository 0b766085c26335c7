"""A form-mode `requestedSchema` as typed fields, and a person's typed answers as checked JSON values.

Pure: no terminal, no I/O. Any client front end (the terminal one, a GUI) can build on it.

Guarantees:

- `parse_form` accepts exactly the restricted schema of MCP 2025-06-18 to 2026-07-28: a flat object whose
  properties are strings (`format` email, uri, date or date-time; minLength/maxLength), numbers and
  integers (minimum/maximum), booleans, single-select enums (untitled `enum`, titled `oneOf` of
  const/title, legacy `enum` + `enumNames`) and multi-select arrays (`items.enum`, `items.anyOf` of
  const/title; minItems/maxItems), each with optional title, description and default. Anything else raises
  `UnsupportedSchema`, naming the property and the reason.
- Refusing is deliberate. A keyword outside the spec (`pattern`, `exclusiveMinimum`, `$ref`, nested
  objects...) is a rule the server may enforce that the person would not be shown; guessing at it would
  send answers the server rejects, or accept ones it should not. Only keywords that constrain nothing are
  tolerated (`$schema`, `$comment`, `examples`, `deprecated`, `readOnly`, `writeOnly`, a top-level title or
  description, a boolean `additionalProperties`, `uniqueItems` on a multi-select), because answers built
  from the listed properties satisfy them by construction. A schema that no answer can satisfy (a required
  property that is not listed, minimum above maximum, more items required than there are choices) is
  refused too: asking would only waste the person's time.
- `read_text` turns what a person typed into the JSON value the schema asks for, or says in plain words
  why it cannot; `Form.problems` then checks a whole answer with `jsonschema` (Draft 2020-12: the
  restricted keywords mean the same in every dialect the spec names). It is the only judge of answers:
  the kit checks every handler's answer with it too, so a form and the kit never disagree. Every problem
  names its field and never quotes the answer, so it can be shown and logged as it is.

Reading conventions: empty text is no answer, and an optional field without an answer is left out; a
required one is reported as required. A date-time must carry its UTC offset (`Z` or `+02:00`): the
terminal does not guess a time zone. A multi-select with nothing ticked answers `[]` when the field is
required or has a default (the person cleared it on purpose), and is left out otherwise.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker

__all__ = [
    "Answer",
    "Choice",
    "Field",
    "FieldKind",
    "Form",
    "UnsupportedSchema",
    "parse_form",
    "read_text",
    "text_of",
]

FieldKind: TypeAlias = Literal["text", "integer", "number", "boolean", "choice", "choices"]
Answer: TypeAlias = str | int | float | bool | list[str]
Format: TypeAlias = Literal["email", "uri", "date", "date-time"]

_FORMATS: Final = ("email", "uri", "date", "date-time")
_ANNOTATIONS: Final = frozenset({"$comment", "examples", "deprecated", "readOnly", "writeOnly"})
_COMMON: Final = frozenset({"type", "title", "description", "default"}) | _ANNOTATIONS
_STRING_KEYS: Final = _COMMON | {"minLength", "maxLength", "format"}
_NUMBER_KEYS: Final = _COMMON | {"minimum", "maximum"}
_SINGLE_KEYS: Final = _COMMON | {"enum", "enumNames", "oneOf"}
_MULTI_KEYS: Final = _COMMON | {"items", "minItems", "maxItems", "uniqueItems"}
_TOP_KEYS: Final = frozenset({"$schema", "type", "properties", "required", "title", "description"}) | _ANNOTATIONS
_INTEGER_TEXT: Final = re.compile(r"[+-]?\d+")
_DECIMAL_TEXT: Final = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_EMAIL: Final = re.compile(r"[^@\s]{1,64}@[^@\s.]+(?:\.[^@\s.]+)+")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME: Final = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)([Zz]|[+-]\d{2}:\d{2})")
_FORMAT_PROBLEMS: Final[Mapping[str, str]] = {
    "email": "must be an email address such as name@example.org",
    "uri": "must be a full address such as https://example.org/page",
    "date": "must be a date written as YYYY-MM-DD, such as 2026-12-01",
    "date-time": "must be a date and time with its UTC offset, such as 2026-12-01T09:30:00Z",
}


class UnsupportedSchema(ValueError):
    """The requested schema is not the spec's restricted form schema, so no faithful form can be built."""


@dataclass(frozen=True, slots=True)
class Choice:
    value: str
    title: str


@dataclass(frozen=True, slots=True)
class Field:
    """One property of the form. `default` is the schema's, already checked to have the field's type."""

    name: str
    kind: FieldKind
    title: str | None
    description: str | None
    required: bool
    default: Answer | None = None
    format: Format | None = None
    choices: tuple[Choice, ...] = ()
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_length: int | None = None
    """minLength of a text, minItems of a multi-select."""
    max_length: int | None = None

    @property
    def label(self) -> str:
        return self.title or self.name

    def title_of(self, value: str) -> str:
        return next((choice.title for choice in self.choices if choice.value == value), value)

    def constraints(self) -> str | None:
        """The rules a person should know before typing, in words (None when there are none worth saying)."""
        if self.kind in ("integer", "number"):
            what = "a whole number" if self.kind == "integer" else "a number"
            return _range(what, self.minimum, self.maximum, "from {} to {}", "at least {}", "at most {}")
        if self.kind == "text":
            shape = {
                "email": "an email address",
                "uri": "a full address (https://...)",
                "date": "a date, YYYY-MM-DD",
                "date-time": "a date and time with UTC offset, YYYY-MM-DDTHH:MM:SSZ",
            }.get(self.format or "")
            size = _range(
                "",
                self.min_length,
                self.max_length,
                "{} to {} characters",
                "at least {} characters",
                "at most {} characters",
            )
            return ", ".join(part for part in (shape, size) if part) or None
        if self.kind == "choices":
            return _range(
                "", self.min_length, self.max_length, "choose {} to {}", "choose at least {}", "choose at most {}"
            )
        return None

    def display(self, value: Answer | None) -> str:
        """An answer as a person reads it back: choice titles, yes/no, or the text itself."""
        if value is None:
            return "(no answer)"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, list):
            return ", ".join(self.title_of(item) for item in value) if value else "(none)"
        if self.kind == "choice" and isinstance(value, str):
            return self.title_of(value)
        return value if isinstance(value, str) else _number_text(value)


@dataclass(frozen=True, slots=True)
class Form:
    """The parsed fields in schema order, with the schema they came from (the one answers are checked against)."""

    fields: tuple[Field, ...]
    schema: Mapping[str, Any]

    def field(self, name: str) -> Field:
        return next(field for field in self.fields if field.name == name)

    def problems(self, content: Mapping[str, Answer]) -> dict[str, list[str]]:
        """What is wrong with a whole answer, per field name (empty when it may be sent).

        The one judge of answers, for the terminal form and for the kit checking any handler's answer: a key
        the form did not ask for, a missing required field, a number that is not finite (JSON has none), and
        everything the schema's keywords say.
        """
        found: dict[str, list[str]] = {}
        names = {field.name for field in self.fields}
        for name in content:
            if name not in names:
                found[str(name)] = ["was not asked for"]
        for field in self.fields:
            value = content.get(field.name)
            if field.required and field.name not in content:
                found[field.name] = ["is required"]
            elif isinstance(value, float) and not math.isfinite(value):
                found[field.name] = ["must be a finite number"]
        for error in _validator(self.schema).iter_errors(dict(content)):
            path = list(error.absolute_path)
            if not path:
                if error.validator not in ("required", "additionalProperties"):
                    found.setdefault("", []).append("the answer does not fit the form")
                continue
            name = str(path[0])
            message = _problem(str(error.validator), error.validator_value, self._kind(name))
            if message not in found.setdefault(name, []):
                found[name].append(message)
        return found

    def field_problems(self, field: Field, value: Answer | None) -> list[str]:
        """What is wrong with one field's answer, judged alone (so a person can fix it before moving on)."""
        if value is None:
            return ["is required"] if field.required else []
        return self.problems({field.name: value}).get(field.name, [])

    def _kind(self, name: str) -> FieldKind | None:
        return next((field.kind for field in self.fields if field.name == name), None)


def parse_form(schema: object) -> Form:
    """The fields of a spec-valid requested schema; `UnsupportedSchema` says why any other is refused."""
    if not isinstance(schema, Mapping):
        raise UnsupportedSchema("the requested schema is not a JSON object")
    _only(schema, _TOP_KEYS | {"additionalProperties"}, "the requested schema")
    if schema.get("type") != "object":
        raise UnsupportedSchema('the requested schema is not of type "object"')
    if not isinstance(schema.get("additionalProperties", False), bool):
        raise UnsupportedSchema("the requested schema constrains additional properties with a schema")
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        raise UnsupportedSchema("the requested schema has no properties object")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise UnsupportedSchema("the requested schema's required list is not a list of property names")
    unknown = [name for name in required if name not in properties]
    if unknown:
        raise UnsupportedSchema(f"property {unknown[0]!r} is required but not described, so it cannot be asked")
    fields = tuple(_field(str(name), prop, name in required) for name, prop in properties.items())
    return Form(fields, schema)


def read_text(field: Field, text: str) -> Answer | None:
    """The JSON value of what was typed into a text, number or integer field; None for no answer.

    Raises ValueError whose message says, without quoting the text, what was expected.
    """
    if field.kind == "text":
        if field.format is None:
            return text or None
        text = text.strip()
        if not text:
            return None
        return _normalised_date_time(text) if field.format == "date-time" else text
    if field.kind not in ("integer", "number"):
        raise TypeError(f"{field.name!r} is a {field.kind} field, answered by choosing, not typing")
    text = text.strip()
    if not text:
        return None
    if _INTEGER_TEXT.fullmatch(text):
        return int(text)
    if _DECIMAL_TEXT.fullmatch(text):
        number = float(text)
        if math.isfinite(number):
            if field.kind == "number":
                return number
            if number.is_integer():
                return int(number)
    raise ValueError("must be a whole number" if field.kind == "integer" else "must be a number")


def text_of(value: Answer | None) -> str:
    """The editable text that shows a text, number or integer value again (a default, or an earlier answer)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | list):
        raise TypeError("booleans and lists are chosen, not typed")
    return _number_text(value)


def _field(name: str, prop: object, required: bool) -> Field:
    if not isinstance(prop, Mapping):
        raise UnsupportedSchema(f"property {name!r} is not described by an object")
    _only(prop, _STRING_KEYS | _NUMBER_KEYS | _SINGLE_KEYS | _MULTI_KEYS, f"property {name!r}")
    title = _optional_text(name, prop, "title")
    description = _optional_text(name, prop, "description")
    kind = prop.get("type")
    if kind is None:
        raise UnsupportedSchema(f"property {name!r} has no type")
    if kind == "string" and ("enum" in prop or "oneOf" in prop):
        _only(prop, _SINGLE_KEYS, f"property {name!r}")
        choices = _single_choices(name, prop)
        default = _default(name, prop, str)
        return Field(name, "choice", title, description, required, default, choices=choices)
    if kind == "string":
        _only(prop, _STRING_KEYS, f"property {name!r}")
        format_ = prop.get("format")
        if format_ is not None and format_ not in _FORMATS:
            raise UnsupportedSchema(f"property {name!r} asks for the format {format_!r}, which forms do not support")
        low, high = _count(name, prop, "minLength"), _count(name, prop, "maxLength")
        _ordered(name, low, high, "minLength", "maxLength")
        default = _default(name, prop, str)
        return Field(name, "text", title, description, required, default, format_, min_length=low, max_length=high)
    if kind in ("number", "integer"):
        _only(prop, _NUMBER_KEYS, f"property {name!r}")
        minimum, maximum = _bound(name, prop, "minimum"), _bound(name, prop, "maximum")
        _ordered(name, minimum, maximum, "minimum", "maximum")
        number_default = _default(name, prop, int | float)
        if number_default is not None and (isinstance(number_default, bool) or not math.isfinite(number_default)):
            raise UnsupportedSchema(f"property {name!r} has a default that is not a number")
        if kind == "integer" and number_default is not None and not float(number_default).is_integer():
            raise UnsupportedSchema(f"property {name!r} has a default that is not a whole number")
        return Field(name, kind, title, description, required, number_default, minimum=minimum, maximum=maximum)
    if kind == "boolean":
        _only(prop, _COMMON, f"property {name!r}")
        return Field(name, "boolean", title, description, required, _default(name, prop, bool))
    if kind == "array":
        _only(prop, _MULTI_KEYS, f"property {name!r}")
        choices = _multi_choices(name, prop.get("items"))
        low, high = _count(name, prop, "minItems"), _count(name, prop, "maxItems")
        _ordered(name, low, high, "minItems", "maxItems")
        if low is not None and low > len(choices):
            raise UnsupportedSchema(f"property {name!r} requires more choices than it offers")
        if not isinstance(prop.get("uniqueItems", True), bool):
            raise UnsupportedSchema(f"property {name!r} has a uniqueItems that is not true or false")
        default = _default(name, prop, list)
        if default is not None and not all(isinstance(item, str) for item in default):
            raise UnsupportedSchema(f"property {name!r} has a default that is not a list of choices")
        return Field(
            name, "choices", title, description, required, default, choices=choices, min_length=low, max_length=high
        )
    raise UnsupportedSchema(f"property {name!r} has the type {kind!r}, which forms do not support")


def _only(schema: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    extra = sorted(str(key) for key in schema if key not in allowed)
    if extra:
        raise UnsupportedSchema(f"{where} uses {', '.join(map(repr, extra))}, which forms do not support")


def _optional_text(name: str, prop: Mapping[str, Any], key: str) -> str | None:
    value = prop.get(key)
    if value is not None and not isinstance(value, str):
        raise UnsupportedSchema(f"property {name!r} has a {key} that is not text")
    return value or None


def _default(name: str, prop: Mapping[str, Any], kind: Any) -> Any:
    value = prop.get("default")
    if value is not None and not isinstance(value, kind):
        raise UnsupportedSchema(f"property {name!r} has a default of the wrong type")
    return value


def _single_choices(name: str, prop: Mapping[str, Any]) -> tuple[Choice, ...]:
    if "oneOf" in prop:
        if "enum" in prop or "enumNames" in prop:
            raise UnsupportedSchema(f"property {name!r} mixes oneOf with enum")
        return _titled(name, prop["oneOf"])
    values = _strings(name, prop["enum"])
    titles = prop.get("enumNames")
    if titles is None:
        return tuple(Choice(value, value) for value in values)
    shown = _strings(name, titles)
    if len(shown) != len(values):
        raise UnsupportedSchema(f"property {name!r} has enumNames that do not match its enum")
    return tuple(Choice(value, title) for value, title in zip(values, shown, strict=True))


def _multi_choices(name: str, items: object) -> tuple[Choice, ...]:
    if isinstance(items, Mapping) and "anyOf" in items and not set(items) - {"anyOf", "type"}:
        if items.get("type", "string") != "string":
            raise UnsupportedSchema(f"property {name!r} offers choices that are not strings")
        return _titled(name, items["anyOf"])
    if isinstance(items, Mapping) and items.get("type") == "string" and set(items) == {"type", "enum"}:
        return tuple(Choice(value, value) for value in _strings(name, items["enum"]))
    raise UnsupportedSchema(f"property {name!r} is a list of something other than choices")


def _titled(name: str, options: object) -> tuple[Choice, ...]:
    if not isinstance(options, list) or not options:
        raise UnsupportedSchema(f"property {name!r} offers no choices")
    choices = []
    for option in options:
        if (
            not isinstance(option, Mapping)
            or not isinstance(option.get("const"), str)
            or set(option)
            - {
                "const",
                "title",
            }
        ):
            raise UnsupportedSchema(f"property {name!r} has a choice that is not a {{const, title}} pair")
        title = option.get("title")
        if title is not None and not isinstance(title, str):
            raise UnsupportedSchema(f"property {name!r} has a choice title that is not text")
        choices.append(Choice(option["const"], title or option["const"]))
    _distinct(name, [choice.value for choice in choices])
    return tuple(choices)


def _strings(name: str, values: object) -> list[str]:
    if not isinstance(values, list) or not values or not all(isinstance(value, str) for value in values):
        raise UnsupportedSchema(f"property {name!r} has choices that are not a non-empty list of strings")
    _distinct(name, values)
    return values


def _distinct(name: str, values: Sequence[str]) -> None:
    if len(set(values)) != len(values):
        raise UnsupportedSchema(f"property {name!r} lists the same choice twice")


def _bound(name: str, prop: Mapping[str, Any], key: str) -> int | float | None:
    value = prop.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UnsupportedSchema(f"property {name!r} has a {key} that is not a number")
    return value


def _count(name: str, prop: Mapping[str, Any], key: str) -> int | None:
    value = prop.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnsupportedSchema(f"property {name!r} has a {key} that is not a count")
    return value


def _ordered(name: str, low: float | None, high: float | None, low_key: str, high_key: str) -> None:
    if low is not None and high is not None and low > high:
        raise UnsupportedSchema(f"property {name!r} has {low_key} above {high_key}, so no answer fits")


def _range(what: str, low: float | None, high: float | None, both: str, at_least: str, at_most: str) -> str | None:
    prefix = f"{what} " if what else ""
    if low is not None and high is not None:
        return prefix + both.format(_number_text(low), _number_text(high))
    if low is not None:
        return prefix + at_least.format(_number_text(low))
    if high is not None:
        return prefix + at_most.format(_number_text(high))
    return what or None


def _number_text(number: float) -> str:
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e16:
        return str(int(number))
    return json.dumps(number)


def _normalised_date_time(text: str) -> str:
    """RFC 3339 with an upper-case `T`; seconds added when left out. Anything else is returned unchanged."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return text
    date, time, offset = match.groups()
    return f"{date}T{time if time.count(':') == 2 else time + ':00'}{offset.upper()}"


def _problem(keyword: str, bound: Any, kind: FieldKind | None) -> str:
    match keyword:
        case "minLength":
            return f"must be at least {bound} characters long"
        case "maxLength":
            return f"must be at most {bound} characters long"
        case "minimum":
            return f"must be at least {_number_text(bound)}"
        case "maximum":
            return f"must be at most {_number_text(bound)}"
        case "minItems":
            return f"choose at least {bound}"
        case "maxItems":
            return f"choose at most {bound}"
        case "enum" | "oneOf" | "anyOf" | "const":
            return "choose one of the listed options"
        case "uniqueItems":
            return "choose each option at most once"
        case "format":
            return _FORMAT_PROBLEMS.get(str(bound), "has the wrong format")
        case "type":
            return {
                "integer": "must be a whole number",
                "number": "must be a number",
                "boolean": "must be yes or no",
                "choices": "must be a list of choices",
            }.get(kind or "", "must be text")
    return "is not valid"


def _is_email(value: object) -> bool:
    return not isinstance(value, str) or (len(value) <= 254 and _EMAIL.fullmatch(value) is not None)


def _is_uri(value: object) -> bool:
    """An absolute URI (RFC 3986: a scheme, then something), without spaces or control characters."""
    if not isinstance(value, str):
        return True
    scheme, colon, rest = value.partition(":")
    if not colon or not rest or _SCHEME.fullmatch(scheme) is None:
        return False
    if any(character.isspace() or ord(character) < 0x20 or ord(character) == 0x7F for character in value):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return not (parts.scheme.lower() in ("http", "https") and not parts.hostname)


def _is_date(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if _DATE.fullmatch(value) is None:
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    match = _DATE_TIME.fullmatch(value)
    if match is None or not _is_date(match.group(1)):
        return False
    try:
        datetime.time.fromisoformat(match.group(2))
        offset = match.group(3).upper()
        if offset != "Z":
            datetime.time.fromisoformat(offset[1:])
    except ValueError:
        return False
    return True


def _formats() -> FormatChecker:
    """Format checks of our own: jsonschema's own are lax (email) or need optional packages (uri, date-time)."""
    checker = FormatChecker(formats=())
    checker.checks("email")(_is_email)
    checker.checks("uri")(_is_uri)
    checker.checks("date")(_is_date)
    checker.checks("date-time")(_is_date_time)
    return checker


_FORMAT_CHECKER: Final = _formats()


def _validator(schema: Mapping[str, Any]) -> Any:
    return Draft202012Validator(schema, format_checker=_FORMAT_CHECKER)
