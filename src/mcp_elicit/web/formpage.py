"""A form decision answered in the browser: its stored `requested_schema` as an HTML form, and the post read back.

The schema is read by `mcp_elicit.model.form_schema.parse_form`, the reader the terminal form, the client
kit and the server's answer check use too: the spec's restricted schema and nothing else, so a schema it
refuses (`UnsupportedSchema`) is never half-rendered. This module only renders the fields and reads the
browser's post.

Guarantees:

- Every schema-supplied text (titles, descriptions, choice titles and values, defaults) and every posted
  value shown back is HTML-escaped; the form carries no JavaScript.
- `read_answer` turns the posted fields into JSON values by the schema (a number field gives a JSON number,
  a boolean `true`/`false`, a multi-select a list) and judges the result with `Form.problems`. The model's
  `FormSpec.validate` enforces the same rules with the tool's pydantic types, so an answer this page
  accepts is one it accepts too unless the model checks more than its schema shows (author validators,
  `HttpUrl` instead of `AnyUrl`, an international domain name pydantic cannot encode).
- Errors are per field, in plain words, and never quote the answer.

Reading conventions (a browser cannot say "unanswered" any other way): an empty text, number, date or
select is unanswered, and an unanswered optional field is left out of the answer (its default, if any,
applies); a boolean is a Yes/No choice, unanswered when neither is picked; a multi-select with nothing
ticked is `[]` when the field is required or has a default, and left out otherwise. A `date-time` field is
a `datetime-local` input read as UTC; a full RFC 3339 date-time typed where the browser has no such input
is taken as it is.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mcp_elicit.model import JSONValue
from mcp_elicit.model.form_schema import Field, Form, number_text, read_choices, read_text, text_of
from mcp_elicit.web.html import text

__all__ = ["FIELD_PREFIX", "posted_values", "read_answer", "render"]

FIELD_PREFIX = "f."
"""Posted field names are the schema's property names behind this prefix, so none collides with `csrf` or
`action`."""

_INPUT_TYPES = {None: "text", "email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}
_LOCAL_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?")


# -- rendering ---------------------------------------------------------------------------------------------


def render(
    form: Form,
    *,
    values: Mapping[str, Sequence[str]] | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The fields as HTML: pre-filled with `values` as posted, or with the schema's defaults when None."""
    errors = errors or {}
    parts = []
    for field in form.fields:
        raw = list(values.get(field.name, ())) if values is not None else _default_raw(field)
        parts.append(_render_field(field, raw, list(errors.get(field.name, ()))))
    return "\n".join(parts)


def _default_raw(field: Field) -> list[str]:
    default = field.default
    if default is None:
        return []
    if field.kind == "boolean":
        return ["true" if default is True else "false"]
    if field.kind == "choices":
        return [str(item) for item in default] if isinstance(default, list) else []
    if field.format == "date-time" and isinstance(default, str):
        return [_local_datetime(default)]
    return [text_of(default)]


def _local_datetime(value: str) -> str:
    """A date-time default as a `datetime-local` value, in UTC (the page reads it back as UTC)."""
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="seconds")


def _render_field(field: Field, raw: list[str], problems: list[str]) -> str:
    ident = text(_input_id(field))
    described = [f"{_input_id(field)}-hint"] if field.description or _constraint_hint(field) else []
    described += [f"{_input_id(field)}-error"] if problems else []
    aria = f' aria-describedby="{text(" ".join(described))}"' if described else ""
    aria += ' aria-invalid="true"' if problems else ""
    required = ' <span class="req">(required)</span>' if field.required else ""
    hint = _hint_html(field)
    error = f'<p class="field-error" id="{ident}-error">{text("; ".join(problems))}</p>' if problems else ""
    if field.kind in ("boolean", "choices"):
        control = _choice_boxes(field, raw, aria)
        return (
            f'<fieldset class="field"{aria}><legend>{text(_label(field))}{required}</legend>\n'
            f"{hint}{control}{error}</fieldset>"
        )
    control = _select(field, raw, aria) if field.kind == "choice" else _input(field, raw[0] if raw else "", aria)
    label = f'<label for="{ident}">{text(_label(field))}{required}</label>'
    return f'<div class="field">{label}\n{hint}{control}\n{error}</div>'


def _hint_html(field: Field) -> str:
    lines = [line for line in (field.description, _constraint_hint(field)) if line]
    if not lines:
        return ""
    return f'<p class="hint" id="{text(_input_id(field))}-hint">{"<br>".join(text(line) for line in lines)}</p>\n'


def _constraint_hint(field: Field) -> str | None:
    if field.kind in ("integer", "number"):
        whole = "A whole number" if field.kind == "integer" else "A number"
        low = None if field.minimum is None else number_text(field.minimum)
        high = None if field.maximum is None else number_text(field.maximum)
        if low is None and high is None:
            return f"{whole}." if field.kind == "integer" else None
        return _bounds(low, high, f"{whole} from {{}} to {{}}.", f"{whole}, at least {{}}.", f"{whole}, at most {{}}.")
    if field.kind == "text":
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


def _input(field: Field, value: str, aria: str) -> str:
    attributes = [
        f'id="{text(_input_id(field))}"',
        f'name="{text(_input_name(field))}"',
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
        attributes.append(f'min="{text(number_text(field.minimum))}"')
    if field.maximum is not None:
        attributes.append(f'max="{text(number_text(field.maximum))}"')
    if field.min_length is not None:
        attributes.append(f'minlength="{field.min_length}"')
    if field.max_length is not None:
        attributes.append(f'maxlength="{field.max_length}"')
    if field.required:
        attributes.append("required")
    if field.format in ("email", "uri") or field.kind != "text":
        attributes.append('autocomplete="off"')
    return f"<input {' '.join(attributes)}{aria}>"


def _select(field: Field, raw: list[str], aria: str) -> str:
    chosen = raw[0] if raw else ""
    empty = "Choose one" if field.required else "No answer"
    options = [f'<option value="">{text(empty)}</option>']
    for choice in field.choices:
        selected = " selected" if choice.value == chosen else ""
        options.append(f'<option value="{text(choice.value)}"{selected}>{text(choice.title)}</option>')
    required = " required" if field.required else ""
    name = text(_input_name(field))
    return (
        f'<select id="{text(_input_id(field))}" name="{name}"{required}{aria}>\n' + "\n".join(options) + "\n</select>"
    )


def _choice_boxes(field: Field, raw: list[str], aria: str) -> str:
    """Yes/No radios for a boolean, one checkbox per choice for a multi-select."""
    name = text(_input_name(field))
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
            f'<label class="check"><input type="checkbox" name="{name}" value="{text(choice.value)}"'
            f"{' checked' if choice.value in raw else ''}> {text(choice.title)}</label>"
            for choice in field.choices
        ]
    return "\n".join(boxes) + "\n"


def _label(field: Field) -> str:
    """The schema's title, else the property name as words (`first_name` as "First name")."""
    return field.title or field.name.replace("_", " ").strip().capitalize() or field.name


def _input_id(field: Field) -> str:
    return f"field-{field.name}"


def _input_name(field: Field) -> str:
    return FIELD_PREFIX + field.name


# -- reading the post back -----------------------------------------------------------------------------------


def posted_values(form: Form, getlist: Any) -> dict[str, list[str]]:
    """The posted strings of each field, from a form's `getlist` (uploads and unknown names ignored)."""
    return {f.name: [v for v in getlist(_input_name(f)) if isinstance(v, str)] for f in form.fields}


def unknown_fields(form: Form, names: Iterable[str]) -> list[str]:
    """The posted field names the page never showed: a post that carries one was not made from the page (a
    forged or replayed answer adding, say, an argument an approval does not let anyone change)."""
    shown = {_input_name(field) for field in form.fields}
    return sorted({name for name in names if name.startswith(FIELD_PREFIX) and name not in shown})


def read_answer(form: Form, posted: Mapping[str, Sequence[str]]) -> tuple[dict[str, JSONValue], dict[str, list[str]]]:
    """The answer as JSON values and the problems per field; the answer is usable only without problems."""
    content: dict[str, JSONValue] = {}
    problems: dict[str, list[str]] = {}
    for field in form.fields:
        try:
            value = _converted(field, list(posted.get(field.name, ())))
        except ValueError as problem:
            problems[field.name] = [str(problem)]
            continue
        if value is not None:
            content[field.name] = value
    for name, found in form.problems(content).items():
        problems.setdefault(name, found)
    return content, problems


def _converted(field: Field, raw: list[str]) -> JSONValue:
    """The JSON value of a field's posted strings, None when unanswered; ValueError says why it is unusable."""
    if field.kind == "choices":
        chosen = read_choices(field, raw)
        return None if chosen is None else [*chosen]
    value = raw[0] if raw else ""
    if field.kind == "boolean":
        value = value.strip()
        if value and value not in ("true", "false"):
            raise ValueError("choose Yes or No")
        return value == "true" if value else None
    if field.kind == "choice":
        return value.strip() or None
    if field.format == "date-time" and _LOCAL_DATETIME.fullmatch(value.strip()):
        value = value.strip() + "Z"
    return read_text(field, value)
