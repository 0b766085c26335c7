"""The one reader of a form-mode `requestedSchema`: its fields, and whether an answer fits them.

The web form page, the terminal form, the client kit and the server's answer check all read a form through
this module, so none of them can accept a schema, an answer or a format another one refuses. Pure: no I/O.

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
  refused too: asking would only waste the person's time. A default must have its field's type.
- `Form.problems` judges a whole answer by the parsed fields, which hold every keyword the schema may have,
  so the judgement is the schema's own: a key not asked for, a missing required field, a value of the
  wrong JSON type (a boolean is not a number, a non-finite number is none, null is not an answer), a
  choice not offered, then the rules (lengths, bounds, item counts, `uniqueItems`, formats). Formats are
  RFC 3339 `date` and `date-time` (with its UTC offset), an absolute RFC 3986 URI, and an email shape
  (see `format_problem`). Every problem names its field (or is about the answer as a whole, under `""`) and never
  quotes a value, so it can be shown and logged as it is.
- `read_text` turns what a person typed into the JSON value a text, number or integer field asks for, or
  says in plain words why it cannot; `read_choices` applies the multi-select convention below.

Reading conventions: empty text is no answer, and an optional field without an answer is left out; a
required one is reported as required. A typed date-time is written the RFC 3339 way (`T`, seconds, an
upper-case `Z`); one without its offset is left for the check to refuse, since no time zone is guessed
here. A multi-select with nothing ticked answers `[]` when the field is required or has a default (the
person cleared it on purpose), and is left out otherwise.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit

__all__ = [
    "REQUIRED",
    "Answer",
    "Choice",
    "Field",
    "FieldKind",
    "Form",
    "Format",
    "UnsupportedSchema",
    "format_problem",
    "number_text",
    "parse_field",
    "parse_form",
    "problem_lines",
    "read_choices",
    "read_text",
    "text_of",
    "type_of",
]

FieldKind: TypeAlias = Literal["text", "integer", "number", "boolean", "choice", "choices"]
Answer: TypeAlias = str | int | float | bool | list[str]
Format: TypeAlias = Literal["email", "uri", "date", "date-time"]

REQUIRED: Final = "required"
"""The problem of a required field left unanswered."""

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
_SHOWN_UNKNOWN: Final = 5
_SHOWN_KEY_CHARS: Final = 66


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
    """maxLength of a text, maxItems of a multi-select."""
    unique: bool = False
    """A multi-select's `uniqueItems`: the same choice may not be sent twice."""

    def title_of(self, value: str) -> str:
        return next((choice.title for choice in self.choices if choice.value == value), value)

    def problems(self, value: object, *, rules: bool = True) -> list[str]:
        """What is wrong with `value` as this field's answer; None is no answer, wrong only when required.

        `rules=False` judges the JSON type and the choice only, leaving lengths, bounds and formats out.
        """
        if value is None:
            return [REQUIRED] if self.required else []
        return self._problems(value, rules)

    def _problems(self, value: object, rules: bool) -> list[str]:
        wrong = self._type_problem(value)
        if wrong is not None:
            return [wrong]
        return self._rule_problems(value) if rules else []

    def _type_problem(self, value: object) -> str | None:
        if self.kind == "text":
            return None if isinstance(value, str) else f"must be a string, not {type_of(value)}"
        if self.kind == "boolean":
            return None if isinstance(value, bool) else f"must be a boolean, not {type_of(value)}"
        if self.kind == "integer":
            if (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and value.is_integer()
            ):
                return None
            return f"must be an integer, not {type_of(value)}"
        if self.kind == "number":
            if (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and math.isfinite(value)
            ):
                return None
            return f"must be a number, not {type_of(value)}"
        offered = ", ".join(repr(choice.value) for choice in self.choices)
        values = {choice.value for choice in self.choices}
        if self.kind == "choice":
            if isinstance(value, str):
                return None if value in values else f"must be one of {offered}"
            return f"must be one of {offered}, not {type_of(value)}"
        if not isinstance(value, list):
            return f"must be a list of choices among {offered}, not {type_of(value)}"
        for index, item in enumerate(value):
            if not isinstance(item, str) or item not in values:
                return f"item {index} must be one of {offered}"
        return None

    def _rule_problems(self, value: Any) -> list[str]:
        found = []
        if self.kind == "text":
            if self.min_length is not None and len(value) < self.min_length:
                found.append(f"must be at least {self.min_length} characters long")
            if self.max_length is not None and len(value) > self.max_length:
                found.append(f"must be at most {self.max_length} characters long")
            shape = None if self.format is None else format_problem(self.format, value)
            if shape is not None:
                found.append(shape)
        elif self.kind in ("integer", "number"):
            if self.minimum is not None and value < self.minimum:
                found.append(f"must be at least {number_text(self.minimum)}")
            if self.maximum is not None and value > self.maximum:
                found.append(f"must be at most {number_text(self.maximum)}")
        elif self.kind == "choices":
            if self.min_length is not None and len(value) < self.min_length:
                found.append(f"choose at least {self.min_length}")
            if self.max_length is not None and len(value) > self.max_length:
                found.append(f"choose at most {self.max_length}")
            if self.unique and len(set(value)) != len(value):
                found.append("choose each option at most once")
        return found


@dataclass(frozen=True, slots=True)
class Form:
    """The parsed fields in schema order."""

    fields: tuple[Field, ...]
    _named: Mapping[str, Field] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_named", {field.name: field for field in self.fields})

    def field(self, name: str) -> Field | None:
        return self._named.get(name)

    def problems(self, content: object, *, rules: bool = True) -> dict[str, list[str]]:
        """What is wrong with a whole answer, per field name in schema order (`""`: the answer as a whole).

        Empty when the answer fits. `rules=False` leaves lengths, bounds and formats out (see `Field.problems`).
        """
        if not isinstance(content, Mapping):
            return {"": [f"the answer must be an object of field values, not {type_of(content)}"]}
        found: dict[str, list[str]] = {}
        unknown = [key for key in content if key not in self._named]
        if unknown:
            shown = ", ".join(_shown_key(key) for key in unknown[:_SHOWN_UNKNOWN])
            more = f" and {len(unknown) - _SHOWN_UNKNOWN} more" if len(unknown) > _SHOWN_UNKNOWN else ""
            found[""] = [f"unknown field{'s' if len(unknown) > 1 else ''} {shown}{more}"]
        for field in self.fields:
            if field.name in content:
                problems = field._problems(content[field.name], rules)
            else:
                problems = [REQUIRED] if field.required else []
            if problems:
                found[field.name] = problems
        return found


def problem_lines(problems: Mapping[str, Sequence[str]]) -> list[str]:
    """`Form.problems` as lines, each `name: problem` (a problem of the whole answer as it is)."""
    return [f"{name}: {problem}" if name else problem for name, found in problems.items() for problem in found]


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
    return Form(tuple(parse_field(str(name), prop, name in required) for name, prop in properties.items()))


def parse_field(name: str, prop: object, required: bool) -> Field:
    """One property of a requested schema as a field; `UnsupportedSchema` when it is not a restricted one."""
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
        if format_ is not None and format_ not in _FORMAT_PROBLEMS:
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
        unique = prop.get("uniqueItems", False)
        if not isinstance(unique, bool):
            raise UnsupportedSchema(f"property {name!r} has a uniqueItems that is not true or false")
        default = _default(name, prop, list)
        if default is not None and not all(isinstance(item, str) for item in default):
            raise UnsupportedSchema(f"property {name!r} has a default that is not a list of choices")
        return Field(
            name,
            "choices",
            title,
            description,
            required,
            default,
            choices=choices,
            min_length=low,
            max_length=high,
            unique=unique,
        )
    raise UnsupportedSchema(f"property {name!r} has the type {kind!r}, which forms do not support")


def read_text(field: Field, text: str) -> str | int | float | None:
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


def read_choices(field: Field, picked: Sequence[str]) -> list[str] | None:
    """A multi-select's answer from the choices ticked, in the order given, each once; None for no answer."""
    if picked:
        return list(dict.fromkeys(picked))
    return [] if field.required or field.default is not None else None


def text_of(value: Answer | None) -> str:
    """The editable text that shows a text, number or integer value again (a default, or an earlier answer)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | list):
        raise TypeError("booleans and lists are chosen, not typed")
    return number_text(value)


def number_text(number: float) -> str:
    """A JSON number as people write it: `2` for 2.0, and text that `read_text` reads back to the same number."""
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e16:
        return str(int(number))
    return json.dumps(number)


def type_of(value: object) -> str:
    """A value's JSON type in words (`a string`, `null`, `a non-finite number`), never the value itself."""
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


def format_problem(format_: Format, value: str) -> str | None:
    """What is wrong with `value` as text of the format, in words; None when it fits.

    An email is checked for shape only, not RFC 5322: at most 254 characters, one `@`, a local part of 1 to
    64 characters without spaces, and a domain of at least two non-empty dot-separated labels without spaces.
    """
    return None if _FORMAT_CHECKS[format_](value) else _FORMAT_PROBLEMS[format_]


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
            or set(option) - {"const", "title"}
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


def _shown_key(key: object) -> str:
    text = repr(key)
    return text if len(text) <= _SHOWN_KEY_CHARS else text[: _SHOWN_KEY_CHARS - 3] + "..."


def _normalised_date_time(text: str) -> str:
    """RFC 3339 with an upper-case `T`; seconds added when left out. Anything else is returned unchanged."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return text
    date, time, offset = match.groups()
    return f"{date}T{time if time.count(':') == 2 else time + ':00'}{offset.upper()}"


def _is_email(value: str) -> bool:
    return len(value) <= 254 and _EMAIL.fullmatch(value) is not None


def _is_uri(value: str) -> bool:
    """An absolute URI (RFC 3986: a scheme, then something), without spaces or control characters."""
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


def _is_date(value: str) -> bool:
    if _DATE.fullmatch(value) is None:
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _is_date_time(value: str) -> bool:
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


_FORMAT_CHECKS: Final[Mapping[str, Callable[[str], bool]]] = {
    "email": _is_email,
    "uri": _is_uri,
    "date": _is_date,
    "date-time": _is_date_time,
}
