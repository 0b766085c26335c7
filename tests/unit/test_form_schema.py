"""The one reader of a form-mode requestedSchema: fields, refusals, typed text read, and answers judged."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_elicit.model.form_schema import (
    REQUIRED,
    Choice,
    Field,
    Form,
    UnsupportedSchema,
    number_text,
    parse_form,
    problem_lines,
    read_choices,
    read_text,
    text_of,
)


def one(prop: dict[str, Any], *, required: bool = True) -> tuple[Form, Field]:
    form = parse_form({"type": "object", "properties": {"f": prop}, "required": ["f"] if required else []})
    return form, form.fields[0]


# -- every spec variant parses ---------------------------------------------------------------------------------


def test_every_variant_of_the_restricted_schema() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "description": "Full", "minLength": 1, "maxLength": 9},
            "email": {"type": "string", "format": "email", "default": "a@b.org"},
            "count": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
            "ratio": {"type": "number", "minimum": 0.5},
            "ok": {"type": "boolean", "default": False},
            "env": {"type": "string", "enum": ["a", "b"]},
            "prio": {"type": "string", "oneOf": [{"const": "p1", "title": "Now"}, {"const": "p2", "title": "Later"}]},
            "size": {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"], "default": "l"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "minItems": 1, "maxItems": 2},
            "regions": {
                "type": "array",
                "items": {"anyOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "US"}]},
                "default": ["eu"],
            },
        },
        "required": ["name", "env"],
    }
    fields = {field.name: field for field in parse_form(schema).fields}
    assert list(fields) == list(schema["properties"])
    assert fields["name"] == Field("name", "text", "Name", "Full", True, min_length=1, max_length=9)
    assert fields["email"].format == "email"
    assert fields["email"].default == "a@b.org"
    assert (fields["count"].kind, fields["count"].minimum, fields["count"].maximum) == ("integer", 1, 5)
    assert (fields["ratio"].kind, fields["ratio"].minimum) == ("number", 0.5)
    assert (fields["ok"].kind, fields["ok"].default) == ("boolean", False)
    assert fields["env"].choices == (Choice("a", "a"), Choice("b", "b"))
    assert fields["prio"].choices == (Choice("p1", "Now"), Choice("p2", "Later"))
    assert fields["size"].choices == (Choice("s", "Small"), Choice("l", "Large"))
    assert (fields["tags"].kind, fields["tags"].min_length, fields["tags"].max_length) == ("choices", 1, 2)
    assert fields["regions"].choices == (Choice("eu", "Europe"), Choice("us", "US"))
    assert fields["regions"].default == ["eu"]
    assert [field.required for field in fields.values()].count(True) == 2


def test_annotations_that_constrain_nothing_are_tolerated() -> None:
    form = parse_form(
        {
            "type": "object",
            "title": "Deploy",
            "description": "Asked by the deploy tool",
            "additionalProperties": False,
            "$comment": "generated",
            "properties": {
                "a": {"type": "string", "examples": ["x"], "$comment": "c", "deprecated": False},
                "b": {"type": "array", "items": {"type": "string", "enum": ["x"]}, "uniqueItems": True},
                "c": {"type": "array", "items": {"type": "string", "anyOf": [{"const": "x", "title": "X"}]}},
            },
        }
    )
    assert [field.kind for field in form.fields] == ["text", "choices", "choices"]


def test_a_form_may_ask_nothing() -> None:
    assert parse_form({"type": "object", "properties": {}}).fields == ()


def test_a_titled_choice_without_title_shows_its_value() -> None:
    _, field = one({"type": "string", "oneOf": [{"const": "p1"}]})
    assert field.choices == (Choice("p1", "p1"),)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ([], "not a JSON object"),
        ({"type": "array", "properties": {}}, 'not of type "object"'),
        ({"type": "object"}, "no properties"),
        ({"type": "object", "properties": {}, "required": "a"}, "required list"),
        ({"type": "object", "properties": {}, "required": ["a"]}, "'a' is required but not described"),
        ({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}, "additional properties"),
        ({"type": "object", "properties": {}, "allOf": []}, "'allOf'"),
        ({"type": "object", "properties": {"a": "string"}}, "'a' is not described by an object"),
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x$"}}}, "'pattern'"),
        ({"type": "object", "properties": {"a": {"type": "integer", "exclusiveMinimum": 0}}}, "'exclusiveMinimum'"),
        ({"type": "object", "properties": {"a": {"type": "number", "multipleOf": 2}}}, "'multipleOf'"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}, "'$ref'"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "the type 'object'"),
        ({"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}, "uses 'properties'"),
        ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}, "the type ['string', 'null']"),
        ({"type": "object", "properties": {"a": {"type": "null"}}}, "the type 'null'"),
        ({"type": "object", "properties": {"a": {"enum": ["x"]}}}, "'a' has no type"),
        ({"type": "object", "properties": {"a": {"type": "string", "minimum": 1}}}, "'a' uses 'minimum'"),
        ({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4"}}}, "format 'ipv4'"),
        ({"type": "object", "properties": {"a": {"type": "string", "format": "hostname"}}}, "format 'hostname'"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}}},
            "minLength above",
        ),
        ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 2}}}, "minimum above"),
        ({"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}}, "not a count"),
        ({"type": "object", "properties": {"a": {"type": "string", "maxLength": 2.5}}}, "not a count"),
        ({"type": "object", "properties": {"a": {"type": "integer", "maximum": "9"}}}, "not a number"),
        ({"type": "object", "properties": {"a": {"type": "integer", "maximum": True}}}, "not a number"),
        ({"type": "object", "properties": {"a": {"type": "string", "default": 3}}}, "wrong type"),
        ({"type": "object", "properties": {"a": {"type": "integer", "default": 2.5}}}, "not a whole number"),
        ({"type": "object", "properties": {"a": {"type": "number", "default": True}}}, "not a number"),
        ({"type": "object", "properties": {"a": {"type": "boolean", "default": "yes"}}}, "wrong type"),
        ({"type": "object", "properties": {"a": {"type": "string", "title": 3}}}, "title that is not text"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, "non-empty list"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": [1, 2]}}}, "non-empty list of strings"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "x"]}}}, "same choice twice"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y"], "enumNames": ["X"]}}},
            "enumNames that do not match",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "enum": ["x"], "oneOf": [{"const": "x"}]}}},
            "mixes oneOf with enum",
        ),
        ({"type": "object", "properties": {"a": {"type": "string", "oneOf": []}}}, "offers no choices"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "oneOf": [{"const": 1, "title": "One"}]}}},
            "not a {const, title} pair",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "oneOf": [{"const": "x", "pattern": "y"}]}}},
            "not a {const, title} pair",
        ),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "number"}}}}, "something other"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "something other than choices"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}, "something other"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "array", "items": {"type": "string", "enum": ["x"]}, "uniqueItems": 1}},
            },
            "uniqueItems that is not true or false",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "array", "items": {"type": "string", "enum": ["x"]}, "minItems": 2}},
            },
            "requires more choices than it offers",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "array", "items": {"type": "string", "enum": ["x"]}, "default": [1]}},
            },
            "not a list of choices",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "array", "items": {"anyOf": [{"const": "x"}], "type": "x"}}},
            },
            "not strings",
        ),
    ],
)
def test_anything_outside_the_restricted_schema_is_refused(schema: Any, reason: str) -> None:
    with pytest.raises(UnsupportedSchema) as refused:
        parse_form(schema)
    assert reason in str(refused.value)


# -- typed text to JSON values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "typed", "value"),
    [
        ("integer", "3", 3),
        ("integer", " +3 ", 3),
        ("integer", "-12", -12),
        ("integer", "3.0", 3),
        ("integer", "1e3", 1000),
        ("number", "3", 3),
        ("number", "2.5", 2.5),
        ("number", "-.5", -0.5),
        ("number", "1e-3", 0.001),
        ("integer", "", None),
        ("number", "   ", None),
    ],
)
def test_numbers_are_read_as_json_numbers(kind: str, typed: str, value: int | float | None) -> None:
    _, field = one({"type": kind})
    read = read_text(field, typed)
    assert read == value
    assert type(read) is type(value)


@pytest.mark.parametrize(
    ("kind", "typed", "problem"),
    [
        ("integer", "3.5", "must be a whole number"),
        ("integer", "three", "must be a whole number"),
        ("integer", "0x10", "must be a whole number"),
        ("integer", "1_000", "must be a whole number"),
        ("number", "nan", "must be a number"),
        ("number", "inf", "must be a number"),
        ("number", "1e999", "must be a number"),
        ("number", "1,5", "must be a number"),
    ],
)
def test_text_that_is_no_number_says_what_was_expected(kind: str, typed: str, problem: str) -> None:
    _, field = one({"type": kind})
    with pytest.raises(ValueError, match=problem):
        read_text(field, typed)


def test_plain_text_is_kept_as_typed_and_empty_text_is_no_answer() -> None:
    _, field = one({"type": "string"})
    assert read_text(field, "  two  spaces ") == "  two  spaces "
    assert read_text(field, "") is None


@pytest.mark.parametrize(
    ("typed", "value"),
    [
        ("2026-12-01T09:30:00Z", "2026-12-01T09:30:00Z"),
        ("2026-12-01 09:30Z", "2026-12-01T09:30:00Z"),
        ("2026-12-01t09:30:15.5+02:00", "2026-12-01T09:30:15.5+02:00"),
        ("2026-12-01T09:30:00z", "2026-12-01T09:30:00Z"),
        (" 2026-12-01T09:30:00Z ", "2026-12-01T09:30:00Z"),
        ("tomorrow", "tomorrow"),
    ],
)
def test_date_times_are_written_the_rfc_3339_way(typed: str, value: str) -> None:
    _, field = one({"type": "string", "format": "date-time"})
    assert read_text(field, typed) == value


def test_choices_are_not_typed() -> None:
    _, field = one({"type": "boolean"})
    with pytest.raises(TypeError):
        read_text(field, "yes")
    with pytest.raises(TypeError):
        text_of(True)


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**30), 10**30))
def test_a_number_shown_again_reads_back_the_same(number: float) -> None:
    _, field = one({"type": "number"})
    assert read_text(field, text_of(number)) == number
    assert text_of(number) == number_text(number)


# -- checking answers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("format_", "good", "bad", "problem"),
    [
        ("email", ["ada@example.org", "a.b+c@x.co.uk"], ["ada", "ada@example", "a b@x.org", "a@@x.org"], "email"),
        (
            "uri",
            ["https://example.org/page", "urn:isbn:0451450523", "mailto:ada@example.org"],
            ["example.org", "https://", "http:///path", "https://exa mple.org", "1http://x.org"],
            "full address",
        ),
        ("date", ["2026-12-01", "2024-02-29"], ["2026-13-01", "2025-02-29", "01/12/2026", "2026-12-1"], "YYYY-MM-DD"),
        (
            "date-time",
            ["2026-12-01T09:30:00Z", "2026-12-01T09:30:00.123+05:30", "2026-12-01 09:30:00-01:00"],
            ["2026-12-01T09:30:00", "2026-12-01", "2026-12-01T25:00:00Z", "2026-12-01T09:30:00+24:00"],
            "UTC offset",
        ),
    ],
)
def test_formats_are_checked(format_: str, good: list[str], bad: list[str], problem: str) -> None:
    _, field = one({"type": "string", "format": format_})
    for value in good:
        assert field.problems(value) == [], value
    for value in bad:
        found = field.problems(value)
        assert len(found) == 1, value
        assert problem in found[0]


def test_every_rule_has_its_own_words() -> None:
    form = parse_form(
        {
            "type": "object",
            "properties": {
                "code": {"type": "string", "minLength": 2, "maxLength": 3},
                "n": {"type": "integer", "minimum": 1, "maximum": 5},
                "env": {"type": "string", "enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]}, "maxItems": 2},
                "more": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "minItems": 1},
                "once": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "uniqueItems": True},
                "ok": {"type": "boolean"},
            },
            "required": ["code", "ok"],
        }
    )
    problems = form.problems({"code": "a", "n": 9, "env": "c", "tags": ["x", "y", "z"], "more": [], "once": ["x", "x"]})
    assert problems == {
        "code": ["must be at least 2 characters long"],
        "n": ["must be at most 5"],
        "env": ["must be one of 'a', 'b'"],
        "tags": ["choose at most 2"],
        "more": ["choose at least 1"],
        "once": ["choose each option at most once"],
        "ok": [REQUIRED],
    }
    assert form.problems({"code": "abcd", "n": 0, "ok": "yes", "tags": ["w"]}) == {
        "code": ["must be at most 3 characters long"],
        "n": ["must be at least 1"],
        "ok": ["must be a boolean, not a string"],
        "tags": ["item 0 must be one of 'x', 'y', 'z'"],
    }
    assert form.problems({"code": "ab", "ok": True, "more": ["x", "x"]}) == {}


@pytest.mark.parametrize(
    ("prop", "value", "problem"),
    [
        ({"type": "string"}, 5, "must be a string, not an integer"),
        ({"type": "string"}, None, "must be a string, not null"),
        ({"type": "string"}, {"a": 1}, "must be a string, not an object"),
        ({"type": "boolean"}, 1, "must be a boolean, not an integer"),
        ({"type": "integer"}, True, "must be an integer, not a boolean"),
        ({"type": "integer"}, 2.5, "must be an integer, not a number"),
        ({"type": "integer"}, math.inf, "must be an integer, not a non-finite number"),
        ({"type": "number"}, "0.5", "must be a number, not a string"),
        ({"type": "number"}, math.nan, "must be a number, not a non-finite number"),
        ({"type": "string", "enum": ["a", "b"]}, ["a"], "must be one of 'a', 'b', not a list"),
        ({"type": "array", "items": {"type": "string", "enum": ["x"]}}, "x", "must be a list of choices among 'x'"),
        ({"type": "array", "items": {"type": "string", "enum": ["x"]}}, ["x", 1], "item 1 must be one of 'x'"),
    ],
)
def test_a_value_of_the_wrong_json_type_is_named_by_its_type(prop: dict[str, Any], value: object, problem: str) -> None:
    form, _ = one(prop, required=False)
    (found,) = form.problems({"f": value})["f"]
    assert found.startswith(problem)


def test_whole_numbers_written_as_floats_are_integers() -> None:
    form, field = one({"type": "integer", "minimum": 1})
    assert field.problems(4.0) == []
    assert form.problems({"f": 0.0}) == {"f": ["must be at least 1"]}


def test_without_rules_only_types_and_choices_are_judged() -> None:
    form, field = one({"type": "string", "format": "email", "maxLength": 3})
    assert form.problems({"f": "not an address"}, rules=False) == {}
    assert form.problems({"f": 3}, rules=False) == {"f": ["must be a string, not an integer"]}
    assert form.problems({}, rules=False) == {"f": [REQUIRED]}
    assert field.problems("not an address") == [
        "must be at most 3 characters long",
        "must be an email address such as name@example.org",
    ]


@pytest.mark.parametrize(
    ("content", "lines"),
    [
        ([], ["the answer must be an object of field values, not a list"]),
        (None, ["the answer must be an object of field values, not null"]),
        ({"f": "x", "extra": 1}, ["unknown field 'extra'"]),
        ({"f": "x", **{f"k{i}": i for i in range(7)}}, ["unknown fields 'k0', 'k1', 'k2', 'k3', 'k4' and 2 more"]),
        ({"x" * 500: 1}, [f"unknown field '{'x' * 62}...", "f: required"]),
        ({"f": 1, "g": 2}, ["unknown field 'g'", "f: must be a string, not an integer"]),
    ],
)
def test_what_was_not_asked_for_is_named_briefly_before_the_fields(content: object, lines: list[str]) -> None:
    form, _ = one({"type": "string"})
    assert problem_lines(form.problems(content)) == lines


def test_a_field_is_judged_alone() -> None:
    form = parse_form(
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]}
    )
    a, b = form.fields
    assert form.field("a") is a and form.field("c") is None
    assert a.problems("x") == []
    assert a.problems(None) == [REQUIRED]
    assert b.problems(None) == [REQUIRED]


def test_an_optional_field_may_stay_unanswered() -> None:
    form, field = one({"type": "integer", "minimum": 3}, required=False)
    assert field.problems(None) == []
    assert form.problems({}) == {}


@pytest.mark.parametrize(
    ("required", "default", "picked", "answer"),
    [
        (False, None, [], None),
        (True, None, [], []),
        (False, ["x"], [], []),
        (False, None, ["y", "x", "y"], ["y", "x"]),
    ],
)
def test_a_multi_select_with_nothing_ticked_is_cleared_only_when_that_means_something(
    required: bool, default: list[str] | None, picked: list[str], answer: list[str] | None
) -> None:
    prop: dict[str, Any] = {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}}
    if default is not None:
        prop["default"] = default
    _, field = one(prop, required=required)
    assert read_choices(field, picked) == answer


@given(st.text(min_size=1))
def test_problems_never_quote_the_answer(answer: str) -> None:
    form = parse_form(
        {
            "type": "object",
            "properties": {
                "mail": {"type": "string", "format": "email"},
                "day": {"type": "string", "format": "date", "maxLength": 3},
            },
        }
    )
    for messages in form.problems({"mail": answer + "@", "day": answer + "x" * 4}).values():
        for message in messages:
            assert answer + "@" not in message
            assert answer + "xxxx" not in message


@given(st.integers(-50, 50), st.integers(0, 30), st.integers(-100, 100))
def test_integer_bounds(low: int, width: int, typed: int) -> None:
    _, field = one({"type": "integer", "minimum": low, "maximum": low + width})
    value = read_text(field, str(typed))
    assert value == typed
    assert (field.problems(value) == []) == (low <= typed <= low + width)
