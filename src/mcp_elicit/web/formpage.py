"""A form decision answered in the browser: its stored `requested_schema` as an HTML form, and the post read back.

The schema is the spec's restricted one (what `mcp_elicit.server.forms` renders): a flat object whose
properties are strings (optionally `format` email, uri, date or date-time, with min/maxLength), numbers and
integers (with minimum/maximum), booleans, single-select enums (untitled `enum`, titled `oneOf` const/title,
legacy `enum` + `enumNames`) and multi-select arrays (untitled `items.enum`, titled `items.anyOf`, with
min/maxItems). Anything else is refused with `UnsupportedSchema`, never half-rendered.

Guarantees:

- Every schema-supplied text (titles, descriptions, choice titles and values, defaults) and every posted
  value shown back is HTML-escaped; the form carries no JavaScript.
- `read_answer` turns the posted fields into JSON values by the schema (a number field gives a JSON number,
  a boolean `true`/`false`, a multi-select a list) and validates the result against the schema with
  `jsonschema`; formats are checked with the same pydantic types the tool's model uses (`Email`, `AnyUrl`,
  `date`, `datetime`), so an answer this page accepts is one the model's `FormSpec.validate` accepts unless
  the model has checks the schema cannot show (author validators, `HttpUrl` instead of `AnyUrl`).
- Errors are per field, in plain words, and never quote the answer.

Reading conventions (a browser cannot say "unanswered" any other way): an empty text, number, date or
select is unanswered, and an unanswered optional field is left out of the answer (its default, if any,
applies); a boolean is a Yes/No choice, unanswered when neither is picked; a multi-select with nothing
ticked is `[]` when the field is required or has a default, and left out otherwise. A `date-time` field is
a `datetime-local` input read as UTC.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jsonschema import Draft202012Validator, FormatChecker
from pydantic import AnyUrl, TypeAdapter, ValidationError

from mcp_elicit.model import JSONValue
from mcp_elicit.server.forms import Email
from mcp_elicit.web.html import text

__all__ = ["FIELD_PREFIX", "FormField", "UnsupportedSchema", "fields_of", "posted_values", "read_answer", "render"]

FIELD_PREFIX = "f."
"""Posted field names are the schema's property names behind this prefix, so none collides with `csrf` or
`action`."""

Kind = Literal["string", "integer", "number", "boolean", "choice", "choices"]
_FORMATS = ("email", "uri", "date", "date-time")
_INPUT_TYPES = {None: "text", "email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}
_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_LOCAL_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?")
_FORMAT_PROBLEMS = {
    "email": "must be an email address such as name@example.org",
    "uri": "must be a full address such as https://example.org/page",
    "date": "must be a date",
    "date-time": "must be a date and time",
}


class UnsupportedSchema(ValueError):
    """A requested schema this page cannot render exactly; the message names the property."""


@dataclass(frozen=True, slots=True)
class FormField:
    """One property of the requested schema, as the page renders and reads it."""

    name: str
    kind: Kind
    label: str
    description: str | None
    required: bool
    format: str | None = None
    choices: tuple[tuple[str, str], ...] = ()
    """(wire value, title shown) pairs, in schema order."""
    default: JSONValue = None
    """The schema's default; None when it has none (a form answer is never null)."""
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_length: int | None = None
    """minLength of a string, minItems of a multi-select."""
    max_length: int | None = None

    @property
    def input_id(self) -> str:
        return f"field-{self.name}"

    @property
    def input_name(self) -> str:
        return FIELD_PREFIX + self.name


# -- the schema ---------------------------------------------------------------------------------------------


def fields_of(schema: object) -> list[FormField]:
    """The fields of a restricted requested schema, in its order; `UnsupportedSchema` for anything else."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise UnsupportedSchema("the requested schema is not an object schema")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise UnsupportedSchema("the requested schema's properties or required list are malformed")
    return [_field(str(name), prop, name in required) for name, prop in properties.items()]


def _field(name: str, prop: object, required: bool) -> FormField:
    if not isinstance(prop, Mapping):
        raise UnsupportedSchema(f"property {name!r} is not a schema")
    title = prop.get("title")
    description = prop.get("description")
    common: dict[str, Any] = {
        "name": name,
        "label": title if isinstance(title, str) and title else name.replace("_", " ").strip().capitalize() or name,
        "description": description if isinstance(description, str) and description else None,
        "required": required,
        "default": prop.get("default"),
    }
    kind = prop.get("type")
    if kind == "boolean":
        return FormField(kind="boolean", **common)
    if kind in ("integer", "number"):
        return FormField(
            kind=kind,
            minimum=_bound(name, prop.get("minimum")),
            maximum=_bound(name, prop.get("maximum")),
            **common,
        )
    if kind == "string" and ("enum" in prop or "oneOf" in prop):
        return FormField(kind="choice", choices=_single_choices(name, prop), **common)
    if kind == "string":
        format_ = prop.get("format")
        if format_ is not None and format_ not in _FORMATS:
            raise UnsupportedSchema(f"property {name!r} has the unsupported format {format_!r}")
        return FormField(
            kind="string",
            format=format_,
            min_length=_count(name, prop.get("minLength")),
            max_length=_count(name, prop.get("maxLength")),
            **common,
        )
    if kind == "array":
        return FormField(
            kind="choices",
            choices=_multi_choices(name, prop.get("items")),
            min_length=_count(name, prop.get("minItems")),
            max_length=_count(name, prop.get("maxItems")),
            **common,
        )
    raise UnsupportedSchema(f"property {name!r} has the unsupported type {kind!r}")


def _single_choices(name: str, prop: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    if "oneOf" in prop:
        return _titled(name, prop["oneOf"])
    values = _strings(name, prop["enum"])
    titles = prop.get("enumNames")
    if titles is None:
        return tuple((value, value) for value in values)
    shown = _strings(name, titles)
    if len(shown) != len(values):
        raise UnsupportedSchema(f"property {name!r} has enumNames that do not match its enum")
    return tuple(zip(values, shown, strict=True))


def _multi_choices(name: str, items: object) -> tuple[tuple[str, str], ...]:
    if isinstance(items, Mapping) and "anyOf" in items:
        return _titled(name, items["anyOf"])
    if isinstance(items, Mapping) and "enum" in items:
        return tuple((value, value) for value in _strings(name, items["enum"]))
    raise UnsupportedSchema(f"property {name!r} is an array of something other than choices")


def _titled(name: str, options: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(options, list) or not options:
        raise UnsupportedSchema(f"property {name!r} has no choices")
    pairs = []
    for option in options:
        if not isinstance(option, Mapping) or not isinstance(option.get("const"), str):
            raise UnsupportedSchema(f"property {name!r} has a choice without a string const")
        title = option.get("title")
        pairs.append((option["const"], title if isinstance(title, str) and title else option["const"]))
    return tuple(pairs)


def _strings(name: str, values: object) -> list[str]:
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise UnsupportedSchema(f"property {name!r} has choices that are not a list of strings")
    return list(values)


def _bound(name: str, value: object) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UnsupportedSchema(f"property {name!r} has a non-numeric bound")
    return value


def _count(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnsupportedSchema(f"property {name!r} has a length bound that is not a count")
    return value


# -- rendering ---------------------------------------------------------------------------------------------


def render(
    fields: Sequence[FormField],
    *,
    values: Mapping[str, Sequence[str]] | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The fields as HTML: pre-filled with `values` as posted, or with the schema's defaults when None."""
    errors = errors or {}
    parts = []
    for field in fields:
        raw = list(values.get(field.name, ())) if values is not None else _default_raw(field)
        parts.append(_render_field(field, raw, list(errors.get(field.name, ()))))
    return "\n".join(parts)


def _default_raw(field: FormField) -> list[str]:
    default = field.default
    if default is None:
        return []
    if field.kind == "boolean":
        return ["true" if default is True else "false"]
    if field.kind == "choices":
        return [str(item) for item in default] if isinstance(default, list) else []
    if field.format == "date-time" and isinstance(default, str):
        return [_local_datetime(default)]
    return [str(default)]


def _local_datetime(value: str) -> str:
    """A date-time default as a `datetime-local` value, in UTC (the page reads it back as UTC)."""
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="seconds")


def _render_field(field: FormField, raw: list[str], problems: list[str]) -> str:
    ident = text(field.input_id)
    described = [f"{field.input_id}-hint"] if field.description or _constraint_hint(field) else []
    described += [f"{field.input_id}-error"] if problems else []
    aria = f' aria-describedby="{text(" ".join(described))}"' if described else ""
    aria += ' aria-invalid="true"' if problems else ""
    required = ' <span class="req">(required)</span>' if field.required else ""
    hint = _hint_html(field)
    error = f'<p class="field-error" id="{ident}-error">{text("; ".join(problems))}</p>' if problems else ""
    if field.kind in ("boolean", "choices"):
        control = _choice_boxes(field, raw, aria)
        return (
            f'<fieldset class="field"{aria}><legend>{text(field.label)}{required}</legend>\n'
            f"{hint}{control}{error}</fieldset>"
        )
    control = _select(field, raw, aria) if field.kind == "choice" else _input(field, raw[0] if raw else "", aria)
    return (
        f'<div class="field"><label for="{ident}">{text(field.label)}{required}</label>\n{hint}{control}\n{error}</div>'
    )


def _hint_html(field: FormField) -> str:
    lines = [line for line in (field.description, _constraint_hint(field)) if line]
    if not lines:
        return ""
    return f'<p class="hint" id="{text(field.input_id)}-hint">{"<br>".join(text(line) for line in lines)}</p>\n'


def _constraint_hint(field: FormField) -> str | None:
    if field.kind in ("integer", "number"):
        whole = "A whole number" if field.kind == "integer" else "A number"
        low = None if field.minimum is None else _shown(field.minimum)
        high = None if field.maximum is None else _shown(field.maximum)
        if low is None and high is None:
            return f"{whole}." if field.kind == "integer" else None
        return _bounds(low, high, f"{whole} from {{}} to {{}}.", f"{whole}, at least {{}}.", f"{whole}, at most {{}}.")
    if field.kind == "string":
        if field.format == "date-time":
            return "In UTC."
        return _bounds(
            field.min_length,
            field.max_length,
            "{} to {} characters.",
            "At least {} characters.",
            "At most {} characters.",
        )
    if field.kind == "choices":
        return _bounds(
            field.min_length, field.max_length, "Choose {} to {}.", "Choose at least {}.", "Choose at most {}."
        )
    return None


def _bounds(low: object, high: object, both: str, at_least: str, at_most: str) -> str | None:
    """One phrasing of a range, whichever of its ends the schema gives."""
    if low is not None and high is not None:
        return both.format(low, high)
    if low is not None:
        return at_least.format(low)
    if high is not None:
        return at_most.format(high)
    return None


def _shown(number: int | float) -> str:
    return str(int(number)) if isinstance(number, float) and number.is_integer() else str(number)


def _input(field: FormField, value: str, aria: str) -> str:
    attributes = [
        f'id="{text(field.input_id)}"',
        f'name="{text(field.input_name)}"',
        f'type="{"number" if field.kind in ("integer", "number") else _INPUT_TYPES[field.format]}"',
        f'value="{text(value)}"',
    ]
    if field.kind == "integer":
        attributes.append('step="1"')
    elif field.kind == "number":
        attributes.append('step="any"')
    elif field.format == "date-time":
        attributes.append('step="1"')
    if field.minimum is not None:
        attributes.append(f'min="{text(_shown(field.minimum))}"')
    if field.maximum is not None:
        attributes.append(f'max="{text(_shown(field.maximum))}"')
    if field.min_length is not None:
        attributes.append(f'minlength="{field.min_length}"')
    if field.max_length is not None:
        attributes.append(f'maxlength="{field.max_length}"')
    if field.required:
        attributes.append("required")
    if field.format in ("email", "uri") or field.kind != "string":
        attributes.append('autocomplete="off"')
    return f"<input {' '.join(attributes)}{aria}>"


def _select(field: FormField, raw: list[str], aria: str) -> str:
    chosen = raw[0] if raw else ""
    empty = "Choose one" if field.required else "No answer"
    options = [f'<option value="">{text(empty)}</option>']
    for value, title in field.choices:
        selected = " selected" if value == chosen else ""
        options.append(f'<option value="{text(value)}"{selected}>{text(title)}</option>')
    required = " required" if field.required else ""
    name = text(field.input_name)
    return f'<select id="{text(field.input_id)}" name="{name}"{required}{aria}>\n' + "\n".join(options) + "\n</select>"


def _choice_boxes(field: FormField, raw: list[str], aria: str) -> str:
    """Yes/No radios for a boolean, one checkbox per choice for a multi-select."""
    name = text(field.input_name)
    if field.kind == "boolean":
        required = " required" if field.required else ""
        options = [("true", "Yes"), ("false", "No")]
        boxes = [
            f'<label class="check"><input type="radio" name="{name}" value="{value}"'
            f"{' checked' if value in raw else ''}{required}> {title}</label>"
            for value, title in options
        ]
    else:
        boxes = [
            f'<label class="check"><input type="checkbox" name="{name}" value="{text(value)}"'
            f"{' checked' if value in raw else ''}> {text(title)}</label>"
            for value, title in field.choices
        ]
    return "\n".join(boxes) + "\n"


# -- reading the post back -----------------------------------------------------------------------------------


def posted_values(fields: Sequence[FormField], getlist: Any) -> dict[str, list[str]]:
    """The posted strings of each field, from a form's `getlist` (uploads and unknown names ignored)."""
    return {f.name: [v for v in getlist(f.input_name) if isinstance(v, str)] for f in fields}


def read_answer(
    fields: Sequence[FormField], schema: Mapping[str, Any], posted: Mapping[str, Sequence[str]]
) -> tuple[dict[str, JSONValue], dict[str, list[str]]]:
    """The answer as JSON values and the problems per field; the answer is usable only without problems."""
    content: dict[str, JSONValue] = {}
    problems: dict[str, list[str]] = {}
    for field in fields:
        raw = list(posted.get(field.name, ()))
        try:
            value = _converted(field, raw)
        except ValueError as problem:
            problems[field.name] = [str(problem)]
            continue
        if value is not None:
            content[field.name] = value
        elif field.required:
            problems[field.name] = ["required"]
    for error in _VALIDATORS.validator(schema).iter_errors(content):
        path = list(error.absolute_path)
        if not path:
            if error.validator == "required":
                continue  # reported above, before the schema saw the answer
            problems.setdefault("", []).append("the answer does not fit the question")
            continue
        name = str(path[0])
        if name in problems:
            continue
        message = _schema_problem(error.validator, error.validator_value, _by_name(fields, name))
        if message not in problems.setdefault(name, []):
            problems[name].append(message)
    return content, {name: found for name, found in problems.items() if found}


def _by_name(fields: Sequence[FormField], name: str) -> FormField | None:
    return next((f for f in fields if f.name == name), None)


def _converted(field: FormField, raw: list[str]) -> JSONValue:
    """The JSON value of a field's posted strings, None when unanswered; ValueError says why it is unusable."""
    if field.kind == "choices":
        if raw:
            return list(dict.fromkeys(raw))
        return [] if field.required or field.default is not None else None
    value = raw[0] if raw else ""
    if field.kind == "string" and field.format is None:
        return value if value else None
    value = value.strip()
    if not value:
        return None
    if field.kind == "boolean":
        if value not in ("true", "false"):
            raise ValueError("choose Yes or No")
        return value == "true"
    if field.kind == "integer":
        return _integer(value)
    if field.kind == "number":
        return _number(value)
    if field.format == "date-time" and _LOCAL_DATETIME.fullmatch(value):
        return (value if value.count(":") == 2 else value + ":00") + "Z"
    return value


def _integer(value: str) -> int:
    if _INTEGER.fullmatch(value):
        return int(value)
    if _DECIMAL.fullmatch(value):
        number = float(value)
        if math.isfinite(number) and number.is_integer():
            return int(number)
    raise ValueError("must be a whole number")


def _number(value: str) -> int | float:
    if _INTEGER.fullmatch(value):
        return int(value)
    if _DECIMAL.fullmatch(value):
        number = float(value)
        if math.isfinite(number):
            return number
    raise ValueError("must be a number")


def _schema_problem(keyword: str, bound: Any, field: FormField | None) -> str:
    if keyword == "minLength":
        return f"must be at least {bound} characters long"
    if keyword == "maxLength":
        return f"must be at most {bound} characters long"
    if keyword == "minimum":
        return f"must be at least {_shown(bound)}"
    if keyword == "maximum":
        return f"must be at most {_shown(bound)}"
    if keyword == "minItems":
        return f"choose at least {bound}"
    if keyword == "maxItems":
        return f"choose at most {bound}"
    if keyword in ("enum", "oneOf", "anyOf", "const"):
        return "choose one of the listed options"
    if keyword == "format":
        return _FORMAT_PROBLEMS.get(str(bound), "has the wrong format")
    if keyword == "type" and field is not None:
        return {"integer": "must be a whole number", "number": "must be a number"}.get(field.kind, "is not valid")
    return "is not valid"


class _Validators:
    """A jsonschema validator per schema, with format checks done by the pydantic types the models use."""

    def __init__(self) -> None:
        checker = FormatChecker(formats=())
        for name, adapter in (
            ("email", TypeAdapter(Email)),
            ("uri", TypeAdapter(AnyUrl)),
            ("date", TypeAdapter(datetime.date)),
            ("date-time", TypeAdapter(datetime.datetime)),
        ):
            checker.checks(name, raises=ValidationError)(_format_check(adapter))
        self._checker = checker

    def validator(self, schema: Mapping[str, Any]) -> Any:
        return Draft202012Validator(schema, format_checker=self._checker)


def _format_check(adapter: TypeAdapter[Any]) -> Any:
    def check(instance: object) -> bool:
        if isinstance(instance, str):
            adapter.validate_python(instance)
        return True

    return check


_VALIDATORS = _Validators()
