"""One-line asks: `flow.ask(message, T)` for every kind of `T`, called through `mcp_elicit.testing.Harness`.

Each kind is asked on the legacy era (2025-11-25, `elicitation/create` on the live call) and on 2026-07-28
(rounds), on both stores. The body journals nothing of the answer itself: a re-executed body gets its
typed answer from the stored decision, which the tests prove by failing the call after the answer once and
calling again. Refusals (unsupported types, secrets) happen before anything is stored or shown: at
registration for a tool's declared `asks`, else at the ask. An answer of the wrong type is sent with the
SDK's client directly: the client kit refuses it against the schema before it could reach the server.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict, cast

import pydantic.dataclasses
import pytest
import typing_extensions
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ListRootsResult
from pydantic import BaseModel, Field

import mcp_elicit.testing as scripted
from mcp_elicit.client import SdkOptions
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import (
    Accepted,
    Answer,
    Completed,
    Elicitation,
    Email,
    Fallback,
    Flow,
    InvalidAnswer,
    RequestState,
    SecretField,
    Titled,
    UnsupportedField,
    form_spec,
)
from mcp_elicit.store import open_store
from mcp_elicit.testing import EraName, Harness, Reply
from tests.helpers.ask_types import Region, Trip
from tests.helpers.model import Model
from tests.helpers.person import Person, accept
from tests.helpers.restricted_schema import assert_restricted_schema
from tests.helpers.results import text

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]
BOTH_PATHS = pytest.mark.elicit_eras("2025-11-25", "2026-07-28")
"""`elicitation/create` on the live call, and rounds: the two paths an answer takes to the body."""


class Contact(TypedDict):
    name: Annotated[str, Field(min_length=1)]
    region: Region
    email: NotRequired[Email]


class Approval(BaseModel):
    approve: bool = Field(description="Deploy now")
    note: str | None = None


class Sample(enum.StrEnum):
    """Named as `flow.sample`'s default key is."""

    QUICK = "quick"
    FULL = "full"


class Connect(BaseModel):
    """Named as `flow.ask_url`'s default key is."""

    account: str


class Roots(TypedDict):
    """Named as `flow.roots`'s default key is."""

    path: str


@dataclasses.dataclass(frozen=True)
class Case:
    """One kind of question: what is asked, the schema the client sees, an answer, and the typed value."""

    name: str
    asked: Any
    message: str
    schema: dict[str, Any]
    answer: dict[str, Any]
    data: Any
    key: str
    """The question key when the tool gives none: what is asked names it, never the message."""
    stored: dict[str, Any] | None = None


def _one(name: str, asked: Any, message: str, prop: dict[str, Any], answer: Any, data: Any, **kw: Any) -> Case:
    schema = {"type": "object", "properties": {"value": {**prop, "title": message}}, "required": ["value"]}
    return Case(name, asked, message, schema, {"value": answer}, data, **kw)


CASES = [
    _one("yes_no", bool, "Deploy to production now?", {"type": "boolean"}, True, True, key="yes_no"),
    _one("no", bool, "Keep the old release?", {"type": "boolean"}, False, False, key="yes_no"),
    _one("text", str, "What should the release be called?", {"type": "string"}, "Ada", "Ada", key="text"),
    _one("count", int, "How many replicas?", {"type": "integer"}, 3.0, 3, stored={"value": 3}, key="number"),
    _one("share", float, "Which share of traffic?", {"type": "number"}, 1, 1.0, key="number"),
    _one(
        "bounded", Annotated[int, Field(ge=1, le=9)], "How many seats?",
        {"type": "integer", "minimum": 1, "maximum": 9}, 4, 4, key="number",
    ),
    _one("day", datetime.date, "Which day?", {"type": "string", "format": "date"}, "2026-12-24",
         datetime.date(2026, 12, 24), key="date"),
    _one("mail", Email, "Where should the report go?", {"type": "string", "format": "email"}, "a@b.example",
         "a@b.example", key="email"),
    _one("size", Literal["s", "m", "l"], "Which size?", {"type": "string", "enum": ["s", "m", "l"]}, "m", "m",
         key="choice"),
    _one("region", Region, "Which region?", {"type": "string", "enum": ["eu", "us"]}, "us", Region.US,
         key="region"),
    _one(
        "sizes", list[Literal["s", "m", "l"]], "Which sizes?",
        {"type": "array", "items": {"type": "string", "enum": ["s", "m", "l"]}}, ["s", "l"], ["s", "l"],
        key="choices",
    ),
    _one(
        "regions", list[Region], "Which regions?", {"type": "array", "items": {"type": "string", "enum": ["eu", "us"]}},
        ["eu", "us"], [Region.EU, Region.US], key="region",
    ),
    _one(
        "titled", {"eu": "Europe", "us": "United States"}, "Where should it run?",
        {"type": "string", "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]},
        "us", "us", key="choice",
    ),
    _one(
        "titled_enum", {Region.EU: "Europe", Region.US: "United States"}, "Where should it run?",
        {"type": "string", "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]},
        "eu", Region.EU, key="region",
    ),
    _one(
        "titled_regions", Annotated[list[Region], Titled({"eu": "Europe", "us": "United States"})], "Where?",
        {"type": "array", "items": {"anyOf": [{"const": "eu", "title": "Europe"},
                                              {"const": "us", "title": "United States"}]}},
        ["us"], [Region.US], key="region",
    ),
    Case(
        "trip", Trip, "Plan the trip",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "seats": {"type": "integer", "description": "How many seats", "minimum": 1, "maximum": 9,
                          "default": 1},
                "region": {"type": "string", "enum": ["eu", "us"]},
            },
            "required": ["city"],
        },
        {"city": "Oslo", "region": "eu"}, Trip("Oslo", 1, Region.EU), key="trip",
        stored={"city": "Oslo", "seats": 1, "region": "eu"},
    ),
    Case(
        "contact", Contact, "Who should we call?",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "region": {"type": "string", "enum": ["eu", "us"]},
                "email": {"type": "string", "format": "email"},
            },
            "required": ["name", "region"],
        },
        {"name": "Ada", "region": "us"}, {"name": "Ada", "region": Region.US}, key="contact",
    ),
    Case(
        "approval", Approval, "Deploy?",
        {
            "type": "object",
            "properties": {"approve": {"type": "boolean", "description": "Deploy now"}, "note": {"type": "string"}},
            "required": ["approve"],
        },
        {"approve": True, "note": "ship it"}, Approval(approve=True, note="ship it"), key="approval",
    ),
]  # fmt: skip


def shape(value: object) -> object:
    """The value with the type of every part, so that `"eu"` and `Region.EU` (equal as strings) differ."""
    if isinstance(value, list):
        return [shape(item) for item in value]
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    return (type(value), value)


class Flaky:
    """A step that fails the first time it runs for each tool, as a crash after the answer would."""

    def __init__(self) -> None:
        self.failed: set[str] = set()

    def run(self, name: str) -> str:
        if name not in self.failed:
            self.failed.add(name)
            raise RuntimeError("the deploy service is down")
        return "done"


@dataclasses.dataclass
class Tools:
    seen: dict[str, list[Answer[Any]]] = dataclasses.field(default_factory=dict)
    flaky: Flaky = dataclasses.field(default_factory=Flaky)
    regions: dict[str, str] = dataclasses.field(default_factory=lambda: {"eu": "Europe", "us": "United States"})
    limit: Any = int | None


REFUSED: dict[str, Any] = {
    "mapping_type": dict[str, int],
    "union": int | str,
    "optional_form": Trip | None,
    "strings": list[str],
    "int_choices": Literal[1, 2],
}


def build(elicitation: Elicitation, tools: Tools) -> None:
    for case in CASES:
        register_case(elicitation, tools, case)

    @elicitation.tool()
    async def confirm(flow: Flow) -> str:
        return repr(await flow.ask("Delete the 3 matching files?", bool))

    @elicitation.tool()
    async def ask_refused(flow: Flow, kind: str) -> str:
        return repr(await flow.ask("Anything?", REFUSED[kind]))

    @elicitation.tool()
    async def ask_token(flow: Flow) -> str:
        return repr(await flow.ask("Paste your deploy token", str))

    @elicitation.tool()
    async def ask_two(flow: Flow) -> str:
        first = await flow.ask("Which region?", Region)
        second = await flow.ask("Deploy there now?", bool)
        tools.seen.setdefault("ask_two", []).append(first)
        return repr((first, second))

    @elicitation.tool()
    async def ask_versioned(flow: Flow) -> str:
        region = await flow.ask("Where should it run?", tools.regions, key="region")
        limit = await flow.ask("Any limit?", tools.limit, key="limit")
        return repr((region, limit))

    @elicitation.tool(fallback=Fallback.ARGUMENTS)
    async def ask_by_arguments(flow: Flow) -> str:
        return repr(await flow.ask("Which region?", {Region.EU: "Europe", Region.US: "United States"}))

    @elicitation.tool()
    async def ask_by_default_keys(flow: Flow, who: str) -> str:
        """Default keys only, but one in the way of a numbered default; types named like the other defaults,
        then those asks themselves. The messages carry the argument, which no key may."""
        answers = [
            await flow.ask(f"Release name for {who}?", str),
            await flow.ask(f"Codename for {who}?", str),
            await flow.ask("Anything else?", str, key="text_3"),
            await flow.ask(f"A note for {who}?", str),
            await flow.ask("Which sample?", Sample),
            await flow.ask("Which account?", Connect),
            await flow.ask("Which checkout?", Roots),
        ]
        sampled = await flow.sample(f"Summarize for {who}", max_tokens=5)
        connected = await flow.ask_url(f"Connect {who}'s account")
        rooted = await flow.roots()
        tools.seen.setdefault("ask_by_default_keys", []).extend(answers)
        await flow.step("apply", tools.flaky.run, "ask_by_default_keys")
        return repr([*answers, type(sampled.content).__name__, connected, len(rooted)])

    @elicitation.tool()
    async def ask_a_default_key_again(flow: Flow) -> str:
        await flow.ask("Release name?", str)
        try:
            await flow.ask("Codename?", str, key="text")
        except ValueError as refused:
            return str(refused)
        return "asked both"


def register_case(elicitation: Elicitation, tools: Tools, case: Case) -> None:
    name = f"ask_{case.name}"

    async def body(flow: Flow) -> str:
        answer = await flow.ask(case.message, case.asked)
        tools.seen.setdefault(name, []).append(answer)
        await flow.step("apply", tools.flaky.run, name)
        return repr(answer)

    elicitation.tool(name=name, asks=[case.asked])(body)


@pytest.fixture
def tools() -> Tools:
    return Tools()


@pytest.fixture
def elicitation(store_url: str, tools: Tools) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(store_url), request_state=RequestState(single_process=True), public_base_url="http://127.0.0.1:8765"
    )
    runtime.server("one-line-asks")
    build(runtime, tools)
    yield runtime
    runtime.close()


@pytest.fixture
def elicit_app(elicitation: Elicitation) -> Elicitation:
    return elicitation


async def call(elicitation: Elicitation, era: str, person: Person | None, tool: str, **arguments: Any) -> Any:
    async with Client(elicitation.mcp_server, mode=era, elicitation_callback=person) as client:
        return await client.call_tool(tool, arguments)


# -- every kind, both eras -------------------------------------------------------------------------------------


@BOTH_PATHS
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_every_kind_is_asked_answered_and_replayed_typed(elicit: Harness, tools: Tools, case: Case) -> None:
    tool = f"ask_{case.name}"
    failed = await elicit.call(tool, answers={case.key: scripted.accept(case.answer)})
    assert failed.error == f"Error executing tool {tool}"
    assert tool in tools.flaky.failed

    [asked] = failed.asked
    assert asked.message == case.message
    assert asked.schema == case.schema
    assert_restricted_schema(case.schema)
    [decision] = elicit.decisions()
    assert (decision.key, decision.status) == (case.key, DecisionStatus.ACCEPTED)
    assert decision.requested_schema == case.schema
    assert decision.content == (case.stored or case.answer)

    again = await elicit.call(tool)
    assert again.text == repr(Accepted(case.data))
    elicit.assert_asked_once(case.key)
    seen = tools.seen[tool]
    assert len(seen) == 2, "the answering run and the re-executed one"
    for answer in seen:
        assert isinstance(answer, Accepted)
        assert shape(answer.data) == shape(case.data)
    assert len(elicit.decisions()) == 1


@BOTH_PATHS
@pytest.mark.parametrize(
    ("reply", "expected", "status"),
    [
        (scripted.decline(), "Declined()", DecisionStatus.DECLINED),
        (scripted.cancel(), "Cancelled()", DecisionStatus.CANCELLED),
    ],
    ids=str,
)
async def test_decline_and_cancel_of_a_yes_no_stay_distinct_from_no(
    elicit: Harness, reply: Reply, expected: str, status: DecisionStatus
) -> None:
    assert (await elicit.call("confirm", answers={"yes_no": reply})).text == expected
    [decision] = elicit.decisions()
    assert decision.status is status
    assert decision.content is None


@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_of_the_wrong_type_is_asked_again(elicitation: Elicitation, era: str) -> None:
    person = Person([accept(value="yes"), accept(value=1), accept(value=False)])
    assert text(await call(elicitation, era, person, "confirm")) == repr(Accepted(False))
    assert len(person.asked) == 3
    assert "value: must be a boolean, not a string" in person.asked[1].message
    assert "value: must be a boolean, not an integer" in person.asked[2].message


@BOTH_PATHS
async def test_a_body_re_run_between_rounds_gets_the_earlier_answer_typed(elicit: Harness, tools: Tools) -> None:
    answers = {"region": scripted.accept(value="eu"), "yes_no": scripted.accept(value=True)}
    assert (await elicit.call("ask_two", answers=answers)).text == repr((Accepted(Region.EU), Accepted(True)))
    assert [shape(answer.data) for answer in tools.seen["ask_two"] if isinstance(answer, Accepted)] == [
        (Region, Region.EU)
    ]
    assert sorted(d.key for d in elicit.decisions()) == ["region", "yes_no"]


async def roots(context: ClientRequestContext) -> ListRootsResult:
    return ListRootsResult(roots=[])


@BOTH_PATHS
async def test_default_keys_name_the_type_never_the_message_and_stay_clear_of_the_other_asks(
    elicit: Harness, tools: Tools
) -> None:
    answers: dict[str, Reply] = {
        "text": scripted.accept(value="r1"),
        "text_2": scripted.accept(value="kraken"),
        "text_3": scripted.accept(value="none"),
        "text_4": scripted.accept(value="ship"),
        "sample_form": scripted.accept(value="full"),
        "connect_form": scripted.accept(account="acme"),
        "roots_form": scripted.accept(path="/srv"),
        "connect": scripted.consent("completed"),
    }
    model = Model()
    host = SdkOptions(sampling_callback=model, list_roots_callback=roots)
    failed = await elicit.call("ask_by_default_keys", {"who": "Ada"}, answers=answers, sdk=host)
    assert failed.error == "Error executing tool ask_by_default_keys", "the step fails once, after every answer"
    keys = ["text", "text_2", "text_3", "text_4", "sample_form", "connect_form", "roots_form", "connect"]
    assert [question.key for question in failed.asked] == keys
    assert sorted(d.key for d in elicit.decisions()) == sorted(keys)
    assert not any("Ada" in d.key for d in elicit.decisions())

    again = await elicit.call("ask_by_default_keys", {"who": "Ada"}, sdk=host)
    assert again.asked == (), "the re-executed body finds every answer under the same keys"
    texts = [Accepted("r1"), Accepted("kraken"), Accepted("none"), Accepted("ship")]
    typed = [Accepted(Sample.FULL), Accepted(Connect(account="acme")), Accepted(Roots(path="/srv"))]
    assert again.text == repr([*texts, *typed, "TextContent", Completed(), 0])
    for key in keys:
        elicit.assert_asked_once(key)
    assert len(model.asked) == 1, "the model request was journaled as sample, not taken by Sample's question"
    assert len(tools.seen["ask_by_default_keys"]) == 2 * len(keys[:-1])


@BOTH_PATHS
async def test_an_explicit_key_a_default_took_earlier_is_refused_saying_so(elicit: Harness) -> None:
    called = await elicit.call("ask_a_default_key_again", answers={"text": scripted.accept(value="r1")})
    assert called.text == (
        "question key 'text' is used twice in one tool body; keys name questions (an earlier question took it by "
        "default: give that one a key= too)"
    )


@BOTH_PATHS
async def test_the_arguments_fallback_takes_a_one_value_answer_by_key(elicit: Harness) -> None:
    first = (await elicit.call("ask_by_arguments", modes=())).error
    assert "elicit_answers" in first and '"region"' in first
    wrong = await elicit.call("ask_by_arguments", {"elicit_answers": {"region": {"value": "mars"}}}, modes=())
    assert wrong.result.is_error
    done = await elicit.call("ask_by_arguments", {"elicit_answers": {"region": {"value": "us"}}}, modes=())
    assert done.text == repr(Accepted(Region.US))


async def cannot_ask(elicit: Harness, tool: str) -> None:
    if elicit.era == "2026-07-28":
        with pytest.raises(MCPError):
            await elicit.call(tool, modes=())
    else:
        assert "form elicitation" in (await elicit.call(tool, modes=())).error


def answer_out_of_band(elicitation: Elicitation, key: str, content: dict[str, Any]) -> None:
    [decision] = [d for d in elicitation.store.list_decisions(Operator()) if d.key == key]
    elicitation.store.transition(decision, DecisionStatus.ACCEPTED, caller=decision.principal, content=content)


@BOTH_PATHS
async def test_an_answer_recorded_under_an_older_version_of_the_question_is_asked_again(
    elicit: Harness, elicitation: Elicitation, tools: Tools
) -> None:
    """Answers recorded out of band (the web page, an operator) for choices or a type the code no longer has."""
    await cannot_ask(elicit, "ask_versioned")
    answer_out_of_band(elicitation, "region", {"value": "us"})
    await cannot_ask(elicit, "ask_versioned")
    answer_out_of_band(elicitation, "limit", {"value": 2})
    tools.regions, tools.limit = {"eu": "Europe"}, Region | None

    answers = {"region": scripted.accept(value="eu"), "limit": scripted.accept(value="us")}
    called = await elicit.call("ask_versioned", answers=answers)
    assert called.text == repr((Accepted("eu"), Accepted(Region.US)))
    region, limit = called.asked
    assert "could not be used: invalid answer to choices: value: must be one of 'eu'" in region.message
    assert "invalid answer to Region | None: value: must be one of 'eu', 'us', not an integer" in limit.message
    assert sorted(d.key for d in elicit.decisions()) == ["limit", "limit#2", "region", "region#2"]


# -- the forms behind them ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_an_answer_round_trips_through_its_wire_content(case: Case) -> None:
    spec = form_spec(case.asked)
    value = spec.validate(case.answer)
    assert shape(value) == shape(case.data)
    assert spec.content(value) == (case.stored or case.answer)
    assert shape(spec.validate(spec.content(value))) == shape(case.data)
    assert spec.key == case.key


class Partial(typing_extensions.TypedDict, total=False):
    name: Required[str]
    region: Region


@pydantic.dataclasses.dataclass
class Checked:
    seats: int = Field(ge=1)


@dataclasses.dataclass
class Computed:
    city: str
    checks: list[Literal["lint", "smoke"]] = dataclasses.field(default_factory=list)
    label: str = dataclasses.field(init=False, default="")

    def __post_init__(self) -> None:
        if self.city == "Atlantis":
            raise ValueError("no such city")
        self.label = self.city.upper()


def test_a_total_false_typed_dict_requires_only_its_required_keys() -> None:
    spec = form_spec(Partial)
    assert spec.schema["required"] == ["name"]
    assert spec.validate({"name": "Ada"}) == {"name": "Ada"}
    assert spec.validate({"name": "Ada", "region": "eu"}) == {"name": "Ada", "region": Region.EU}
    with pytest.raises(InvalidAnswer, match="region: must be one of 'eu', 'us'"):
        spec.validate({"name": "Ada", "region": "mars"})


class Keys(TypedDict):
    json: Annotated[str, Field(max_length=3)]
    _private: NotRequired[int]


def test_typed_dict_keys_are_kept_whatever_their_names_and_their_constraints_checked() -> None:
    spec = form_spec(Keys)
    assert spec.schema == {
        "type": "object",
        "properties": {"json": {"type": "string", "maxLength": 3}, "_private": {"type": "integer"}},
        "required": ["json"],
    }
    assert spec.validate({"json": "abc", "_private": 2}) == {"json": "abc", "_private": 2}
    with pytest.raises(InvalidAnswer, match="json: String should have at most 3 characters"):
        spec.validate({"json": "abcd"})


def test_a_pydantic_dataclass_keeps_its_constraints_shown_and_checked() -> None:
    spec = form_spec(Checked)
    assert spec.schema == {
        "type": "object",
        "properties": {"seats": {"type": "integer", "minimum": 1}},
        "required": ["seats"],
    }
    assert spec.validate({"seats": 2}) == Checked(2)
    with pytest.raises(InvalidAnswer, match="seats: Input should be greater than or equal to 1"):
        spec.validate({"seats": 0})


def test_a_dataclass_asks_its_init_fields_and_runs_its_post_init() -> None:
    spec = form_spec(Computed)
    assert list(cast(dict[str, Any], spec.schema["properties"])) == ["city", "checks"]
    trip = spec.validate({"city": "Oslo"})
    assert (trip.label, trip.checks) == ("OSLO", [])
    assert spec.content(trip) == {"city": "Oslo", "checks": []}
    with pytest.raises(InvalidAnswer, match="answer: Value error, no such city"):
        spec.validate({"city": "Atlantis"})


def test_an_optional_one_value_is_answered_by_leaving_it_out() -> None:
    spec = form_spec(str | None).asking("Anything to add?")
    assert spec.schema == {"type": "object", "properties": {"value": {"type": "string", "title": "Anything to add?"}}}
    assert spec.validate({}) is None
    assert spec.content(None) == {}
    with pytest.raises(InvalidAnswer, match="value: must be a string, not null"):
        spec.validate({"value": None})


def test_the_question_titles_a_one_value_form_unless_the_type_gives_a_title() -> None:
    spec = form_spec(Annotated[int, Field(title="Replicas", description="1 to 9", ge=1, le=9)])
    assert spec.asking("How many?").schema["properties"] == {
        "value": {"type": "integer", "title": "Replicas", "description": "1 to 9", "minimum": 1, "maximum": 9}
    }
    assert form_spec(bool).asking("").schema["properties"] == {"value": {"type": "boolean"}}
    assert form_spec(bool).schema == {
        "type": "object",
        "properties": {"value": {"type": "boolean"}},
        "required": ["value"],
    }


def test_a_form_is_built_once_per_type_and_choices_by_their_items() -> None:
    assert form_spec(list[Region]) is form_spec(list[Region])
    assert form_spec(Trip) is form_spec(Trip)
    assert form_spec({"eu": "Europe"}) is form_spec({"eu": "Europe"})
    as_strings, as_members = form_spec({"eu": "Europe"}), form_spec({Region.EU: "Europe"})
    assert as_strings is not as_members
    assert shape(as_strings.validate({"value": "eu"})) == (str, "eu")
    assert shape(as_members.validate({"value": "eu"})) == (Region, Region.EU)


@pytest.mark.parametrize(
    ("message", "asked"),
    [("Paste your API key", str), ("Your card number?", str), ("Enter the PIN", int), ("One-time password", str)],
)
def test_a_one_value_ask_with_a_secret_question_is_refused(message: str, asked: Any) -> None:
    with pytest.raises(SecretField, match="is asked with a question that looks like a secret"):
        form_spec(asked).asking(message)


@pytest.mark.parametrize(
    ("message", "asked"),
    [
        ("Rotate the API token now?", bool),
        ("How many tokens to mint?", int),
        ("Which token should be revoked?", {"a": "Token A", "b": "Token B"}),
        ("Which session to end?", Literal["web", "cli"]),
        ("Which release?", str),
    ],
)
def test_a_question_that_names_a_secret_it_does_not_ask_for_is_allowed(message: str, asked: Any) -> None:
    form_spec(asked).asking(message)


# -- refusals -------------------------------------------------------------------------------------------------


def logged_failure(caplog: pytest.LogCaptureFixture, kind: type[Exception]) -> Exception:
    """The error the body raised: the SDK answers only "Error executing tool ..." and logs the cause."""
    for record in caplog.records:
        error = record.exc_info[1] if record.exc_info else None
        while error is not None:
            if isinstance(error, kind):
                return error
            error = error.__cause__
    raise AssertionError(f"no {kind.__name__} was logged")


@pytest.mark.elicit_eras("2026-07-28")  # refused at the ask, before any era's path
@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        ("mapping_type", "dict[str, int]: dict[str, int] is not supported; flow.ask takes"),
        ("union", "int | str: int | str is not supported; flow.ask takes"),
        ("optional_form", "Trip | None: a model, dataclass or TypedDict is asked as a whole form"),
        ("strings", "list[str]: a list must be of Literal or Enum choices"),
        ("int_choices", "Literal[1, 2]: Literal[1, 2] is not supported"),
    ],
)
async def test_an_unsupported_type_fails_the_ask_before_anything_is_stored_or_shown(
    elicit: Harness, kind: str, fragment: str, caplog: pytest.LogCaptureFixture
) -> None:
    called = await elicit.call("ask_refused", {"kind": kind}, answers={"choice": scripted.accept(value=1)})
    assert called.error == "Error executing tool ask_refused"
    assert fragment in str(logged_failure(caplog, UnsupportedField))
    assert called.asked == ()
    assert elicit.decisions() == []


@pytest.mark.elicit_eras("2026-07-28")  # refused at the ask, before any era's path
async def test_a_one_value_ask_whose_question_asks_for_a_secret_is_refused_when_asked(
    elicit: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    called = await elicit.call("ask_token", answers={"text": scripted.accept(value="hunter2")})
    assert called.error == "Error executing tool ask_token"
    message = str(logged_failure(caplog, SecretField))
    assert "str is asked with a question that looks like a secret ('Paste your deploy token')" in message
    assert "URL mode (ask_url)" in message
    assert called.asked == ()
    assert elicit.decisions() == []


class PlainRegion(enum.Enum):
    EU = "eu"


class Nested(BaseModel):
    trip: Trip


@dataclasses.dataclass
class NestedTrip:
    contact: Contact


@dataclasses.dataclass
class WithMapping:
    tags: dict[str, str]


class Optionals(TypedDict):
    note: str | None


@dataclasses.dataclass
class WithInitVar:
    city: str
    scale: dataclasses.InitVar[int]


@pytest.mark.parametrize(
    ("asked", "fragment"),
    [
        (Nested, "Nested.trip: Trip is not supported; a form field must be str"),
        (NestedTrip, "NestedTrip.contact: Contact is not supported; a form field must be str"),
        (WithMapping, "WithMapping.tags: dict[str, str] is not supported"),
        (Optionals, "Optionals.note: a form cannot answer null"),
        (WithInitVar, "WithInitVar.scale: an InitVar is not kept on the dataclass"),
        (
            Trip | None,
            "Trip | None: a model, dataclass or TypedDict is asked as a whole form, which cannot be optional",
        ),
        (Annotated[Approval, Field(title="x")], "which cannot be Annotated: ask for Approval itself"),
        (Approval | Trip, "Approval | Trip: Approval | Trip is not supported"),
        (list[Trip], "list[Trip]: a list must be of Literal or Enum choices"),
        (list[str] | None, "a list must be of Literal or Enum choices"),
        (tuple[int, int], "tuple[int, int]: tuple[int, int] is not supported"),
        ("Region", "'Region': a string is not a type: pass the type itself"),
        (Annotated[str, Field(pattern="^a")], "cannot be shown to the client in the restricted schema"),
        ({}, "choices: give at least one choice"),
        ({1: "one"}, "choices: a choice must be a string or a member of an Enum of strings, not an integer"),
        ({"a": ""}, "choices: the title of 'a' must be a non-empty string"),
        ({"eu": "Europe", Region.US: "United States"}, "the choices must be all strings or all members of one Enum"),
        ({Region.EU: "Europe", PlainRegion.EU: "Europe again"}, "two choices share the value 'eu'"),
    ],
)
def test_what_cannot_be_a_flat_form_is_refused_naming_the_field_and_why(asked: Any, fragment: str) -> None:
    with pytest.raises(UnsupportedField) as refused:
        form_spec(asked)
    assert fragment in str(refused.value)


class Login(BaseModel):
    username: str
    password: str


@dataclasses.dataclass
class Card:
    holder: str
    card_number: str


class ApiKeys(TypedDict):
    api_key: str


@pytest.mark.parametrize(
    ("asked", "named"),
    [(Login, "Login.password"), (Card, "Card.card_number"), (ApiKeys, "ApiKeys.api_key")],
)
async def test_a_secret_field_is_refused_when_the_tool_is_registered(asked: Any, named: str, sqlite_url: str) -> None:
    runtime = Elicitation(open_store(sqlite_url), request_state=RequestState(single_process=True))
    server = runtime.server("secrets")
    try:
        with pytest.raises(SecretField) as refused:

            @runtime.tool(asks=(bool, asked))
            async def sign_in(flow: Flow) -> str:
                return repr(await flow.ask("Sign in", asked))

        assert str(refused.value).startswith(f"{named} looks like a secret (its name ")
        assert refused.value.__notes__ == ["declared in asks= of tool 'sign_in'"]
        with pytest.raises(SecretField, match=re.escape(named)):

            @runtime.prompt(name="signed", asks=[asked])
            async def sign_in_prompt(flow: Flow) -> str:
                return "never registered"

        assert await server.list_tools() == []
        assert await server.list_prompts() == []
    finally:
        runtime.close()


async def test_an_unsupported_declared_ask_is_refused_at_registration_and_good_ones_register(sqlite_url: str) -> None:
    runtime = Elicitation(open_store(sqlite_url), request_state=RequestState(single_process=True))
    server = runtime.server("declared")
    try:
        with pytest.raises(UnsupportedField, match=r"Nested\.trip") as refused:

            @runtime.tool(asks=[Nested])
            async def nested(flow: Flow) -> str:
                return "never registered"

        assert refused.value.__notes__ == ["declared in asks= of tool 'nested'"]

        @runtime.tool(asks=(bool, Trip, Contact, list[Region], {"eu": "Europe"}))
        async def fine(flow: Flow) -> str:
            return "registered"

        assert [tool.name for tool in await server.list_tools()] == ["fine"]
    finally:
        runtime.close()


# -- replay through the store, across instances ----------------------------------------------------------------


def instance(store_url: str, seen: list[Answer[Any]], *, crash: bool) -> Elicitation:
    runtime = Elicitation(open_store(store_url), request_state=RequestState(keys=[b"k" * 32]))
    runtime.server("instance")

    @runtime.tool()
    async def plan(flow: Flow, service: str) -> str:
        trip = await flow.ask(f"Trip for {service}?", Trip)
        seen.append(trip)
        if crash:
            raise RuntimeError("instance lost")
        return json.dumps(dataclasses.asdict(trip.data)) if isinstance(trip, Accepted) else "no"

    return runtime


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_another_instance_re_executing_the_body_gets_the_same_typed_answer(store_url: str, era: EraName) -> None:
    """The first instance records the answer and fails; a second one on the same store re-runs the body."""
    seen: list[Answer[Any]] = []
    first = instance(store_url, seen, crash=True)
    try:
        answers = {"trip": scripted.accept(city="Bergen", seats=2)}
        crashed = await Harness(first, era=era).call("plan", {"service": "api"}, answers=answers)
        assert crashed.error == "Error executing tool plan"
    finally:
        first.close()
    assert len(crashed.asked) == 1
    second = instance(store_url, seen, crash=False)
    try:
        resumed = await Harness(second, era=era).call("plan", {"service": "api"})
    finally:
        second.close()
    assert json.loads(resumed.text) == {"city": "Bergen", "seats": 2, "region": None}
    assert resumed.asked == ()
    assert seen == [Accepted(Trip("Bergen", 2))] * 2


@pytest.mark.elicit_eras("2026-07-28")
async def test_a_modern_client_without_elicitation_gets_32021_for_a_one_value_ask(elicit: Harness) -> None:
    with pytest.raises(MCPError) as raised:
        await elicit.call("confirm", modes=())
    assert raised.value.code == -32021
    assert elicit.decision("yes_no").requested_schema == {
        "type": "object",
        "properties": {"value": {"type": "boolean", "title": "Delete the 3 matching files?"}},
        "required": ["value"],
    }
