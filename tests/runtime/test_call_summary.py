"""What a call is about, stored with each of its questions: the tool and its arguments' summary, redacted.

The summary is rendered when the question is asked and is what the inbox, the decision page and `decisions`
show; the arguments themselves never reach the store (the operation keeps their digest). Both stores, both
paths an answer takes (the live call and rounds).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing

import pytest

import mcp_elicit.testing as scripted
from mcp_elicit.model import REDACTED, JSONObject, summarize_call
from mcp_elicit.model.summary import MAX_SUMMARY, MAX_VALUE
from mcp_elicit.server import Elicitation, Flow, RequestState
from mcp_elicit.store import open_store
from mcp_elicit.store.url import sqlite_path
from mcp_elicit.testing import Harness

pytestmark = pytest.mark.anyio

SECRET_KEY = "s3cr3t-from-the-model"
CODE = "one-time-code-4711"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
ARGUMENTS = {
    "account": "acme",
    "amount": 125,
    "api_key": SECRET_KEY,
    "callback": f"https://pay.example/done?code={CODE}",
    "note": f"forward {TOKEN} to finance",
    "options": {"urgent": True, "password": SECRET_KEY},
}


@pytest.fixture
def elicit_app(store_url: str) -> Iterator[Elicitation]:
    runtime = Elicitation(open_store(store_url), request_state=RequestState(single_process=True))
    runtime.server("call-summary")

    @runtime.tool()
    async def transfer(
        flow: Flow, account: str, amount: int, api_key: str, callback: str, note: str, options: dict[str, bool | str]
    ) -> str:
        sure = await flow.ask(f"Transfer {amount} from {account}?", bool, key="sure")
        where = await flow.ask("Which ledger?", {"main": "Main", "side": "Side"}, key="ledger")
        return f"{sure} {where}"

    yield runtime
    runtime.close()


@pytest.mark.elicit_eras("2025-11-25", "2026-07-28")
async def test_every_question_of_a_call_stores_what_it_is_about_redacted(elicit: Harness) -> None:
    await elicit.call(
        "transfer",
        ARGUMENTS,
        answers={"sure": scripted.accept({"value": True}), "ledger": scripted.accept({"value": "main"})},
    )
    about = (
        'transfer(account="acme", amount=125, api_key=[redacted], callback="https://pay.example/done?code=[redacted]", '
        'note="forward [redacted] to finance", options={"urgent": true, "password": "[redacted]"})'
    )
    assert [decision.about for decision in elicit.decisions()] == [about, about]


async def test_the_arguments_themselves_never_reach_the_store(sqlite_url: str) -> None:
    runtime = Elicitation(open_store(sqlite_url), request_state=RequestState(single_process=True))
    runtime.server("call-summary")

    @runtime.tool()
    async def transfer(flow: Flow, api_key: str, callback: str, note: str) -> str:
        return repr(await flow.ask("Go ahead?", bool, key="sure"))

    arguments = {"api_key": SECRET_KEY, "callback": ARGUMENTS["callback"], "note": ARGUMENTS["note"]}
    await Harness(runtime).call("transfer", arguments, answers={"sure": scripted.accept({"value": True})})
    runtime.close()
    with closing(sqlite3.connect(sqlite_path(sqlite_url))) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        cells = [str(cell) for table in tables for row in db.execute(f"SELECT * FROM {table}") for cell in row]
    assert any("transfer(" in cell for cell in cells), "the summary is stored"
    for raw in (SECRET_KEY, CODE, TOKEN):
        assert not any(raw in cell for cell in cells), raw


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "deploy()"),
        ({"service": "api", "dry_run": False, "replicas": None}, 'deploy(service="api", dry_run=false, replicas=null)'),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "deploy(Authorization=[redacted])"),
        ({"text": "right\u202eleft\nnext"}, 'deploy(text="right<U+202E>left\\nnext")'),
        ({"targets": ["eu", "us"]}, 'deploy(targets=["eu", "us"])'),
        (
            {"commit": "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39"},
            'deploy(commit="3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39")',
        ),
    ],
)
def test_a_summary_reads_as_a_call(arguments: JSONObject, expected: str) -> None:
    assert summarize_call("deploy", arguments) == expected


def test_a_long_call_is_shortened_per_value_and_in_all_and_says_so() -> None:
    summary = summarize_call("import_rows", {f"column_{n}": "x" * 100 for n in range(10)})
    assert len(summary) <= MAX_SUMMARY and summary.endswith(", …)")
    first = summary.removeprefix("import_rows(").split(", ")[0]
    assert first == 'column_0="' + "x" * (MAX_VALUE - 2) + "…"
    assert REDACTED not in summary
