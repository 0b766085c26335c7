"""A gated tool runs only once its exact call is approved: approve, edit, reject, respond, dismiss, on every era.

The approval is a form decision of the call's operation (key `@approval`): the scripted person answers it as
any question, through the era's own path (`elicitation/create` on the live call, a 2026-07-28 round). What runs
is recorded by the tool itself (`Ledger`), so "nothing ran" and "ran once, with these arguments" are facts of
the test, not of the result's text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, cast

import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, InputResponse, RequestParamsMeta
from pydantic import Field, SecretStr

import mcp_elicit.testing as scripted
from mcp_elicit import Elicitation, Fallback, Flow, Gate, GateRefused, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, NOTE_FIELD, REJECT_FIELD
from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.server import IDEMPOTENCY_META_KEY, REPLAYED_META_KEY, Timing
from mcp_elicit.store import open_store
from mcp_elicit.testing import Harness
from tests.helpers.ledger import Ledger
from tests.helpers.person import Person, accept
from tests.helpers.results import unwrap

pytestmark = pytest.mark.anyio
MODERN = "2026-07-28"


class Currency(StrEnum):
    EUR = "EUR"
    USD = "USD"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def elicit_app(elicit_store_url: str, ledger: Ledger) -> Iterator[Elicitation]:
    runtime = Elicitation(open_store(elicit_store_url), request_state=RequestState(single_process=True))
    runtime.server("gated")

    @runtime.tool(gate=Gate(editable=["amount", "currency", "memo"], when=lambda args: args["amount"] >= 100))
    async def transfer(
        flow: Flow,
        account: str,
        amount: Annotated[int, Field(ge=1, le=10_000)],
        currency: Currency = Currency.EUR,
        memo: Annotated[str, Field(pattern=r"^[\w ]*$")] = "",
        api_key: str = "",
    ) -> str:
        ledger.ran.append({"account": account, "amount": amount, "currency": currency, "memo": memo})
        assert flow.arguments["amount"] == amount, "flow.arguments are what the body runs with"
        return f"sent {amount} {currency.value} to {account}"

    @runtime.tool(gate=Gate(when=lambda args: 1 / 0))
    async def wipe(flow: Flow, disk: str) -> str:
        ledger.ran.append({"disk": disk})
        return f"wiped {disk}"

    yield runtime
    runtime.close()


def approve(**content: Any) -> dict[str, scripted.Reply]:
    return {APPROVAL_KEY: scripted.accept(content)}


async def test_an_approved_call_runs_once_with_the_arguments_it_was_shown(elicit: Harness, ledger: Ledger) -> None:
    called = await elicit.call(
        "transfer", {"account": "acme", "amount": 500, "api_key": "sk_live_51HfakeKEY0123456789"}, answers=approve()
    )
    assert called.text == "sent 500 EUR to acme"
    assert ledger.ran == [{"account": "acme", "amount": 500, "currency": Currency.EUR, "memo": ""}]
    [asked] = called.asked
    assert asked.key == APPROVAL_KEY
    assert asked.message.splitlines() == [
        "Approve this call?",
        "",
        "Tool: transfer",
        'account: "acme"',
        "amount: 500",
        'currency: "EUR"',
        'memo: ""',
        "api_key: [redacted]",
        "",
        "You may change amount, currency, memo before approving.",
    ]
    assert asked.schema is not None
    properties = asked.schema["properties"]
    assert list(properties) == ["amount", "currency", "memo", NOTE_FIELD, REJECT_FIELD]
    assert properties["amount"] == {
        "type": "integer",
        "title": "Amount",
        "minimum": 1,
        "maximum": 10_000,
        "default": 500,
    }
    assert properties["currency"]["enum"] == ["EUR", "USD"] and properties["currency"]["default"] == "EUR"
    assert "required" not in asked.schema, "an editable field left out means unchanged"
    [decision] = elicit.decisions()
    assert decision.status is DecisionStatus.ACCEPTED and "sk_live" not in decision.about
    assert decision.about.startswith('transfer(account="acme", amount=500')
    assert len(called.result.content) == 1, "a plain approval tells the model nothing more"


async def test_an_edit_runs_the_edited_arguments_and_the_model_is_told(elicit: Harness, ledger: Ledger) -> None:
    called = await elicit.call(
        "transfer", {"account": "acme", "amount": 500}, answers=approve(amount=250, currency="USD", memo="")
    )
    told, result = (block.text for block in called.result.content)  # type: ignore[union-attr]
    assert result == "sent 250 USD to acme"
    assert told == (
        'The user changed the arguments before approving (amount: 500 → 250; currency: "EUR" → "USD"); '
        "the tool ran with the changes."
    )
    assert ledger.ran == [{"account": "acme", "amount": 250, "currency": Currency.USD, "memo": ""}]


async def test_an_edit_the_tool_refuses_is_asked_again_naming_the_problem(elicit: Harness, ledger: Ledger) -> None:
    # The form cannot show the memo's pattern; the tool's own validation still holds the edit to it. An era asks
    # again on the live call or under the next key (`@approval#2`); either way the person is told why.
    edits = [scripted.accept({"memo": "rent!!"}), scripted.accept({"memo": "rent"})]
    script = scripted.Script({APPROVAL_KEY: edits, f"{APPROVAL_KEY}#2": edits[1]})
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=script)
    assert called.result.content[-1].text == "sent 500 EUR to acme"  # type: ignore[union-attr]
    first, _ = called.asked
    assert first.schema is not None and "pattern" not in first.schema["properties"]["memo"]
    assert [run["memo"] for run in ledger.ran] == ["rent"]


async def test_the_person_asked_again_is_told_what_was_wrong_with_the_edit(elicit_app: Elicitation) -> None:
    person = Person([accept(memo="rent!!"), accept(memo="rent")])
    async with Client(elicit_app.mcp_server, mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("transfer", {"account": "acme", "amount": 500})
    assert not result.is_error
    first, again = (asked.message for asked in person.asked)
    assert again.startswith(first) and "memo: String should match pattern" in again.removeprefix(first)


async def test_a_rejection_runs_nothing_and_the_model_reads_the_note(elicit: Harness, ledger: Ledger) -> None:
    called = await elicit.call(
        "transfer", {"account": "acme", "amount": 500},
        answers=approve(**{REJECT_FIELD: True, NOTE_FIELD: "  Wrong account;\nuse acme-eu  "}),
    )  # fmt: skip
    assert called.error == "The user rejected this call; nothing ran. Note from the user: Wrong account; use acme-eu"
    assert ledger.ran == []
    assert elicit.operation(called).status is OperationStatus.FAILED


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (scripted.decline(), "The user rejected this call; nothing ran."),
        (scripted.cancel(), "dismissed without a decision; nothing ran. Calling the tool again asks again."),
    ],
    ids=["decline", "cancel"],
)
async def test_decline_rejects_and_cancel_decides_nothing(
    elicit: Harness, ledger: Ledger, reply: scripted.Reply, said: str
) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers={APPROVAL_KEY: reply})
    assert said in called.error and ledger.ran == []
    again = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    assert again.text == "sent 500 EUR to acme" and len(again.asked) == 1, "asked again: a new call, a new approval"
    assert len(ledger.ran) == 1


async def test_a_note_with_an_approval_reaches_the_model(elicit: Harness) -> None:
    called = await elicit.call(
        "transfer", {"account": "acme", "amount": 500}, answers=approve(approval_note="Last one today")
    )
    assert [block.text for block in called.result.content] == [  # type: ignore[union-attr]
        "Note from the user: Last one today",
        "sent 500 EUR to acme",
    ]


@pytest.mark.elicit_eras("2026-07-28")
async def test_when_decides_and_a_check_that_fails_asks(elicit: Harness, ledger: Ledger) -> None:
    small = await elicit.call("transfer", {"account": "acme", "amount": 20})
    assert small.text == "sent 20 EUR to acme" and small.asked == ()
    wiped = await elicit.call("wipe", {"disk": "/dev/sdb"}, answers=approve())
    assert wiped.text == "wiped /dev/sdb" and [q.key for q in wiped.asked] == [APPROVAL_KEY]


@pytest.mark.elicit_eras("2026-07-28")
async def test_an_ended_call_made_again_is_asked_again_not_replayed(elicit: Harness, ledger: Ledger) -> None:
    arguments = {"account": "acme", "amount": 500}
    first = await elicit.call("transfer", arguments, answers=approve(memo="rent"))
    second = await elicit.call("transfer", arguments, answers=approve())
    assert not second.replayed and len(second.asked) == 1 and second.operation_id != first.operation_id
    assert [run["memo"] for run in ledger.ran] == ["rent", ""]


def test_what_cannot_be_edited_is_refused_when_the_tool_is_registered(elicit_store_url: str) -> None:
    runtime = Elicitation(open_store(elicit_store_url), request_state=RequestState(single_process=True))
    runtime.server("refusals")

    async def body(
        flow: Flow, tags: list[str], note: str | None = None, password: str = "", approval_note: str = ""
    ) -> str:
        return "never"

    refusals = {
        "missing": "is not an argument of the tool",
        "tags": "only plain strings, numbers, integers, booleans and string enums",
        "note": "optional (it may be null)",
        "password": "looks like a secret",
        "approval_note": "the approval form's own field",
    }
    try:
        for name, said in refusals.items():
            with pytest.raises(GateRefused, match=re.escape(said)) as refused:
                runtime.tool(name=f"t_{name}", gate=Gate(editable=[name]))(body)
            assert f"tool 't_{name}': argument {name!r}" in str(refused.value)
        with pytest.raises(TypeError, match="not one string"):
            Gate(editable="amount")
        with pytest.raises(ValueError, match="positive TTL"):
            Gate(ttl=-Gate().ttl)
    finally:
        runtime.close()


# -- one approval per call, bound to its arguments (2026-07-28 rounds, driven by hand) ---------------------------


@pytest.fixture
def rounds(elicit_store_url: str, ledger: Ledger) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(elicit_store_url),
        request_state=RequestState(keys=[b"k" * 32]),
        timing=Timing(long_poll=timedelta(milliseconds=200)),
    )
    runtime.server("gated-rounds")

    @runtime.tool(gate=Gate(editable=["amount"]))
    async def transfer(flow: Flow, account: str, amount: int) -> str:
        ledger.ran.append({"account": account, "amount": amount})
        return f"sent {amount} to {account}"

    yield runtime
    runtime.close()


async def test_identical_calls_share_one_approval_and_a_round_of_other_arguments_is_refused(
    rounds: Elicitation, ledger: Ledger
) -> None:
    arguments = {"account": "acme", "amount": 500}
    async with Client(rounds.mcp_server, mode=MODERN, elicitation_callback=Person()) as client:
        first = await client.session.call_tool("transfer", arguments, allow_input_required=True)
        twin = await client.session.call_tool("transfer", arguments, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and isinstance(twin, InputRequiredResult)
        assert first.input_requests is not None and list(first.input_requests) == [APPROVAL_KEY]
        assert twin.input_requests is None, "the twin attached: the approval is out in the first call's round"
        approval: dict[str, InputResponse] = {APPROVAL_KEY: ElicitResult(action="accept", content={"amount": 300})}
        spare = await client.session.call_tool("transfer", arguments, allow_input_required=True)
        assert isinstance(spare, InputRequiredResult)
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.session.call_tool(
                "transfer", {"account": "acme", "amount": 9_000}, input_responses=approval,
                request_state=spare.request_state, allow_input_required=True,
            )  # fmt: skip
        refused = unwrap(raised.value)
        assert isinstance(refused, MCPError) and refused.code == -32602
        done = await client.session.call_tool(
            "transfer", arguments, input_responses=approval, request_state=first.request_state,
            allow_input_required=True,
        )  # fmt: skip
        again = await client.session.call_tool(
            "transfer", arguments, request_state=twin.request_state, allow_input_required=True
        )
    assert isinstance(done, CallToolResult) and isinstance(again, CallToolResult)
    assert [block.text for block in done.content][-1] == "sent 300 to acme"  # type: ignore[union-attr]
    assert again.content == done.content
    assert ledger.ran == [{"account": "acme", "amount": 300}], "approved once, run once, with the edit"
    assert [d.key for d in rounds.store.list_decisions(Operator())] == [APPROVAL_KEY]


async def test_the_same_idempotency_key_replays_what_ran_and_what_the_model_was_told(
    elicit_app: Elicitation, ledger: Ledger
) -> None:
    person = Person([accept(amount=300, approval_note="split the rest")])
    meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: "pay-1"})
    arguments = {"account": "acme", "amount": 500}
    async with Client(elicit_app.mcp_server, mode="legacy", elicitation_callback=person) as client:
        first = await client.call_tool("transfer", arguments, meta=meta)
        replayed = await client.call_tool("transfer", arguments, meta=meta)
    assert [block.text for block in first.content] == [  # type: ignore[union-attr]
        "The user changed the arguments before approving (amount: 500 → 300); the tool ran with the changes.",
        "Note from the user: split the rest",
        "sent 300 EUR to acme",
    ]
    assert replayed.content == first.content and replayed.meta is not None and REPLAYED_META_KEY in replayed.meta
    assert len(person.asked) == 1 and len(ledger.ran) == 1


# -- review fixes: who may approve, what runs, what is stored ----------------------------------------------------


def test_a_gate_refuses_the_arguments_fallback_and_an_async_when(elicit_store_url: str) -> None:
    runtime = Elicitation(open_store(elicit_store_url), request_state=RequestState(single_process=True))
    runtime.server("refusals")
    try:
        with pytest.raises(GateRefused, match="the model would approve its own call"):
            runtime.tool(gate=Gate(), fallback=Fallback.ARGUMENTS)

        async def later(arguments: Any) -> bool:
            return True

        with pytest.raises(TypeError, match="not an async one"):
            Gate(when=later)
    finally:
        runtime.close()


@pytest.fixture
def careful(elicit_store_url: str, ledger: Ledger) -> Iterator[tuple[Elicitation, dict[str, bool]]]:
    runtime = Elicitation(
        open_store(elicit_store_url),
        request_state=RequestState(keys=[b"k" * 32]),
        timing=Timing(long_poll=timedelta(milliseconds=200)),
    )
    runtime.server("careful")
    switch = {"gated": True}

    @runtime.tool(gate=Gate(editable=["callback", "amount"], when=lambda args: switch["gated"]))
    async def pay(flow: Flow, amount: int, callback: str, token: SecretStr) -> str:
        ledger.ran.append({"amount": amount, "token": token.get_secret_value(), "callback": callback})
        if amount > 1000:
            raise ToolError("the bank refused the amount")
        return f"paid {amount}"

    yield runtime, switch
    runtime.close()


CALLBACK = "https://pay.example/done?code=one-time-4711"


async def test_a_twin_waits_on_the_approval_even_when_when_now_says_no(
    careful: tuple[Elicitation, dict[str, bool]], ledger: Ledger
) -> None:
    runtime, switch = careful
    arguments = {"amount": 500, "callback": CALLBACK, "token": "s3cret"}
    async with Client(runtime.mcp_server, mode=MODERN, elicitation_callback=Person()) as client:
        first = await client.session.call_tool("pay", arguments, allow_input_required=True)
        switch["gated"] = False
        twin = await client.session.call_tool("pay", arguments, allow_input_required=True)
        stateless: dict[str, InputResponse] = {APPROVAL_KEY: ElicitResult(action="accept", content={})}
        unproven = await client.session.call_tool(
            "pay", arguments, input_responses=stateless, allow_input_required=True
        )
    assert isinstance(first, InputRequiredResult) and isinstance(twin, InputRequiredResult)
    assert isinstance(unproven, InputRequiredResult), "an approval sent without a round was never shown to anyone"
    assert ledger.ran == [], "nothing ran unapproved"
    [approval] = runtime.store.list_decisions(Operator())
    assert approval.status is DecisionStatus.REQUESTED


async def test_what_runs_keeps_the_calls_own_values_and_the_store_keeps_no_raw_one(
    careful: tuple[Elicitation, dict[str, bool]], ledger: Ledger
) -> None:
    runtime, _ = careful
    person = Person([accept(amount=700), accept(amount=5000)])
    async with Client(runtime.mcp_server, mode="legacy", elicitation_callback=person) as client:
        paid = await client.call_tool("pay", {"amount": 500, "callback": CALLBACK, "token": "s3cret"})
        failed = await client.call_tool("pay", {"amount": 900, "callback": CALLBACK, "token": "s3cret"})
    assert [run["token"] for run in ledger.ran] == ["s3cret", "s3cret"], "not the SecretStr's JSON '**********'"
    assert [block.text for block in paid.content][-1] == "paid 700"  # type: ignore[union-attr]
    assert failed.is_error and failed.content[0].text.endswith(  # type: ignore[union-attr]
        "(amount: 900 → 5000); the tool ran with the changes. the bank refused the amount"
    ), "the model learns that the person's change is what failed"
    schema = person.asked[0].requested_schema  # type: ignore[union-attr]
    assert "default" not in schema["properties"]["callback"], "a value the redaction rule hides is not prefilled"
    assert schema["properties"]["amount"]["default"] == 500
    for decision in runtime.store.list_decisions(Operator()):
        stored = json.dumps([decision.message, decision.requested_schema, decision.content, decision.about])
        assert "one-time-4711" not in stored and "s3cret" not in stored
