"""`mcp-elicit serve` as a real stdio subprocess, on both eras: the reference server as a host starts it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from mcp_elicit.model import Operator
from mcp_elicit.store import open_store
from tests.helpers.person import Person, accept
from tests.helpers.results import text

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]


@pytest.mark.parametrize("era", ERAS)
async def test_serve_runs_as_a_real_stdio_subprocess(tmp_path: Path, era: str) -> None:
    store = f"sqlite://{tmp_path / 'served.db'}"
    parameters = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_elicit", "serve", "--store", store, "--workspace", str(tmp_path / "ws")],
    )
    person = Person([accept(priority="normal")])
    async with Client(parameters, mode=era, elicitation_callback=person) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"deploy", "procure", "delete_files", "create_ticket"} <= tools
        result = await client.call_tool("create_ticket", {"title": "Rotate keys"})
    assert "(normal): Rotate keys" in text(result)
    served = open_store(store)
    try:
        [decision] = served.list_decisions(Operator())
        assert decision.key == "priority"
        assert decision.principal_id == "local-user"
    finally:
        served.close()
