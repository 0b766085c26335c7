"""What `flow.ask` is typed to return for each kind of question: checked by mypy, never run.

`make typecheck` checks this file with the rest of the tree, and `test_ask_typing.py` checks it on its own.
Each `assert_type` fails the check if the inferred type changes; each `type: ignore[...]` marks a call that
must stay a type error (mypy --strict reports an ignore that is no longer needed).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Annotated, Literal, TypedDict, assert_type

from pydantic import BaseModel, Field

from mcp_elicit.server import Answer, Email, Flow, form_spec
from mcp_elicit.server.forms import FormSpec


class Region(enum.StrEnum):
    EU = "eu"
    US = "us"


class Approval(BaseModel):
    approve: bool


@dataclasses.dataclass
class Trip:
    city: str
    seats: int = 1


class Contact(TypedDict):
    name: str


Size = Literal["s", "m", "l"]


async def every_kind(flow: Flow) -> None:
    assert_type(await flow.ask("Deploy?", bool), Answer[bool])
    assert_type(await flow.ask("Name?", str), Answer[str])
    assert_type(await flow.ask("How many?", int), Answer[int])
    assert_type(await flow.ask("Share?", float), Answer[float])
    assert_type(await flow.ask("When?", datetime.date), Answer[datetime.date])
    assert_type(await flow.ask("Mail?", Email), Answer[str])
    assert_type(await flow.ask("Size?", Literal["s", "m"]), Answer[Literal["s", "m"]])
    assert_type(await flow.ask("Size?", Size), Answer[Size])
    assert_type(await flow.ask("Region?", Region), Answer[Region])
    assert_type(await flow.ask("Sizes?", list[Size]), Answer[list[Size]])
    assert_type(await flow.ask("Regions?", list[Region]), Answer[list[Region]])
    assert_type(await flow.ask("Trip?", Trip), Answer[Trip])
    assert_type(await flow.ask("Contact?", Contact), Answer[Contact])
    assert_type(await flow.ask("Approve?", Approval), Answer[Approval])
    assert_type(await flow.ask("Note?", str | None), Answer[str | None])
    assert_type(await flow.ask("Seats?", Annotated[int, Field(ge=1, le=9)]), Answer[int])
    assert_type(await flow.ask("Region?", {"eu": "Europe", "us": "United States"}), Answer[str])
    assert_type(await flow.ask("Region?", {Region.EU: "Europe", Region.US: "United States"}), Answer[Region])
    assert_type(form_spec(bool), FormSpec[bool])
    assert_type(form_spec({"eu": "Europe"}), FormSpec[str])


async def refused_by_the_checker(flow: Flow) -> None:
    await flow.ask("Count?", 3)  # type: ignore[call-overload]
    await flow.ask("Region?", {"eu": 1})  # type: ignore[dict-item]
    await flow.ask("Region?", {1: "one"})  # type: ignore[type-var]
