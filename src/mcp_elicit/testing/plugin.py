"""The pytest plugin: fixtures for testing tools built on `Elicitation`, every test run on every protocol era.

Registered through the `pytest11` entry point `mcp_elicit`, so installing mcp-elicit is enough
(`-p no:mcp_elicit` turns it off). One tool body must work on every era, so a test that uses `elicit` (or
`elicit_era`) runs once per era by default; `@pytest.mark.elicit_eras("2025-11-25", "2026-07-28")` narrows
that where an era cannot do what the test needs (2025-06-18 has no URL mode).

- `elicit_app`: yours to define, the `Elicitation` under test with its tools registered; build it on
  `elicit_store_url` and `elicit_clock` so that the test owns its records and its time.
- `elicit`: a `Harness` calling `elicit_app` on the test's era.
- `elicit_server`: what `elicit` calls; by default (None) the `MCPServer` of `elicit_app.server(...)`.
  Override it to return the FastMCP of `FastMCPFlows(elicit_app).server(...)`, or a lowlevel `Server` whose
  tools run through `elicit_app.run_tool`.
- `elicit_era`: that era.
- `elicit_clock`: a `ControlledClock`, for `Elicitation(..., clock=elicit_clock)`.
- `elicit_store_url`: a SQLite store file of the test's own, under `tmp_path`.

The harness is async: mark the tests `@pytest.mark.anyio` (the anyio pytest plugin comes with the SDK's
anyio) and run them on asyncio (an `anyio_backend` fixture returning `"asyncio"`), the loop the runtime uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_elicit.server import Elicitation
from mcp_elicit.testing.clock import ControlledClock
from mcp_elicit.testing.harness import ERAS, EraName, Harness, ServerUnderTest

MARKER = "elicit_eras"
ERA_FIXTURE = "elicit_era"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*eras): run an elicit test on these protocol eras only (default: {', '.join(ERAS)})"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One run per era for each test that reaches `elicit_era`, unless the test parametrizes it itself."""
    if ERA_FIXTURE not in metafunc.fixturenames:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        if ERA_FIXTURE in _argnames(marker.args[0] if marker.args else marker.kwargs.get("argnames", ())):
            return
    eras = _marked_eras(metafunc)
    metafunc.parametrize(ERA_FIXTURE, eras, indirect=True, ids=eras)


def _argnames(names: Any) -> list[str]:
    if isinstance(names, str):
        return [name.strip() for name in names.split(",")]
    return [str(name) for name in names]


def _marked_eras(metafunc: pytest.Metafunc) -> list[str]:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return list(ERAS)
    eras = [str(era) for era in marker.args]
    unknown = [era for era in eras if era not in ERAS]
    if marker.kwargs or not eras or unknown or len(set(eras)) != len(eras):
        pytest.fail(
            f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER}(...) takes one or more distinct eras of "
            f"{', '.join(ERAS)}; got {', '.join(map(repr, marker.args)) or 'none'}"
            + (f" and keywords {', '.join(marker.kwargs)}" if marker.kwargs else ""),
            pytrace=False,
        )
    return eras


@pytest.fixture
def elicit_era(request: pytest.FixtureRequest) -> EraName:
    """The protocol era of this run (the test runs once per era: see the `elicit_eras` marker)."""
    era: EraName = getattr(request, "param", ERAS[-1])
    return era


@pytest.fixture
def elicit_clock() -> ControlledClock:
    """A clock the test moves forward (`elicit_clock.advance(timedelta(minutes=20))`); pass it to the app."""
    return ControlledClock()


@pytest.fixture
def elicit_store_url(tmp_path: Path) -> str:
    """A fresh SQLite store of this test's own: `Elicitation(elicit_store_url, ...)`."""
    return f"sqlite://{tmp_path / 'elicit.db'}"


@pytest.fixture
def elicit_app() -> Elicitation:
    """Yours to override: the `Elicitation` under test, its server built and its tools registered."""
    pytest.fail(
        "define a fixture named elicit_app that returns your Elicitation with its tools registered, e.g.\n"
        "    @pytest.fixture\n"
        "    def elicit_app(elicit_store_url, elicit_clock):\n"
        "        app = Elicitation(\n"
        "            elicit_store_url, request_state=RequestState(single_process=True), clock=elicit_clock\n"
        "        )\n"
        "        app.server('my-server')\n"
        "        register_my_tools(app)\n"
        "        yield app\n"
        "        app.close()",
        pytrace=False,
    )


@pytest.fixture
def elicit_server() -> ServerUnderTest | None:
    """What `elicit` calls: None is the `MCPServer` of `elicit_app.server(...)`; override it to return the FastMCP
    of `FastMCPFlows(elicit_app).server(...)` or a lowlevel `Server`."""
    return None


@pytest.fixture
def elicit(elicit_app: Any, elicit_server: ServerUnderTest | None, elicit_era: EraName) -> Harness:
    """A `Harness` calling `elicit_app`'s tools in process on this run's era."""
    if not isinstance(elicit_app, Elicitation):
        raise TypeError(f"the elicit_app fixture must return an Elicitation, not {type(elicit_app).__name__}")
    return Harness(elicit_app, era=elicit_era, server=elicit_server)
