"""Testing your own tools: run an `Elicitation`-backed server in process, script the person, move the clock.

    from mcp_elicit.testing import Harness, accept

    async def test_deploy(elicit: Harness) -> None:
        called = await elicit.call("deploy", {"service": "api"}, answers={"approve": accept(approve=True)})
        assert called.text == "deployed"
        elicit.assert_asked_once("approve")

The pytest plugin (`mcp_elicit.testing.plugin`, registered as the `mcp_elicit` plugin) provides the
fixtures: `elicit` (a `Harness` on `elicit_app`, your fixture returning your `Elicitation`), run once per
era unless `@pytest.mark.elicit_eras(...)` narrows them, `elicit_server` (your FastMCP of `FastMCPFlows`,
when the tools are served by FastMCP), `elicit_clock` and `elicit_store_url`. Everything
here works without pytest too: build a `Harness` yourself.
"""

from mcp_elicit.testing.clock import ControlledClock
from mcp_elicit.testing.harness import DEFAULT_TIMEOUT, ERAS, EraName, Harness, ServerUnderTest, ToolCall
from mcp_elicit.testing.person import Question
from mcp_elicit.testing.script import (
    Answers,
    Reply,
    Script,
    ScriptFailure,
    UnscriptedQuestion,
    UrlOutcome,
    accept,
    cancel,
    consent,
    decline,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "ERAS",
    "Answers",
    "ControlledClock",
    "EraName",
    "Harness",
    "Question",
    "Reply",
    "Script",
    "ScriptFailure",
    "ServerUnderTest",
    "ToolCall",
    "UnscriptedQuestion",
    "UrlOutcome",
    "accept",
    "cancel",
    "consent",
    "decline",
]
