"""Form definitions: exact restricted schemas, refusals at definition time, and answer validation."""

from __future__ import annotations

import datetime
import enum
import math
import re
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import AnyUrl, BaseModel, Field, HttpUrl, RootModel, SecretStr, model_validator

from mcp_elicit.model.form_schema import UnsupportedSchema
from mcp_elicit.model.json import JSONValue
from mcp_elicit.model.redaction import REDACTED, redact_content
from mcp_elicit.server.forms import (
    Email,
    FormSpec,
    InvalidAnswer,
    SecretField,
    Titled,
    UnsupportedField,
    form_spec,
    schema_form,
)
from tests.helpers.restricted_schema import assert_restricted_schema, spec_variants_of


class Region(enum.StrEnum):
    EU = "eu"
    US = "us"


class Deploy(BaseModel):
    approve: bool = Field(title="Approve the deploy")
    environment: Literal["staging", "production"] = Field(default="staging", description="Where it goes")
    regions: Annotated[
        list[Region], Titled({Region.EU: "Europe", "us": "United States"}), Field(min_length=1, max_length=2)
    ]
    replicas: int = Field(default=2, ge=1, le=10)
    canary_share: float = Field(default=0.1, ge=0, le=1)
    window: datetime.date | None = None
    starts_at: datetime.datetime | None = None
    notify: Email | None = None
    runbook: AnyUrl | None = None
    note: str = Field(default="", max_length=200)
    phone: str | None = Field(default=None, json_schema_extra={"sensitive": True})
    priority: Annotated[Literal["p1", "p2"], Titled({"p1": "Page now", "p2": "Next business day"})] = "p2"
    checks: list[Literal["lint", "smoke"]] = Field(default_factory=list)


DEPLOY_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the deploy"},
        "environment": {
            "type": "string",
            "description": "Where it goes",
            "enum": ["staging", "production"],
            "default": "staging",
        },
        "regions": {
            "type": "array",
            "items": {"anyOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]},
            "minItems": 1,
            "maxItems": 2,
        },
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2},
        "canary_share": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.1},
        "window": {"type": "string", "format": "date"},
        "starts_at": {"type": "string", "format": "date-time"},
        "notify": {"type": "string", "format": "email"},
        "runbook": {"type": "string", "format": "uri"},
        "note": {"type": "string", "maxLength": 200, "default": ""},
        "phone": {"type": "string"},
        "priority": {
            "type": "string",
            "oneOf": [{"const": "p1", "title": "Page now"}, {"const": "p2", "title": "Next business day"}],
            "default": "p2",
        },
        "checks": {"type": "array", "items": {"type": "string", "enum": ["lint", "smoke"]}},
    },
    "required": ["approve", "regions"],
}


def _properties(model: type[BaseModel]) -> dict[str, JSONValue]:
    properties = form_spec(model).schema["properties"]
    assert isinstance(properties, dict)
    return properties


def _only_property(model: type[BaseModel]) -> JSONValue:
    (prop,) = _properties(model).values()
    return prop


# --- rendering --------------------------------------------------------------------------------------------


def test_representative_model_renders_to_the_exact_restricted_schema() -> None:
    spec = form_spec(Deploy)
    assert spec.schema == DEPLOY_SCHEMA
    assert spec.model is Deploy
    assert spec.sensitive_fields == ("phone",)
    assert_restricted_schema(spec.schema)


def test_the_spec_shape_check_itself_refuses_what_the_spec_does_not_define() -> None:
    assert spec_variants_of({"type": "string", "pattern": "^a"}) == []
    assert spec_variants_of({"type": "number", "exclusiveMinimum": 0}) == []
    assert spec_variants_of({"type": "array", "items": {"type": "string"}}) == []
    assert spec_variants_of({"$ref": "#/$defs/Region"}) == []
    assert spec_variants_of({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == []
    assert spec_variants_of({"type": "string", "enum": ["a"]}) == ["UntitledSingleSelectEnumSchema"]


class Text(BaseModel):
    text: str = Field(title="Text", description="Say it", min_length=2, max_length=9)


class Count(BaseModel):
    count: int = Field(ge=0, le=5)


class Share(BaseModel):
    share: float = Field(ge=0.5, le=1.5)


class Flag(BaseModel):
    flag: bool


class Day(BaseModel):
    day: datetime.date


class Moment(BaseModel):
    moment: datetime.datetime


class Link(BaseModel):
    link: AnyUrl


class WebLink(BaseModel):
    link: HttpUrl


class Mail(BaseModel):
    mail: Annotated[Email, Field(max_length=254)]


class BareMail(BaseModel):
    mail: Email


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (Text, {"type": "string", "title": "Text", "description": "Say it", "minLength": 2, "maxLength": 9}),
        (Count, {"type": "integer", "minimum": 0, "maximum": 5}),
        (Share, {"type": "number", "minimum": 0.5, "maximum": 1.5}),
        (Flag, {"type": "boolean"}),
        (Day, {"type": "string", "format": "date"}),
        (Moment, {"type": "string", "format": "date-time"}),
        (Link, {"type": "string", "format": "uri"}),
        (WebLink, {"type": "string", "format": "uri"}),
        (Mail, {"type": "string", "format": "email", "maxLength": 254}),
    ],
)
def test_each_primitive_renders_exactly(model: type[BaseModel], expected: dict[str, JSONValue]) -> None:
    assert _only_property(model) == expected
    assert form_spec(model).schema["required"] == list(model.model_fields)


class IntBounds(BaseModel):
    low: int = Field(gt=0)
    high: int = Field(lt=10)
    both: int = Field(gt=-1, lt=3)


def test_exclusive_bounds_on_integers_become_the_equivalent_inclusive_ones() -> None:
    assert form_spec(IntBounds).schema["properties"] == {
        "low": {"type": "integer", "minimum": 1},
        "high": {"type": "integer", "maximum": 9},
        "both": {"type": "integer", "minimum": 0, "maximum": 2},
    }


class Defaults(BaseModel):
    text: str = "hi"
    count: int = 3
    share: float = 0.25
    flag: bool = False
    day: datetime.date = datetime.date(2026, 7, 28)
    moment: datetime.datetime = datetime.datetime(2026, 7, 28, 9, 30, tzinfo=datetime.UTC)
    link: AnyUrl = AnyUrl("https://example.org/runbook")
    choice: Literal["a", "b"] = "b"
    region: Region = Region.US
    regions: list[Region] = [Region.EU, Region.US]


def test_every_primitive_default_is_rendered_as_its_json_value() -> None:
    assert form_spec(Defaults).schema == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "default": "hi"},
            "count": {"type": "integer", "default": 3},
            "share": {"type": "number", "default": 0.25},
            "flag": {"type": "boolean", "default": False},
            "day": {"type": "string", "format": "date", "default": "2026-07-28"},
            "moment": {"type": "string", "format": "date-time", "default": "2026-07-28T09:30:00+00:00"},
            "link": {"type": "string", "format": "uri", "default": "https://example.org/runbook"},
            "choice": {"type": "string", "enum": ["a", "b"], "default": "b"},
            "region": {"type": "string", "enum": ["eu", "us"], "default": "us"},
            "regions": {"type": "array", "items": {"type": "string", "enum": ["eu", "us"]}, "default": ["eu", "us"]},
        },
    }
    assert_restricted_schema(form_spec(Defaults).schema)


class Optionals(BaseModel):
    plain: int | None = None
    inner: Annotated[int, Field(ge=1)] | None = None
    outer: Annotated[int | None, Field(le=9)] = None
    with_default: str | None = "x"
    from_factory: list[Literal["a"]] = Field(default_factory=list)


def test_optional_fields_are_not_required_and_keep_their_constraints_without_null() -> None:
    schema = form_spec(Optionals).schema
    assert schema == {
        "type": "object",
        "properties": {
            "plain": {"type": "integer"},
            "inner": {"type": "integer", "minimum": 1},
            "outer": {"type": "integer", "maximum": 9},
            "with_default": {"type": "string", "default": "x"},
            "from_factory": {"type": "array", "items": {"type": "string", "enum": ["a"]}},
        },
    }
    assert "required" not in schema


class UntitledChoices(BaseModel):
    literal: Literal["a", "b"]
    member: Region


class TitledChoices(BaseModel):
    literal: Annotated[Literal["a", "b"], Titled({"a": "Alpha", "b": "Beta"})]
    member: Annotated[Region, Titled({Region.EU: "Europe", Region.US: "United States"})]


def test_single_select_untitled_and_titled() -> None:
    assert form_spec(UntitledChoices).schema["properties"] == {
        "literal": {"type": "string", "enum": ["a", "b"]},
        "member": {"type": "string", "enum": ["eu", "us"]},
    }
    assert form_spec(TitledChoices).schema["properties"] == {
        "literal": {"type": "string", "oneOf": [{"const": "a", "title": "Alpha"}, {"const": "b", "title": "Beta"}]},
        "member": {
            "type": "string",
            "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}],
        },
    }


class MultiChoices(BaseModel):
    untitled: list[Literal["x", "y", "z"]] = Field(min_length=1, max_length=2)
    titled: Annotated[list[Region], Titled({"eu": "Europe", "us": "United States"})] = Field(max_length=1)


def test_multi_select_untitled_and_titled_with_item_counts() -> None:
    assert form_spec(MultiChoices).schema["properties"] == {
        "untitled": {
            "type": "array",
            "items": {"type": "string", "enum": ["x", "y", "z"]},
            "minItems": 1,
            "maxItems": 2,
        },
        "titled": {
            "type": "array",
            "items": {"anyOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]},
            "maxItems": 1,
        },
    }


def test_titles_follow_the_choice_order_not_the_mapping_order() -> None:
    class Reversed(BaseModel):
        pick: Annotated[Literal["a", "b"], Titled({"b": "Beta", "a": "Alpha"})]

    assert _only_property(Reversed) == {
        "type": "string",
        "oneOf": [{"const": "a", "title": "Alpha"}, {"const": "b", "title": "Beta"}],
    }


@pytest.mark.parametrize(
    ("asked", "key"),
    [
        (bool, "yes_no"),
        (bool | None, "yes_no"),
        (str, "text"),
        (Annotated[str, Field(max_length=5, title="Name")], "text"),
        (Email, "email"),
        (Email | None, "email"),
        (datetime.date, "date"),
        (datetime.datetime, "date_time"),
        (AnyUrl, "url"),
        (HttpUrl, "url"),
        (int, "number"),
        (Annotated[int, Field(ge=1, le=9)], "number"),
        (float | None, "number"),
        (Literal["s", "m"], "choice"),
        (Annotated[Literal["s", "m"], Titled({"s": "Small", "m": "Medium"}, legacy_enum_names=True)], "choice"),
        ({"eu": "Europe", "us": "United States"}, "choice"),
        (list[Literal["s", "m"]], "choices"),
        (Annotated[list[Literal["s", "m"]], Field(min_length=1)] | None, "choices"),
        (Region, "region"),
        (Region | None, "region"),
        (list[Region], "region"),
        ({Region.EU: "Europe", Region.US: "United States"}, "region"),
        (Deploy, "deploy"),
        (MultiChoices, "multi_choices"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_the_default_key_names_what_is_asked(asked: Any, key: str) -> None:
    spec = form_spec(asked)
    assert spec.key == key
    assert spec.asking("Send the report on 2026-12-24 to ada@example.org?").key == key, "never the message"


def test_the_spec_is_cached_and_its_schema_cannot_be_changed_through_a_copy() -> None:
    assert form_spec(Deploy) is form_spec(Deploy)
    schema = form_spec(Deploy).schema
    schema["properties"] = {}
    assert form_spec(Deploy).schema == DEPLOY_SCHEMA


def test_sensitive_fields_are_listed_for_redaction_and_not_rendered() -> None:
    class Contact(BaseModel):
        name: str
        address: str = Field(json_schema_extra={"sensitive": True})
        phone: str | None = Field(default=None, json_schema_extra={"sensitive": True})
        city: str = Field(json_schema_extra={"sensitive": False})

    spec = form_spec(Contact)
    assert spec.sensitive_fields == ("address", "phone")
    assert "sensitive" not in str(spec.schema)
    answer: dict[str, JSONValue] = {"name": "Ada", "address": "1 Main St", "phone": "+44 20", "city": "London"}
    assert redact_content(answer, spec.sensitive_fields) == {
        "name": "Ada",
        "address": REDACTED,
        "phone": REDACTED,
        "city": "London",
    }


def test_a_model_without_fields_is_a_bare_confirmation() -> None:
    class Confirm(BaseModel):
        pass

    assert form_spec(Confirm).schema == {"type": "object", "properties": {}}
    assert form_spec(Confirm).validate({}) == Confirm()


# --- secrets ----------------------------------------------------------------------------------------------


class PasswordForm(BaseModel):
    password: str


class ApiKeyForm(BaseModel):
    api_key: str


class CardForm(BaseModel):
    card_number: str


class CamelForm(BaseModel):
    accessToken: str


class DescribedForm(BaseModel):
    value: str = Field(description="your access token")


class TitledSecretForm(BaseModel):
    code: str = Field(title="One-time password")


class SensitiveSecretForm(BaseModel):
    pin: str = Field(json_schema_extra={"sensitive": True})


class SecretTypeForm(BaseModel):
    value: SecretStr


@pytest.mark.parametrize(
    ("model", "field", "because"),
    [
        (PasswordForm, "password", "its name 'password'"),
        (ApiKeyForm, "api_key", "its name 'api_key'"),
        (CardForm, "card_number", "its name 'card_number'"),
        (CamelForm, "accessToken", "its name 'accessToken'"),
        (DescribedForm, "value", "its description 'your access token'"),
        (TitledSecretForm, "code", "its title 'One-time password'"),
        (SensitiveSecretForm, "pin", "its name 'pin'"),
        (SecretTypeForm, "value", "the secret type SecretStr"),
    ],
)
def test_secret_fields_are_refused_and_pointed_to_url_mode(model: type[BaseModel], field: str, because: str) -> None:
    with pytest.raises(SecretField) as caught:
        form_spec(model)
    message = str(caught.value)
    assert message.startswith(f"{model.__name__}.{field} ")
    assert because in message
    assert "URL mode (ask_url), never a form" in message
    assert "forbids requesting secrets" in message
    assert isinstance(caught.value, TypeError)
    assert (caught.value.model, caught.value.field_name) == (model, field)


def test_personal_but_not_secret_fields_are_allowed() -> None:
    class Profile(BaseModel):
        email: Email
        username: str
        discard_reason: str = Field(description="why the change was discarded")

    assert list(_properties(Profile)) == ["email", "username", "discard_reason"]


# --- unsupported fields -----------------------------------------------------------------------------------


class Inner(BaseModel):
    x: int


class NestedModel(BaseModel):
    inner: Inner


class DictField(BaseModel):
    tags: dict[str, int]


class StringList(BaseModel):
    tags: list[str]


class MixedUnion(BaseModel):
    value: int | str


class TupleField(BaseModel):
    pair: tuple[int, int]


class BytesField(BaseModel):
    blob: bytes


class DecimalField(BaseModel):
    amount: Decimal


class TimeField(BaseModel):
    at: datetime.time


class IntLiteral(BaseModel):
    level: Literal[1, 2]


class IntEnum(enum.IntEnum):
    ONE = 1


class IntEnumField(BaseModel):
    level: IntEnum


class SetField(BaseModel):
    picks: set[Literal["a"]]


class AnyField(BaseModel):
    blob: Any


class PatternField(BaseModel):
    code: str = Field(pattern="^[A-Z]+$")


class MultipleField(BaseModel):
    count: int = Field(multiple_of=2)


class StrictField(BaseModel):
    count: int = Field(strict=True)


class FloatGt(BaseModel):
    share: float = Field(gt=0)


class FloatLt(BaseModel):
    share: float = Field(lt=1)


class AliasField(BaseModel):
    name: str = Field(alias="fullName")


class NullableRequired(BaseModel):
    count: int | None


class TitledMissing(BaseModel):
    pick: Annotated[Literal["a", "b"], Titled({"a": "Alpha"})]


class TitledUnknown(BaseModel):
    pick: Annotated[Literal["a"], Titled({"a": "Alpha", "z": "Zed"})]


class TitledEmpty(BaseModel):
    pick: Annotated[Literal["a"], Titled({"a": ""})]


class TitledOnText(BaseModel):
    text: Annotated[str, Titled({"a": "Alpha"})]


class TitledOnItem(BaseModel):
    picks: list[Annotated[Literal["a"], Titled({"a": "Alpha"})]]


class ExtraKeys(BaseModel):
    text: str = Field(json_schema_extra={"examples": ["x"]})


class ExtraCallable(BaseModel):
    text: str = Field(json_schema_extra=lambda schema: None)


class ExtraNotBool(BaseModel):
    text: str = Field(json_schema_extra={"sensitive": "yes"})


class BadDefault(BaseModel):
    pick: Literal["a", "b"] = "c"  # type: ignore[assignment]


class LengthOnNumber(BaseModel):
    count: Annotated[int, Field(max_length=3)]


class Root(RootModel[int]):
    pass


class EmptyRange(BaseModel):
    count: int = Field(ge=5, le=1)


class EmptyLength(BaseModel):
    name: str = Field(min_length=5, max_length=2)


class TooManyPicks(BaseModel):
    picks: list[Literal["a", "b"]] = Field(min_length=3)


class TitledTwice(BaseModel):
    priority: Annotated[Literal["p1"], Titled({"p1": "Page now"}), Titled({"p1": "Wake everyone"})] = "p1"


class InfiniteBound(BaseModel):
    share: float = Field(le=math.inf)


class OptionalUnion(BaseModel):
    pick: Literal["a", "b"] | int | None = None


@pytest.mark.parametrize(
    ("model", "field", "fragment"),
    [
        (NestedModel, "inner", "Inner is not supported; a form field must be str"),
        (DictField, "tags", "dict[str, int] is not supported"),
        (StringList, "tags", "a list must be of Literal or Enum choices, not <class 'str'>"),
        (MixedUnion, "value", "int | str is not supported"),
        (TupleField, "pair", "tuple[int, int] is not supported"),
        (BytesField, "blob", "bytes is not supported"),
        (DecimalField, "amount", "Decimal is not supported"),
        (TimeField, "at", "time is not supported"),
        (IntLiteral, "level", "is not supported"),
        (IntEnumField, "level", "IntEnum is not supported"),
        (SetField, "picks", "is not supported"),
        (AnyField, "blob", "is not supported"),
        (PatternField, "code", "pattern='^[A-Z]+$'"),
        (MultipleField, "count", "MultipleOf(multiple_of=2)"),
        (StrictField, "count", "Strict(strict=True)"),
        (FloatGt, "share", "gt/lt on a float cannot be shown to the client"),
        (FloatLt, "share", "use ge/le"),
        (AliasField, "name", "aliases are not supported"),
        (NullableRequired, "count", "write `| None = None`"),
        (TitledMissing, "pick", "missing ['b'], unknown []"),
        (TitledUnknown, "pick", "missing [], unknown ['z']"),
        (TitledEmpty, "pick", "titles must be non-empty strings"),
        (TitledOnText, "text", "Titled applies to Literal or Enum choices"),
        (TitledOnItem, "picks", "a list must be of Literal or Enum choices"),
        (ExtraKeys, "text", "json_schema_extra keys ['examples']"),
        (ExtraCallable, "text", "json_schema_extra must be a dict"),
        (ExtraNotBool, "text", "'sensitive' must be True or False"),
        (BadDefault, "pick", "its default is not a valid answer: it must be one of 'a', 'b'"),
        (LengthOnNumber, "count", "MaxLen(max_length=3)"),
        (Root, "root", "a RootModel has no named fields"),
        (EmptyRange, "count", "property 'count' has minimum above maximum, so no answer fits"),
        (EmptyLength, "name", "minLength above maxLength, so no answer fits"),
        (TooManyPicks, "picks", "requires more choices than it offers"),
        (TitledTwice, "priority", "give Titled once"),
        (InfiniteBound, "share", "the bound inf must be a finite int or float"),
        (OptionalUnion, "pick", "a union cannot be shown as one field"),
    ],
)
def test_unsupported_fields_are_refused_at_definition_time(model: type[BaseModel], field: str, fragment: str) -> None:
    with pytest.raises(UnsupportedField) as caught:
        form_spec(model)
    message = str(caught.value)
    assert message.startswith(f"{model.__name__}.{field}: ")
    assert fragment in message
    assert isinstance(caught.value, TypeError)


def test_a_refused_model_is_refused_again_rather_than_cached() -> None:
    for _ in range(2):
        with pytest.raises(UnsupportedField):
            form_spec(NestedModel)


# --- validation -------------------------------------------------------------------------------------------

GOOD_ANSWER: dict[str, JSONValue] = {
    "approve": True,
    "environment": "production",
    "regions": ["eu", "us"],
    "replicas": 3,
    "canary_share": 0.5,
    "window": "2026-08-01",
    "starts_at": "2026-08-01T09:00:00Z",
    "notify": "oncall@example.org",
    "runbook": "https://example.org/runbook",
    "note": "ship it",
    "phone": "+44 20 7946 0000",
    "priority": "p1",
    "checks": ["smoke"],
}


def test_a_full_good_answer_becomes_the_model() -> None:
    deploy = form_spec(Deploy).validate(GOOD_ANSWER)
    assert deploy.regions == [Region.EU, Region.US]
    assert deploy.window == datetime.date(2026, 8, 1)
    assert deploy.starts_at == datetime.datetime(2026, 8, 1, 9, tzinfo=datetime.UTC)
    assert str(deploy.runbook) == "https://example.org/runbook"
    assert (deploy.replicas, deploy.canary_share, deploy.priority, deploy.checks) == (3, 0.5, "p1", ["smoke"])


def test_a_minimal_answer_gets_the_defaults() -> None:
    deploy = form_spec(Deploy).validate({"approve": False, "regions": ["us"]})
    assert deploy == Deploy(approve=False, regions=[Region.US])
    assert (deploy.environment, deploy.replicas, deploy.notify, deploy.checks) == ("staging", 2, None, [])


def test_integral_floats_are_integers_and_integers_are_numbers() -> None:
    deploy = form_spec(Deploy).validate({"approve": True, "regions": ["eu"], "replicas": 4.0, "canary_share": 1})
    assert (deploy.replicas, deploy.canary_share) == (4, 1.0)
    assert type(deploy.replicas) is int


def _problems(content: object, model: type[BaseModel] = Deploy) -> list[str]:
    with pytest.raises(InvalidAnswer) as caught:
        form_spec(model).validate(content)
    assert isinstance(caught.value, ValueError)
    assert caught.value.model is model
    return caught.value.problems


@pytest.mark.parametrize(
    ("content", "kind"),
    [([], "a list"), ("yes", "a string"), (None, "null"), (3, "an integer"), (True, "a boolean")],
)
def test_an_answer_that_is_not_an_object_is_refused(content: object, kind: str) -> None:
    assert _problems(content) == [f"the answer must be an object of field values, not {kind}"]


def test_missing_required_fields_are_each_named() -> None:
    assert _problems({}) == ["approve: required", "regions: required"]


def test_unknown_fields_are_named_briefly() -> None:
    assert _problems({**GOOD_ANSWER, "extra": 1}) == ["unknown field 'extra'"]
    many = {**GOOD_ANSWER, **{f"k{i}": i for i in range(7)}}
    assert _problems(many) == ["unknown fields 'k0', 'k1', 'k2', 'k3', 'k4' and 2 more"]
    long_key = "x" * 500
    (problem,) = _problems({**GOOD_ANSWER, long_key: 1})
    assert problem == f"unknown field '{'x' * 62}..."


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("approve", "true", "approve: must be a boolean, not a string"),
        ("approve", 1, "approve: must be a boolean, not an integer"),
        ("replicas", True, "replicas: must be an integer, not a boolean"),
        ("replicas", 2.5, "replicas: must be an integer, not a number"),
        ("replicas", "3", "replicas: must be an integer, not a string"),
        ("replicas", math.inf, "replicas: must be an integer, not a non-finite number"),
        ("canary_share", False, "canary_share: must be a number, not a boolean"),
        ("canary_share", "0.5", "canary_share: must be a number, not a string"),
        ("canary_share", math.nan, "canary_share: must be a number, not a non-finite number"),
        ("canary_share", -math.inf, "canary_share: must be a number, not a non-finite number"),
        ("note", 5, "note: must be a string, not an integer"),
        ("note", ["a"], "note: must be a string, not a list"),
        ("note", {"a": 1}, "note: must be a string, not an object"),
        ("window", None, "window: must be a string, not null"),
        ("environment", "moon", "environment: must be one of 'staging', 'production'"),
        ("environment", ["staging"], "environment: must be one of 'staging', 'production', not a list"),
        ("priority", "p3", "priority: must be one of 'p1', 'p2'"),
        ("regions", "eu", "regions: must be a list of choices among 'eu', 'us', not a string"),
        ("regions", ["eu", "mars"], "regions: item 1 must be one of 'eu', 'us'"),
        ("regions", [1], "regions: item 0 must be one of 'eu', 'us'"),
        ("checks", None, "checks: must be a list of choices among 'lint', 'smoke', not null"),
    ],
)
def test_wrong_types_and_choices_are_refused_naming_the_field(field: str, value: object, problem: str) -> None:
    assert _problems({**GOOD_ANSWER, field: value}) == [problem]


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("replicas", 0, "replicas: Input should be greater than or equal to 1"),
        ("replicas", 11, "replicas: Input should be less than or equal to 10"),
        ("canary_share", 1.5, "canary_share: Input should be less than or equal to 1"),
        ("note", "x" * 201, "note: String should have at most 200 characters"),
        ("regions", [], "regions: List should have at least 1 item after validation, not 0"),
        ("regions", ["eu", "us", "eu"], "regions: List should have at most 2 items after validation, not 3"),
        ("window", "2026-13-01", "window: Input should be a valid date or datetime, month value is outside"),
        ("starts_at", "soon", "starts_at: Input should be a valid datetime"),
        ("runbook", "not a url", "runbook: Input should be a valid URL"),
        ("notify", "oncall", "notify: Value error, must be an email address such as name@example.org"),
    ],
)
def test_constraint_violations_are_refused_naming_the_field(field: str, value: object, problem: str) -> None:
    (found,) = _problems({**GOOD_ANSWER, field: value})
    assert found.startswith(problem)


def test_problems_are_reported_together_and_none_quotes_the_answer() -> None:
    answer = {"approve": "s3cr3t-approve", "replicas": "s3cr3t-count", "bogus": "s3cr3t-extra"}
    problems = _problems(answer)
    assert problems == [
        "unknown field 'bogus'",
        "approve: must be a boolean, not a string",
        "regions: required",
        "replicas: must be an integer, not a string",
    ]
    constraint = {**GOOD_ANSWER, "note": "s3cr3t-" * 40, "notify": "s3cr3t-mail", "runbook": "s3cr3t-link"}
    assert len(_problems(constraint)) == 3
    with pytest.raises(InvalidAnswer) as caught:
        form_spec(Deploy).validate(constraint)
    assert "s3cr3t" not in str(caught.value)
    assert caught.value.__suppress_context__
    assert str(caught.value).startswith("invalid answer to Deploy: notify: ")


def test_model_level_validators_report_on_the_answer_as_a_whole() -> None:
    class Window(BaseModel):
        start: int
        end: int

        @model_validator(mode="after")
        def _ordered(self) -> Window:
            if self.end < self.start:
                raise ValueError("end comes before start")
            return self

    assert _problems({"start": 2, "end": 1}, Window) == ["answer: Value error, end comes before start"]


@pytest.mark.parametrize(
    ("address", "valid"),
    [
        ("a@b.co", True),
        ("first.last+tag@sub.example.org", True),
        ("ü@bücher.de", True),
        ("a", False),
        ("a@b", False),
        ("@b.co", False),
        ("a b@c.de", False),
        ("a@b..co", False),
        ("a@@b.co", False),
        ("a@b.co.", False),
        ("x" * 65 + "@b.co", False),
        ("a@" + "b" * 250 + ".co", False),
    ],
)
def test_email_shape(address: str, valid: bool) -> None:
    if valid:
        assert form_spec(BareMail).validate({"mail": address}).mail == address
    else:
        assert _problems({"mail": address}, BareMail) == [
            "mail: Value error, must be an email address such as name@example.org"
        ]


# --- arbitrary input --------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
plausible_values = st.sampled_from(
    ["eu", "us", "p1", "lint", "smoke", "staging", "2026-08-01", "2026-08-01T09:00:00Z", "https://x.org", "a@b.co"]
) | st.lists(st.sampled_from(["eu", "us", "lint", "smoke", "mars"]), max_size=3)
answers = st.dictionaries(
    st.sampled_from(sorted(Deploy.model_fields)) | st.text(max_size=5), json_values | plausible_values, max_size=14
)


@settings(max_examples=400, deadline=None)
@given(content=json_values | answers)
def test_any_json_value_gives_a_model_or_invalid_answer(content: JSONValue) -> None:
    spec: FormSpec[Deploy] = form_spec(Deploy)
    try:
        deploy = spec.validate(content)
    except InvalidAnswer as error:
        assert error.problems
        assert all(isinstance(problem, str) and problem for problem in error.problems)
    else:
        assert isinstance(content, dict)
        assert set(content) <= set(Deploy.model_fields)
        assert {"approve", "regions"} <= set(content)
        assert isinstance(deploy, Deploy)


schema_valid_answers = st.fixed_dictionaries(
    {"approve": st.booleans(), "regions": st.lists(st.sampled_from(["eu", "us"]), min_size=1, max_size=2)},
    optional={
        "environment": st.sampled_from(["staging", "production"]),
        "replicas": st.integers(1, 10),
        "canary_share": st.floats(0, 1),
        "window": st.dates().map(datetime.date.isoformat),
        "note": st.text(max_size=200),
        "phone": st.text(max_size=20),
        "priority": st.sampled_from(["p1", "p2"]),
        "checks": st.lists(st.sampled_from(["lint", "smoke"]), max_size=2),
    },
)


@settings(max_examples=200, deadline=None)
@given(content=schema_valid_answers)
def test_every_answer_the_schema_allows_is_accepted(content: dict[str, JSONValue]) -> None:
    deploy = form_spec(Deploy).validate(content)
    assert deploy.approve is content["approve"]


def test_legacy_titled_single_choice_renders_enum_names() -> None:
    class Legacy(BaseModel):
        pick: Annotated[Literal["a", "b"], Titled({"a": "Option A", "b": "Option B"}, legacy_enum_names=True)]

    spec = form_spec(Legacy)
    assert spec.schema["properties"] == {
        "pick": {"type": "string", "enum": ["a", "b"], "enumNames": ["Option A", "Option B"]}
    }
    assert spec.validate({"pick": "b"}).pick == "b"


def test_legacy_enum_names_refused_on_lists() -> None:
    with pytest.raises(UnsupportedField, match="single choice"):

        class Many(BaseModel):
            picks: Annotated[list[Literal["a", "b"]], Titled({"a": "A", "b": "B"}, legacy_enum_names=True)]

        form_spec(Many)


RELAYED = {
    "type": "object",
    "title": "Seats",
    "properties": {
        "seats": {"type": "integer", "minimum": 1, "maximum": 9, "description": "How many seats"},
        "email": {"type": "string", "format": "email"},
        "pin_code": {"type": "string", "title": "Card PIN"},
    },
    "required": ["seats"],
}


def test_a_relayed_schema_is_asked_as_it_came_and_its_answers_checked_by_every_rule_it_shows() -> None:
    form = schema_form(RELAYED, "q1.abc")
    assert form.schema == RELAYED and form.key == "q1.abc"
    assert form.validate({"seats": 3, "email": "ada@example.org"}) == {"seats": 3, "email": "ada@example.org"}
    with pytest.raises(InvalidAnswer) as too_many:
        form.validate({"seats": 12})
    assert too_many.value.problems == ["seats: must be at most 9"]
    with pytest.raises(InvalidAnswer) as wrong:
        form.validate({"seats": "3", "email": "not an address", "extra": True})
    assert wrong.value.problems == [
        "unknown field 'extra'",
        "seats: must be an integer, not a string",
    ]
    assert form.sensitive_fields == ("pin_code",)  # kept out of audit and logs: the upstream asked it in a form


def test_a_relayed_schema_outside_the_restricted_subset_is_refused_naming_why() -> None:
    with pytest.raises(UnsupportedSchema, match="pattern"):
        schema_form({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[0-9]+$"}}}, "q1.x")
    with pytest.raises(UnsupportedSchema, match=re.escape("property 'address' uses 'properties'")):
        schema_form({"type": "object", "properties": {"address": {"type": "object", "properties": {}}}}, "q1.y")
