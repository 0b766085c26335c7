"""Form definitions: the one place that turns what a tool asks for into a form question and checks its answer.

What can be asked (`form_spec`): a pydantic model, a dataclass or a `TypedDict` (a form of their fields); one
value (`bool`, `str`, `int`, `float`, `date`, `datetime`, `AnyUrl`, `Email`, a `Literal` or `Enum` of strings,
a list of those choices for a multi-select, each optionally `Annotated` with constraints or made optional with
`| None`), sent as a form of one field `value` titled by the question and answered by the bare value; or a
mapping from choices to their titles, answered by the chosen key. The answer is always of the asked type. What
is asked also names the question when the tool gives no key (`FormSpec.key`): the model's, dataclass's,
`TypedDict`'s or `Enum`'s name, else the kind of value (`yes_no`, `text`, `number`, `choice`, ...).

Guarantees:

- What `form_spec` accepts renders to the restricted `requestedSchema` that MCP 2025-11-25 and
  2026-07-28 define (`{"type": "object", "properties": {...}, "required": [...]}`, flat, one
  `PrimitiveSchemaDefinition` per field) and to nothing else: no `$ref`, no `anyOf` for optionals, no
  `pattern`, no exclusive bounds, no generated titles. Every constraint the server enforces is one the
  client is shown; a constraint the schema cannot express is refused instead of being enforced in secret.
  `gt`/`lt` on an integer are shown as the equivalent `minimum`/`maximum`; on a float they are refused.
  A `default` is rendered; a `default_factory` is not, since its value is only decided at validation.
- What cannot be rendered exactly fails when the form is first built (at registration for a tool's declared
  `asks`, else at the first ask), not when a user is waiting: `UnsupportedField` names the type, the field
  and what is supported. A form is flat: a nested model, dataclass, `TypedDict` or mapping, a union and an
  optional whole form are refused, never flattened or guessed.
- A field whose name, title or description looks like a secret (`looks_secret`, the project's single
  vocabulary), or whose type is a pydantic secret type, is refused with `SecretField`. The spec forbids
  form mode for passwords, API keys, access tokens and payment credentials; they go through URL mode
  (`ask_url`). The field's type counts: a boolean is never a secret, and a number only when it could be
  the secret itself (`pin`, `cvv`, `card_number`, `otp`), not when it counts one (`max_tokens`, "How many
  tokens to mint"). There is no override: a false positive is resolved by renaming the field. A one-value
  ask is titled by its question, so the question of a free text or number answer is checked the same way
  when it is asked (`FormSpec.asking`); a choice among values the server lists is not entered by anyone.
- `FormSpec.validate` takes any JSON value and returns a value of the asked type or raises `InvalidAnswer`, whose
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

import dataclasses
import datetime
import enum
import functools
import json
import math
import re
import types
import typing
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import (
    Annotated,
    Any,
    Generic,
    Literal,
    TypeAlias,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

import annotated_types
import typing_extensions
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
    TypeAdapter,
    ValidationError,
    WrapValidator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from typing_extensions import TypeForm

from mcp_elicit.model.form_schema import (
    Answer,
    Field,
    FieldKind,
    Form,
    Format,
    UnsupportedSchema,
    format_problem,
    parse_field,
    parse_form,
    problem_lines,
    type_of,
)
from mcp_elicit.model.json import JSONValue
from mcp_elicit.model.redaction import ValueKind, looks_secret

__all__ = [
    "Email",
    "FormSpec",
    "InvalidAnswer",
    "SecretField",
    "Titled",
    "UnsupportedField",
    "check_asks",
    "form_spec",
    "schema_form",
]

T = TypeVar("T")
K = TypeVar("K", bound=str | enum.Enum)

VALUE_FIELD = "value"
"""The one field of a one-value ask on the wire (`{"value": ...}`); never its question key (see `_default_key`)."""
_KIND_KEYS: dict[FieldKind, str] = {
    "boolean": "yes_no",
    "integer": "number",
    "number": "number",
    "text": "text",
    "choice": "choice",
    "choices": "choices",
}
_FORMAT_KEYS: dict[Format, str] = {"email": "email", "date": "date", "date-time": "date_time", "uri": "url"}

_SUPPORTED = (
    "a form field must be str (optionally date, datetime, AnyUrl/HttpUrl or Email), int, float, bool, "
    "a Literal of strings or an Enum of strings (optionally Annotated with Titled), or a list of such choices; "
    "any of them may be made optional with `| None = None`"
)
_ASKABLE = (
    "flow.ask takes a pydantic model, a dataclass or a TypedDict (a flat form of their fields), one value "
    "(bool, str, int, float, date, datetime, AnyUrl, Email, a Literal or Enum of strings, or a list of such "
    "choices; optionally Annotated with constraints or `| None`), or a mapping of choices to their titles"
)
_FLAT = (
    "a form is flat, so a field cannot hold a nested model, dataclass, TypedDict or mapping: "
    "put its fields in this form or ask for it separately"
)
_CONSTRAINTS = "min_length/max_length on strings and lists, ge/le on numbers, gt/lt on integers"
_LENGTH_KEYWORDS: dict[FieldKind, tuple[str, str]] = {
    "text": ("minLength", "maxLength"),
    "choices": ("minItems", "maxItems"),
}
_TYPED_DICT_WRAPPERS = {typing.Required, typing.NotRequired, typing_extensions.ReadOnly}


def _where(asked: object, field_name: str | None) -> str:
    return _asked_name(asked) if field_name is None else f"{_asked_name(asked)}.{field_name}"


class UnsupportedField(TypeError):
    """What was asked for cannot be expressed exactly in the restricted requestedSchema.

    `model` is what the tool asked for (a class, a type such as `list[Region]`, or a mapping of choices);
    `field_name` is the field at fault, or None when the asked type as a whole is.
    """

    def __init__(self, model: Any, field_name: str | None, why: str) -> None:
        self.model = model
        self.field_name = field_name
        super().__init__(f"{_where(model, field_name)}: {why}")


class SecretField(TypeError):
    """What was asked for is a secret, which the spec forbids in form mode."""

    def __init__(self, model: Any, field_name: str | None, why: str) -> None:
        self.model = model
        self.field_name = field_name
        super().__init__(
            f"{_where(model, field_name)} {why}: the MCP spec forbids requesting secrets (passwords, API keys, "
            "access tokens, payment credentials) in form mode; collect it through URL mode (ask_url), never a form"
        )


class InvalidAnswer(ValueError):
    """An answer that does not fit its form; each problem names its field and none quotes the answer."""

    def __init__(self, model: Any, problems: list[str]) -> None:
        self.model = model
        self.problems = problems
        super().__init__(f"invalid answer to {_asked_name(model)}: " + "; ".join(problems))


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


def _check_email(value: str) -> str:
    problem = format_problem("email", value)
    if problem is not None:
        raise ValueError(problem)
    return value


Email: TypeAlias = Annotated[str, _EMAIL_FORMAT, AfterValidator(_check_email)]
"""A string rendered with `format: email` and checked for shape only, by the form reader's own check.

The shape (`mcp_elicit.model.form_schema.format_problem`): at most 254 characters, one `@`, a local part of
1 to 64 characters without spaces, and a domain of at least two non-empty dot-separated labels without
spaces (`name@example.org`, `ü@bücher.de`). It says nothing of deliverability, which only sending a
message proves. pydantic's `EmailStr` is not used: it needs `email-validator` and `dnspython` in every
install, for a stricter syntax check that still proves nothing about the mailbox.
"""


@dataclass(frozen=True)
class _OneValue:
    """How a one-value form meets its question: the question titles the field, unless the author did."""

    value_kind: ValueKind
    free_entry: bool
    titled: bool


@dataclass(frozen=True)
class FormSpec(Generic[T]):
    """What a tool asks for, checked once for form use: its requestedSchema, sensitive fields and answer check.

    `model` is what was asked for: a model, dataclass or TypedDict class, a type such as `bool` or
    `list[Region]`, or a mapping of choices. `key` is the question key an ask uses when given none
    (`_default_key`).
    """

    model: Any
    key: str
    sensitive_fields: tuple[str, ...]
    _schema: dict[str, JSONValue] = field(repr=False)
    _form: Form = field(repr=False)
    _read: Callable[[dict[str, Any]], T] = field(repr=False)
    _write: Callable[[T], dict[str, Any]] = field(repr=False)
    _one_value: _OneValue | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """What was asked, as errors and logs name it: `Deploy`, `bool`, `list[Region]`, `choices`."""
        return _asked_name(self.model)

    @property
    def schema(self) -> dict[str, JSONValue]:
        """The requestedSchema, a fresh copy because the spec is cached and shared by every caller."""
        copied: dict[str, JSONValue] = json.loads(self._schema_text)
        return copied

    @functools.cached_property
    def _schema_text(self) -> str:
        # Parsing JSON text back is several times faster than a deep copy of the same nested dicts.
        return json.dumps(self._schema)

    def asking(self, message: str) -> FormSpec[T]:
        """The form as it is put with `message`: a one-value form's field takes the question as its title.

        Raises `SecretField` when a one-value free text or number answer is asked with a question that looks
        like a secret: the question is that field's label.
        """
        one = self._one_value
        if one is None:
            return self
        if one.free_entry and looks_secret(message, kind=one.value_kind):
            raise SecretField(
                self.model, None, f"is asked with a question that looks like a secret ({_shown(message)})"
            )
        if one.titled or not message:
            return self
        schema = self.schema
        cast(dict[str, dict[str, JSONValue]], schema["properties"])[VALUE_FIELD]["title"] = message
        return dataclasses.replace(self, _schema=schema)

    def content(self, answer: T) -> dict[str, JSONValue]:
        """An answer in its wire shape: what `validate` accepts back (unanswered optional fields left out)."""
        written = self._write(answer)
        return {
            name: value for name, value in written.items() if self._form.field(name) is not None and value is not None
        }

    def validate(self, content: object) -> T:
        """The asked type's value for a form answer, or `InvalidAnswer` with its problems.

        Unknown, missing and mistyped fields are reported together, judged by the form reader that the web
        page and the client kit use too; constraint problems (lengths, bounds, formats, author validators)
        are found by pydantic once those are fixed, so that pydantic never sees a value of a type the spec
        does not allow and never coerces `"3"` or `true` into a number. The model enforces every constraint
        its schema shows, since the schema was rendered from it.
        """
        problems = problem_lines(self._form.problems(content, rules=False))
        if problems:
            raise InvalidAnswer(self.model, problems)
        try:
            return self._read(dict(cast(Mapping[str, Any], content)))
        except ValidationError as error:
            prefix: tuple[str, ...] = (VALUE_FIELD,) if self._one_value is not None else ()
            problems = [_pydantic_problem(prefix, e) for e in error.errors(include_url=False)]
            raise InvalidAnswer(self.model, problems) from None


_specs: weakref.WeakKeyDictionary[type, FormSpec[Any]] = weakref.WeakKeyDictionary()


@overload
def form_spec(model: Mapping[K, str]) -> FormSpec[K]: ...
@overload
def form_spec(model: type[T]) -> FormSpec[T]: ...
@overload
def form_spec(model: TypeForm[T]) -> FormSpec[T]: ...


def form_spec(model: Any) -> FormSpec[Any]:
    """The form for what a tool asks for, built and checked on first use and cached for the life of the type.

    Raises `SecretField` or `UnsupportedField` when it cannot be asked as a form.
    """
    if isinstance(model, type):
        cached = _specs.get(model)
        if cached is None:
            cached = _specs[model] = _build(model)
        return cached
    if isinstance(model, Mapping):
        items = tuple(model.items())
        typed = tuple((type(choice), choice, title) for choice, title in items)  # a StrEnum member equals its value
        return _cached(_choices_spec, typed, lambda: _build_choices(model, items))
    return _cached(_one_value_spec, model, lambda: _build_one_value(model))


class _Asked:
    """What a built form asks for, as errors name it ("the approval of deploy")."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


def built_form(
    name: str,
    key: str,
    schema: dict[str, JSONValue],
    read: Callable[[dict[str, Any]], T],
    write: Callable[[T], dict[str, Any]],
) -> FormSpec[T]:
    """A form whose schema its asker built (an approval's, from the call it is about) rather than from a type:
    checked by the one form reader, its answers read and written back by the asker's own functions (`read`
    may raise pydantic's `ValidationError`, whose problems are then the answer's)."""
    return FormSpec(_Asked(name), key, (), schema, parse_form(schema), read, write)


def schema_form(schema: object, key: str) -> FormSpec[dict[str, JSONValue]]:
    """A form for a `requestedSchema` as another server sent it (a relayed question): read by the one form reader,
    so a schema outside the restricted subset raises `UnsupportedSchema` here, and an answer is checked against
    every rule the schema shows (types, choices, lengths, bounds, formats) and kept as it came. Fields whose name,
    title or description looks like a secret are marked sensitive, so audit and logs redact them."""
    form = parse_form(schema)
    fields = cast(dict[str, JSONValue], dict(cast(Mapping[str, Any], schema)))
    name = _Asked("the relayed question")

    def read(content: dict[str, Any]) -> dict[str, JSONValue]:
        problems = problem_lines(form.problems(content))
        if problems:
            raise InvalidAnswer(name, problems)
        return content

    secret = tuple(
        field.name
        for field in form.fields
        if looks_secret(field.name, field.description) or (field.title is not None and looks_secret(field.title))
    )
    return FormSpec(name, key, secret, json.loads(json.dumps(fields)), form, read, dict)


def check_asks(asks: Iterable[object], where: str) -> None:
    """Build the form of every type a body declares it asks for, so that one refused fails `where` it is declared.

    This is how a tool's questions are checked when the tool is registered (`Elicitation.tool(asks=...)`):
    an explicit list, since a question's type is only known for sure once the body asks it.
    """
    for asked in asks:
        try:
            form_spec(cast(Any, asked))
        except (SecretField, UnsupportedField) as refused:
            refused.add_note(f"declared in asks= of {where}")
            raise


def _cached(cache: Callable[[Any], FormSpec[Any]], key: object, build: Callable[[], FormSpec[Any]]) -> FormSpec[Any]:
    try:
        hash(key)
    except TypeError:
        return build()
    return cache(key)


@functools.lru_cache(maxsize=512)
def _one_value_spec(asked: Any) -> FormSpec[Any]:
    return _build_one_value(asked)


@functools.lru_cache(maxsize=512)
def _choices_spec(typed: tuple[tuple[type, Any, Any], ...]) -> FormSpec[Any]:
    items = tuple((choice, title) for _, choice, title in typed)
    return _build_choices(dict(items), items)


def _build(model: type) -> FormSpec[Any]:
    if issubclass(model, BaseModel):
        return _build_model(model)
    if dataclasses.is_dataclass(model):
        return _build_dataclass(model)
    if typing_extensions.is_typeddict(model):
        return _build_typed_dict(model)
    return _build_one_value(model)


def _build_model(model: type[BaseModel]) -> FormSpec[Any]:
    if issubclass(model, RootModel):
        raise UnsupportedField(model, "root", "a RootModel has no named fields to put in a form; " + _SUPPORTED)
    rendered = _Rendered.of(model, model.model_fields)

    def write(answer: BaseModel) -> dict[str, Any]:
        return answer.model_dump(mode="json", exclude_none=True)

    return rendered.spec(model.model_validate, write)


def _build_dataclass(model: type) -> FormSpec[Any]:
    hints = _hints(model)
    for name, hint in hints.items():
        if isinstance(hint, dataclasses.InitVar):
            raise UnsupportedField(
                model, name, "an InitVar is not kept on the dataclass, so the answer could not carry it"
            )
    infos: dict[str, FieldInfo] = {}
    for item in dataclasses.fields(model):
        if not item.init:
            continue
        if item.default is not dataclasses.MISSING:
            infos[item.name] = FieldInfo.from_annotated_attribute(hints[item.name], item.default)
        elif item.default_factory is not dataclasses.MISSING:
            factory = item.default_factory
            infos[item.name] = FieldInfo.from_annotated_attribute(hints[item.name], FieldInfo(default_factory=factory))
        else:
            infos[item.name] = FieldInfo.from_annotation(hints[item.name])
    rendered = _Rendered.of(model, infos)
    adapter: TypeAdapter[Any] = TypeAdapter(model)

    def write(answer: object) -> dict[str, Any]:
        dumped: dict[str, Any] = adapter.dump_python(answer, mode="json", exclude_none=True)
        return dumped

    return rendered.spec(adapter.validate_python, write)


def _build_typed_dict(model: type) -> FormSpec[Any]:
    required_keys: frozenset[str] = getattr(model, "__required_keys__", frozenset())
    keys: dict[str, Any] = {}
    infos: dict[str, FieldInfo] = {}
    for name, hint in _hints(model).items():
        required = name in required_keys  # the class's own view misses NotRequired in postponed annotations
        while get_origin(hint) in _TYPED_DICT_WRAPPERS:
            if get_origin(hint) in (typing.Required, typing.NotRequired):
                required = get_origin(hint) is typing.Required
            (hint,) = get_args(hint)
        keys[name] = typing.Required[hint] if required else typing.NotRequired[hint]
        infos[name] = FieldInfo.from_annotation(hint) if required else FieldInfo.from_annotated_attribute(hint, None)
    rendered = _Rendered.of(model, infos)
    rebuilt = cast(Any, typing_extensions.TypedDict)(model.__name__, keys)  # pydantic reads typing's only from 3.12
    adapter: TypeAdapter[Any] = TypeAdapter(rebuilt)

    def write(answer: Mapping[str, Any]) -> dict[str, Any]:
        dumped: dict[str, Any] = adapter.dump_python(answer, mode="json", exclude_none=True)
        return dumped

    return rendered.spec(adapter.validate_python, write)


def _hints(model: type) -> dict[str, Any]:
    try:
        return get_type_hints(model, include_extras=True)
    except (NameError, TypeError) as error:
        raise UnsupportedField(model, None, f"its field types cannot be resolved ({error})") from None


@dataclass(frozen=True)
class _Rendered:
    """A form's fields checked and rendered, before anything validates answers: refusals name the field."""

    model: type
    schema: dict[str, JSONValue]
    form: Form
    sensitive: tuple[str, ...]

    @classmethod
    def of(cls, model: type, infos: Mapping[str, FieldInfo]) -> _Rendered:
        properties: dict[str, JSONValue] = {}
        fields: list[Field] = []
        sensitive: list[str] = []
        for name, info in infos.items():
            spec, properties[name], is_sensitive = _field(model, name, info)
            fields.append(spec)
            if is_sensitive:
                sensitive.append(name)
        schema: dict[str, JSONValue] = {"type": "object", "properties": properties}
        required: list[JSONValue] = [spec.name for spec in fields if spec.required]
        if required:
            schema["required"] = required
        return cls(model, schema, Form(tuple(fields)), tuple(sensitive))

    def spec(self, read: Callable[[dict[str, Any]], Any], write: Callable[[Any], dict[str, Any]]) -> FormSpec[Any]:
        return FormSpec(self.model, _snake(self.model.__name__), self.sensitive, self.schema, self.form, read, write)


def _build_one_value(asked: Any) -> FormSpec[Any]:
    if isinstance(asked, str):
        raise UnsupportedField(asked, None, f"a string is not a type: pass the type itself; {_ASKABLE}")
    base, _, optional = _unwrap(asked)
    if _is_form_type(base):
        why = "cannot be optional" if optional else "cannot be Annotated"
        raise UnsupportedField(
            asked,
            None,
            f"a model, dataclass or TypedDict is asked as a whole form, which {why}: ask for "
            f"{_asked_name(base)} itself (the person's decline already answers no)",
        )
    info = FieldInfo.from_annotated_attribute(asked, None) if optional else FieldInfo.from_annotation(asked)
    spec, prop, sensitive = _field(asked, VALUE_FIELD, info, one_value=True)
    schema: dict[str, JSONValue] = {"type": "object", "properties": {VALUE_FIELD: prop}}
    if spec.required:
        schema["required"] = [VALUE_FIELD]
    adapter: TypeAdapter[Any] = TypeAdapter(asked)

    def read(content: dict[str, Any]) -> Any:
        return adapter.validate_python(content[VALUE_FIELD]) if VALUE_FIELD in content else None

    def write(answer: Any) -> dict[str, Any]:
        return {} if answer is None else {VALUE_FIELD: adapter.dump_python(answer, mode="json")}

    value_kind = _value_kind(base)
    one = _OneValue(value_kind, free_entry=spec.kind not in ("choice", "choices"), titled=info.title is not None)
    key = _default_key(spec, _choice_item(base))
    return FormSpec(asked, key, (VALUE_FIELD,) if sensitive else (), schema, Form((spec,)), read, write, one)


def _default_key(asked: Field, enum_class: type[enum.Enum] | None = None) -> str:
    """The question key of a one value or a mapping of choices asked without `key=`: named by the type asked.

    `yes_no` (bool), `number` (int, float), `text`, or the format of a text (`email`, `date`, `date_time`,
    `url`), `choice` (a Literal or a mapping of strings), `choices` (a multi-select); an `Enum` of choices, or a
    list or mapping of its members, is named by its class (`region`). The key goes into listings, the audit
    trail, logs and span attributes, which carry names the author chose and never content: a type is both,
    and unlike the message (which may interpolate names, addresses, arguments) it is the same on every run
    of the body, which finds its answer by that key.
    """
    if enum_class is not None:
        return _snake(enum_class.__name__)
    if asked.kind == "text" and asked.format is not None:
        return _FORMAT_KEYS[asked.format]
    return _KIND_KEYS[asked.kind]


def _choice_item(base: Any) -> type[enum.Enum] | None:
    if get_origin(base) is list:
        (base,) = get_args(base) or (None,)
    base, _, _ = _unwrap(base)
    return base if isinstance(base, type) and issubclass(base, enum.Enum) else None


def _build_choices(titles: Mapping[Any, Any], items: tuple[tuple[Any, Any], ...]) -> FormSpec[Any]:
    if not items:
        raise UnsupportedField(titles, None, "give at least one choice")
    keys: dict[str, Any] = {}
    for choice, title in items:
        if isinstance(choice, enum.Enum):
            wire = choice.value
            if type(wire) is not str:
                raise UnsupportedField(titles, None, f"the choice {choice!r} must have a string value")
        elif type(choice) is str:
            wire = choice
        else:
            raise UnsupportedField(
                titles, None, f"a choice must be a string or a member of an Enum of strings, not {type_of(choice)}"
            )
        if not isinstance(title, str) or not title:
            raise UnsupportedField(titles, None, f"the title of {choice!r} must be a non-empty string")
        if wire in keys:
            raise UnsupportedField(titles, None, f"two choices share the value {wire!r}")
        keys[wire] = choice
    kinds = {type(choice) for choice in keys.values()}
    if len(kinds) > 1:
        raise UnsupportedField(titles, None, "the choices must be all strings or all members of one Enum")
    one_of: list[JSONValue] = [{"const": wire, "title": title} for wire, (_, title) in zip(keys, items, strict=True)]
    prop: dict[str, JSONValue] = {"type": "string", "oneOf": one_of}
    schema: dict[str, JSONValue] = {"type": "object", "properties": {VALUE_FIELD: prop}, "required": [VALUE_FIELD]}

    def read(content: dict[str, Any]) -> Any:
        return keys[content[VALUE_FIELD]]

    def write(answer: Any) -> dict[str, Any]:
        return {VALUE_FIELD: answer.value if isinstance(answer, enum.Enum) else answer}

    spec = _parsed(titles, None, VALUE_FIELD, prop, required=True)
    one = _OneValue("text", free_entry=False, titled=False)
    (kind,) = kinds
    key = _default_key(spec, kind if issubclass(kind, enum.Enum) else None)
    return FormSpec(titles, key, (), schema, Form((spec,)), read, write, one)


def _field(
    model: Any, name: str, info: FieldInfo, *, one_value: bool = False
) -> tuple[Field, dict[str, JSONValue], bool]:
    """A field checked and rendered; errors name the field, or for a one-value ask the asked type itself."""
    where = None if one_value else name
    supported = _ASKABLE if one_value else _SUPPORTED
    annotation, metadata, optional = _unwrap(info.annotation)
    value_kind = _value_kind(annotation)
    for part, text in (("name", name), ("title", info.title), ("description", info.description)):
        if text is not None and looks_secret(text, kind=value_kind):
            raise SecretField(model, where, f"looks like a secret (its {part} {text!r})")
    sensitive = _sensitive_mark(model, where, info)
    for alias in (info.alias, info.validation_alias):
        if alias is not None and alias != name:
            raise UnsupportedField(model, where, "aliases are not supported; the field name is the form's key")

    metadata = [*_expand(info.metadata), *metadata]
    if _is_secret_type(annotation):
        raise SecretField(model, where, f"has the secret type {_type_name(annotation)}")
    if optional and info.is_required():
        raise UnsupportedField(
            model,
            where,
            "a form cannot answer null, so an optional field needs a default: write `| None = None` "
            "(in a TypedDict, make the key NotRequired)",
        )

    kind, prop = _render_type(model, where, annotation, metadata, supported)
    if info.title is not None:
        prop["title"] = info.title
    if info.description is not None:
        prop["description"] = info.description
    _render_constraints(model, where, kind, metadata, prop)
    spec = _parsed(model, where, name, prop, required=info.is_required())
    if info.default is not PydanticUndefined and info.default is not None:
        default = _json_default(model, where, info.default)
        problems = spec.problems(default, rules=False)
        if problems:
            raise UnsupportedField(model, where, f"its default is not a valid answer: it {problems[0]}")
        prop["default"] = default
        spec = dataclasses.replace(spec, default=cast(Answer, default))
    return spec, prop, sensitive


def _parsed(model: Any, where: str | None, name: str, prop: dict[str, JSONValue], *, required: bool) -> Field:
    """The rendered property as the form reader reads it, which refuses a form no answer can satisfy."""
    try:
        return parse_field(name, prop, required)
    except UnsupportedSchema as unanswerable:
        raise UnsupportedField(model, where, str(unanswerable)) from None


def _sensitive_mark(model: Any, name: str | None, info: FieldInfo) -> bool:
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
    model: Any, name: str | None, annotation: Any, metadata: list[Any], supported: str = _SUPPORTED
) -> tuple[FieldKind, dict[str, JSONValue]]:
    email = any(isinstance(item, _EmailFormat) for item in metadata)
    if email and annotation is not str:
        raise UnsupportedField(model, name, "Email applies to str only")
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        choices = _choices(item)
        if choices is None:
            raise UnsupportedField(model, name, f"a list must be of Literal or Enum choices, not {item!r}; {supported}")
        titles = _titles(model, name, choices, metadata)
        if _legacy(metadata):
            raise UnsupportedField(model, name, "legacy_enum_names applies to a single choice, not to a list")
        items: dict[str, JSONValue] = (
            {"anyOf": [{"const": c, "title": titles[c]} for c in choices]}
            if titles
            else {"type": "string", "enum": list(choices)}
        )
        return "choices", {"type": "array", "items": items}
    choices = _choices(annotation)
    if choices is not None:
        titles = _titles(model, name, choices, metadata)
        if titles and _legacy(metadata):
            legacy: dict[str, JSONValue] = {
                "type": "string",
                "enum": list(choices),
                "enumNames": [titles[c] for c in choices],
            }
            return "choice", legacy
        if titles:
            return "choice", {"type": "string", "oneOf": [{"const": c, "title": titles[c]} for c in choices]}
        return "choice", {"type": "string", "enum": list(choices)}
    scalar = _scalar(annotation, email)
    if scalar is None:
        raise UnsupportedField(
            model, name, f"{_type_name(annotation)} is not supported; {supported}{_why_not(annotation)}"
        )
    return scalar


def _scalar(annotation: Any, email: bool) -> tuple[FieldKind, dict[str, JSONValue]] | None:
    if annotation is bool:
        return "boolean", {"type": "boolean"}
    if annotation is int:
        return "integer", {"type": "integer"}
    if annotation is float:
        return "number", {"type": "number"}
    if annotation is str:
        return "text", {"type": "string", "format": "email"} if email else {"type": "string"}
    if annotation is datetime.date:
        return "text", {"type": "string", "format": "date"}
    if annotation is datetime.datetime:
        return "text", {"type": "string", "format": "date-time"}
    if get_origin(annotation) is None and isinstance(annotation, type) and issubclass(annotation, AnyUrl):
        return "text", {"type": "string", "format": "uri"}
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


def _titles(model: Any, name: str | None, choices: tuple[str, ...], metadata: list[Any]) -> Mapping[str, str]:
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
    model: Any, name: str | None, kind: FieldKind, metadata: list[Any], prop: dict[str, JSONValue]
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


def _number(model: Any, name: str | None, bound: object) -> int | float:
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound):
        raise UnsupportedField(model, name, f"the bound {bound!r} must be a finite int or float")
    return bound


def _json_default(model: Any, name: str | None, value: object) -> JSONValue:
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


def _type_name(annotation: Any) -> str:
    return annotation.__name__ if isinstance(annotation, type) else _asked_name(annotation)


def _asked_name(asked: object) -> str:
    """How errors name what was asked: `Deploy`, `bool`, `list[Region]`, `Literal['a', 'b']`, `choices`."""
    if isinstance(asked, Mapping):
        return "choices"
    origin = get_origin(asked)
    if origin is Annotated:
        inner, *extra = get_args(asked)
        return f"Annotated[{_asked_name(inner)}, {', '.join(map(repr, _expand(extra)))}]"
    if origin is Literal:
        return f"Literal[{', '.join(map(repr, get_args(asked)))}]"
    if origin in (Union, types.UnionType):
        return " | ".join("None" if arg is type(None) else _asked_name(arg) for arg in get_args(asked))
    if origin is not None and get_args(asked):
        return f"{_asked_name(origin)}[{', '.join(_asked_name(arg) for arg in get_args(asked))}]"
    if isinstance(asked, type):
        return asked.__name__
    return repr(asked).replace("typing.", "")


def _is_form_type(annotation: Any) -> bool:
    if not isinstance(annotation, type) or get_origin(annotation) is not None:
        return False
    return (
        issubclass(annotation, BaseModel)
        or dataclasses.is_dataclass(annotation)
        or typing_extensions.is_typeddict(annotation)
    )


def _why_not(annotation: Any) -> str:
    origin = get_origin(annotation)
    if _is_form_type(annotation) or origin in (dict, Mapping) or annotation is dict:
        return "; " + _FLAT
    if origin in (Union, types.UnionType):
        return "; a union cannot be shown as one field: ask for one type, or a Literal of the choices"
    return ""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:77] + "...")


def _pydantic_problem(prefix: tuple[str, ...], error: Mapping[str, Any]) -> str:
    loc = (*prefix, *error["loc"])
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    return f"{where or 'answer'}: {error['msg']}"
