"""The spec's restricted form schema, written out by hand, and the check that a form's schema keeps to it."""

from __future__ import annotations

import math
from typing import Any

from mcp_elicit.model.json import JSONValue


# The spec's PrimitiveSchemaDefinition (schema.ts, 2025-11-25 = 2026-07-28), written out by hand: for each
# variant, the keys it must have with their values, and the keys it may have with a check of their values.
def _string(value: object) -> bool:
    return isinstance(value, str)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return _integer(value) or (isinstance(value, float) and math.isfinite(value))


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _const_titles(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, dict) and item.keys() == {"const", "title"} and all(map(_string, item.values()))
        for item in value
    )


_COMMON = {"title": _string, "description": _string}
SPEC_VARIANTS: dict[str, tuple[dict[str, object], dict[str, Any]]] = {
    "StringSchema": (
        {"type": "string"},
        {
            **_COMMON,
            "minLength": _integer,
            "maxLength": _integer,
            "format": lambda v: v in ("email", "uri", "date", "date-time"),
            "default": _string,
        },
    ),
    "NumberSchema(number)": (
        {"type": "number"},
        {**_COMMON, "minimum": _number, "maximum": _number, "default": _number},
    ),
    "NumberSchema(integer)": (
        {"type": "integer"},
        {**_COMMON, "minimum": _number, "maximum": _number, "default": _number},
    ),
    "BooleanSchema": ({"type": "boolean"}, {**_COMMON, "default": lambda v: isinstance(v, bool)}),
    "UntitledSingleSelectEnumSchema": ({"type": "string"}, {**_COMMON, "enum": _strings, "default": _string}),
    "TitledSingleSelectEnumSchema": ({"type": "string"}, {**_COMMON, "oneOf": _const_titles, "default": _string}),
    "UntitledMultiSelectEnumSchema": (
        {"type": "array"},
        {
            **_COMMON,
            "items": lambda v: (
                isinstance(v, dict) and v.keys() == {"type", "enum"} and v["type"] == "string" and _strings(v["enum"])
            ),
            "minItems": _integer,
            "maxItems": _integer,
            "default": _strings,
        },
    ),
    "TitledMultiSelectEnumSchema": (
        {"type": "array"},
        {
            **_COMMON,
            "items": lambda v: isinstance(v, dict) and v.keys() == {"anyOf"} and _const_titles(v["anyOf"]),
            "minItems": _integer,
            "maxItems": _integer,
            "default": _strings,
        },
    ),
}
_REQUIRED_KEYS = {
    "UntitledSingleSelectEnumSchema": {"enum"},
    "TitledSingleSelectEnumSchema": {"oneOf"},
    "UntitledMultiSelectEnumSchema": {"items"},
    "TitledMultiSelectEnumSchema": {"items"},
}


def spec_variants_of(prop: object) -> list[str]:
    """The spec variants a property schema is an instance of (exactly one for a valid one)."""
    if not isinstance(prop, dict):
        return []
    matches = []
    for variant, (fixed, optional) in SPEC_VARIANTS.items():
        if any(prop.get(key) != value for key, value in fixed.items()):
            continue
        if not _REQUIRED_KEYS.get(variant, set()) <= prop.keys():
            continue
        rest = {key: value for key, value in prop.items() if key not in fixed}
        if all(key in optional and optional[key](value) for key, value in rest.items()):
            matches.append(variant)
    return matches


def assert_restricted_schema(schema: dict[str, JSONValue]) -> None:
    assert schema.keys() <= {"$schema", "type", "properties", "required"}
    assert schema["type"] == "object"
    properties = schema["properties"]
    assert isinstance(properties, dict)
    required = schema.get("required", [])
    assert isinstance(required, list) and set(map(str, required)) <= properties.keys()
    for name, prop in properties.items():
        assert len(spec_variants_of(prop)) == 1, (name, prop, spec_variants_of(prop))
