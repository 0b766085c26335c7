"""The reference server's scenarios, in process on both eras (`mcp-elicit serve` as a process: tests/system)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitResult

from mcp_elicit.reference import Workspace, build_reference_server
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import open_store
from tests.helpers.person import Person, accept
from tests.helpers.results import text

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.open(tmp_path / "workspace")


@pytest.fixture
def elicitation(store_url: str, workspace: Workspace) -> Iterator[Elicitation]:
    runtime = Elicitation(open_store(store_url), request_state=RequestState(single_process=True))
    build_reference_server(runtime, workspace)
    yield runtime
    runtime.close()


async def call(runtime: Elicitation, era: str, person: Person, tool: str, **arguments: object) -> CallToolResult:
    async with Client(runtime.mcp_server, mode=era, elicitation_callback=person) as client:
        return await client.call_tool(tool, dict(arguments))


def deployed(workspace: Workspace, environment: str) -> str:
    return (workspace.root / "deployed" / environment / "payments" / "app.py").read_text()


@pytest.mark.parametrize("era", ERAS)
async def test_deploy_shows_the_exact_scope_and_applies_once(
    elicitation: Elicitation, workspace: Workspace, era: str
) -> None:
    person = Person([accept(approve=True, note="after the 2pm freeze")])
    result = await call(elicitation, era, person, "deploy", service="payments")
    assert text(result) == ("Deployed payments to staging and production (4 file changes). Note: after the 2pm freeze")
    [question] = person.asked
    assert question.message == (
        "Deploy payments to production? The change scope is:\n"
        "- staging: add migrations.sql; change app.py\n"
        "- production: add migrations.sql; change app.py"
    )
    assert deployed(workspace, "production") == deployed(workspace, "staging") == "VERSION = '2.4.0'\n"
    again = await call(elicitation, era, Person(), "deploy", service="payments")
    assert text(again) == text(result)


@pytest.mark.parametrize("era", ERAS)
async def test_declined_production_offers_staging_only(
    elicitation: Elicitation, workspace: Workspace, era: str
) -> None:
    person = Person([ElicitResult(action="decline"), accept(deploy_staging=True)])
    result = await call(elicitation, era, person, "deploy", service="payments")
    assert text(result) == "Deployed payments to staging only (2 file changes); production unchanged."
    assert person.asked[1].message.startswith("Production was declined. Deploy payments to staging only?")
    assert deployed(workspace, "staging") == "VERSION = '2.4.0'\n"
    assert deployed(workspace, "production") == "VERSION = '2.3.1'\n"


@pytest.mark.parametrize("era", ERAS)
async def test_cancelled_deploy_changes_nothing(elicitation: Elicitation, workspace: Workspace, era: str) -> None:
    result = await call(elicitation, era, Person([ElicitResult(action="cancel")]), "deploy", service="payments")
    assert text(result) == "Nothing changed: the production approval for payments was cancelled."
    assert deployed(workspace, "staging") == deployed(workspace, "production") == "VERSION = '2.3.1'\n"


async def test_deploy_asks_nothing_when_production_is_untouched(elicitation: Elicitation, workspace: Workspace) -> None:
    workspace.deploy("payments", "production")
    person = Person()
    result = await call(elicitation, "2026-07-28", person, "deploy", service="payments")
    assert text(result).startswith("Deployed payments to staging (2 file changes)")
    assert person.asked == []


async def test_unknown_service_is_a_tool_error(elicitation: Elicitation) -> None:
    result = await call(elicitation, "2026-07-28", Person(), "deploy", service="nope")
    assert result.is_error


@pytest.mark.parametrize("era", ERAS)
async def test_procure_offers_only_what_fits_the_budget(
    elicitation: Elicitation, workspace: Workspace, era: str
) -> None:
    person = Person([accept(offer="LAP-14-B")])
    result = await call(elicitation, era, person, "procure", item="laptop", budget=1500)
    assert text(result).startswith("Ordered 14-inch laptop, 32 GB from Contoso for 1490.00")
    [question] = person.asked
    assert isinstance(question, ElicitRequestFormParams)
    assert question.requested_schema["properties"]["offer"]["oneOf"] == [
        {"const": "LAP-14-A", "title": "14-inch laptop, 16 GB from Northwind, 1149.00"},
        {"const": "LAP-14-B", "title": "14-inch laptop, 32 GB from Contoso, 1490.00"},
    ]
    assert len(workspace.orders()) == 1
    nothing = await call(elicitation, era, Person(), "procure", item="laptop", budget=100)
    assert text(nothing) == "No offer for 'laptop' fits a budget of 100.00."


@pytest.mark.parametrize("era", ERAS)
async def test_delete_files_counts_shows_and_deletes_once(
    elicitation: Elicitation, workspace: Workspace, era: str
) -> None:
    person = Person([accept(delete=True)])
    result = await call(elicitation, era, person, "delete_files", pattern="logs/*.log")
    assert text(result) == "Deleted 5 file(s) (5.3 kB)."
    message = person.asked[0].message
    assert message.startswith("Delete these 5 file(s), 5.3 kB in all?")
    assert "- logs/app-2026-11-01.log (360 B)" in message
    assert sorted(p.name for p in (workspace.root / "files").rglob("*") if p.is_file()) == ["keep.txt"]


@pytest.mark.parametrize("era", ERAS)
async def test_missing_parameter_is_asked_only_when_absent(elicitation: Elicitation, era: str) -> None:
    asked = Person([accept(priority="high")])
    assert text(await call(elicitation, era, asked, "create_ticket", title="Printer on fire")).startswith(
        "Created ticket"
    )
    assert len(asked.asked) == 1
    silent = Person()
    result = await call(elicitation, era, silent, "create_ticket", title="Coffee", priority="low")
    assert "(low): Coffee" in text(result)
    assert silent.asked == []
