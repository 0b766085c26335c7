"""The JSON value type shared by records that carry schemas, answers and results."""

from typing import TypeAlias, Union

JSONValue: TypeAlias = Union[dict[str, "JSONValue"], list["JSONValue"], str, int, float, bool, None]  # noqa: UP007
JSONObject: TypeAlias = dict[str, JSONValue]
