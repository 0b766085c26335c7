"""The reference server's scenarios, in process on every era (`mcp-elicit serve` as a process: tests/system)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_elicit.reference import Workspace, build_reference_server
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import open_store
from mcp_elicit.testing import Harness, accept, cancel, decline

pytestmark = pytest.mark.anyio


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.open(tmp_path / "workspace")


@pytest.fixture
def elicit_app(store_url: str, workspace: Workspace) -> Iterator[Elicitation]:
    runtime = Elicitation(open_store(store_url), request_state=RequestState(single_process=True))
    build_reference_server(runtime, workspace)
    yield runtime
    runtime.close()


def deployed(workspace: Workspace, environment: str) -> str:
    return (workspace.root / "deployed" / environment / "payments" / "app.py").read_text()


async def test_deploy_shows_the_exact_scope_and_applies_once(elicit: Harness, workspace: Workspace) -> None:
    called = await elicit.call(
        "deploy",
        {"service": "payments"},
        answers={"approve_production": accept(approve=True, note="after the 2pm freeze")},
    )
    assert called.text == "Deployed payments to staging and production (4 file changes). Note: after the 2pm freeze"
    [question] = called.asked
    assert question.message == (
        "Deploy payments to production? The change scope is:\n"
        "- staging: add migrations.sql; change app.py\n"
        "- production: add migrations.sql; change app.py"
    )
    assert deployed(workspace, "production") == deployed(workspace, "staging") == "VERSION = '2.4.0'\n"
    again = await elicit.call("deploy", {"service": "payments"})
    assert again.text == called.text
    assert again.asked == ()


async def test_declined_production_offers_staging_only(elicit: Harness, workspace: Workspace) -> None:
    answers = {"approve_production": decline(), "staging_only": accept(deploy_staging=True)}
    called = await elicit.call("deploy", {"service": "payments"}, answers=answers)
    assert called.text == "Deployed payments to staging only (2 file changes); production unchanged."
    assert called.asked[1].message.startswith("Production was declined. Deploy payments to staging only?")
    assert deployed(workspace, "staging") == "VERSION = '2.4.0'\n"
    assert deployed(workspace, "production") == "VERSION = '2.3.1'\n"


async def test_cancelled_deploy_changes_nothing(elicit: Harness, workspace: Workspace) -> None:
    called = await elicit.call("deploy", {"service": "payments"}, answers={"approve_production": cancel()})
    assert called.text == "Nothing changed: the production approval for payments was cancelled."
    assert deployed(workspace, "staging") == deployed(workspace, "production") == "VERSION = '2.3.1'\n"


@pytest.mark.elicit_eras("2026-07-28")
async def test_deploy_asks_nothing_when_production_is_untouched(elicit: Harness, workspace: Workspace) -> None:
    workspace.deploy("payments", "production")
    called = await elicit.call("deploy", {"service": "payments"})
    assert called.text.startswith("Deployed payments to staging (2 file changes)")
    assert called.asked == ()


@pytest.mark.elicit_eras("2026-07-28")
async def test_unknown_service_is_a_tool_error(elicit: Harness) -> None:
    assert (await elicit.call("deploy", {"service": "nope"})).error


async def test_procure_offers_only_what_fits_the_budget(elicit: Harness, workspace: Workspace) -> None:
    called = await elicit.call(
        "procure", {"item": "laptop", "budget": 1500}, answers={"choose_offer": accept(offer="LAP-14-B")}
    )
    assert called.text.startswith("Ordered 14-inch laptop, 32 GB from Contoso for 1490.00")
    [question] = called.asked
    assert question.schema is not None
    assert question.schema["properties"]["offer"]["oneOf"] == [
        {"const": "LAP-14-A", "title": "14-inch laptop, 16 GB from Northwind, 1149.00"},
        {"const": "LAP-14-B", "title": "14-inch laptop, 32 GB from Contoso, 1490.00"},
    ]
    assert len(workspace.orders()) == 1
    nothing = await elicit.call("procure", {"item": "laptop", "budget": 100})
    assert nothing.text == "No offer for 'laptop' fits a budget of 100.00."


async def test_delete_files_counts_shows_and_deletes_once(elicit: Harness, workspace: Workspace) -> None:
    called = await elicit.call(
        "delete_files", {"pattern": "logs/*.log"}, answers={"confirm_delete": accept(delete=True)}
    )
    assert called.text == "Deleted 5 file(s) (5.3 kB)."
    message = called.asked[0].message
    assert message.startswith("Delete these 5 file(s), 5.3 kB in all?")
    assert "- logs/app-2026-11-01.log (360 B)" in message
    assert sorted(p.name for p in (workspace.root / "files").rglob("*") if p.is_file()) == ["keep.txt"]


async def test_missing_parameter_is_asked_only_when_absent(elicit: Harness) -> None:
    asked = await elicit.call(
        "create_ticket", {"title": "Printer on fire"}, answers={"priority": accept(priority="high")}
    )
    assert asked.text.startswith("Created ticket")
    assert len(asked.asked) == 1
    silent = await elicit.call("create_ticket", {"title": "Coffee", "priority": "low"})
    assert "(low): Coffee" in silent.text
    assert silent.asked == ()
