"""The wheel `python -m build` makes installs into a fresh virtual environment and works there: plain, and
with each extra, each in an environment of its own.

pip resolves and installs from a wheelhouse and nothing else: the wheel, and the distributions its
requirements reach packed from this (locked) environment (`tests.helpers.wheelhouse`), so an undeclared
dependency fails the install or the run. The plain install is a whole one. An extra's environment is new
and sees the plain one's packages below its own (as `--system-site-packages` would), so that pip installs
just what the extra adds, `pip install "mcp-elicit[EXTRA]"` as the README says, with the wheel itself out
of reach.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers.wheelhouse import FreshEnvironment, pack, reached, wheel_metadata

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("postgres", "fastmcp", "otel")
ONLY_WITH_AN_EXTRA = {"psycopg", "psycopg-binary", "psycopg-pool", "fastmcp", "opentelemetry-sdk"}
INSTALLED = """
import importlib.metadata as m, json
print(json.dumps(sorted(d.metadata["Name"].lower() for d in m.distributions())))
"""
EVERY_CORE_MODULE = """
import importlib, importlib.metadata as m, json, pkgutil, mcp_elicit

# Only with an extra (or under pytest, which loads the plugin): FastMCP's part, the PostgreSQL dialect.
optional = ("mcp_elicit.fastmcp", "mcp_elicit.store.postgres", "mcp_elicit.testing.plugin", "mcp_elicit.__main__")
names = [m.name for m in pkgutil.walk_packages(mcp_elicit.__path__, "mcp_elicit.") if not m.name.startswith(optional)]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": len(names), "mcp requires": m.requires("mcp")}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once per run of this module by the standard front end, with this environment's build backend."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    [built] = dist.glob("mcp_elicit-*.whl")
    return built


@pytest.fixture(scope="module")
def dependencies(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheelhouse of every distribution the wheel's requirements reach, with all its extras but the
    contributors' two, `docs` and `dev`."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    for distribution in reached(wheel_metadata(wheel)["Requires-Dist"], EXTRAS):
        pack(distribution, folder)
    return folder


@pytest.fixture(scope="module")
def plain(wheel: Path, dependencies: Path, tmp_path_factory: pytest.TempPathFactory) -> FreshEnvironment:
    environment = FreshEnvironment(tmp_path_factory.mktemp("plain") / "venv")
    environment.install(str(wheel), find_links=[dependencies])
    return environment


def installed(environment: FreshEnvironment) -> set[str]:
    return set(json.loads(environment.run("-c", INSTALLED)))


def with_extra(extra: str, plain: FreshEnvironment, dependencies: Path, tmp_path: Path) -> FreshEnvironment:
    """A new environment on top of the plain one, given the extra the way the README says."""
    environment = FreshEnvironment(tmp_path / extra, on_top_of=plain)
    said = environment.install(f"mcp-elicit[{extra}]", find_links=[dependencies])
    assert "mcp-elicit" not in said  # the plain install's, not found again
    return environment


def test_the_wheel_declares_the_extras_and_the_core_needs_none(wheel: Path) -> None:
    fields = wheel_metadata(wheel)
    assert set(fields["Provides-Extra"]) == {*EXTRAS, "docs", "dev"}
    core = {line.split(";")[0] for line in fields["Requires-Dist"] if "extra ==" not in line}
    assert not {name for name in ONLY_WITH_AN_EXTRA if any(line.startswith(name) for line in core)}
    assert not any(line.startswith(("httpx>", "httpx ", "httpx=")) for line in fields["Requires-Dist"])


def test_the_plain_wheel_runs_the_command_the_sqlite_store_and_every_core_module(
    plain: FreshEnvironment, tmp_path: Path
) -> None:
    assert plain.run("--version", command="mcp-elicit") == "mcp-elicit 0.1.0\n"
    store = f"sqlite://{tmp_path / 'plain.db'}"
    listed = plain.attempt("decisions", "ls", "--store", store, command="mcp-elicit")
    assert listed.returncode == 0 and f"No decisions in {store}." in listed.stderr, listed.stderr
    assert not installed(plain) & ONLY_WITH_AN_EXTRA
    imported = json.loads(plain.run("-c", EVERY_CORE_MODULE))
    assert imported["modules"] > 100
    # The OpenTelemetry API comes with the mcp SDK: spans are no-ops until an SDK (the otel extra) records them.
    assert any(line.startswith("opentelemetry-api") for line in imported["mcp requires"])


def test_without_its_extra_a_postgresql_url_is_one_line_naming_it(plain: FreshEnvironment) -> None:
    refused = plain.attempt("decisions", "ls", "--store", "postgresql://nobody:pw@127.0.0.1:1/x", command="mcp-elicit")
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        'error: a PostgreSQL store needs the postgres extra: pip install "mcp-elicit[postgres]" '
        "(No module named 'psycopg')"
    ]
    doctor = plain.attempt("doctor", "--store", "postgresql://nobody:pw@127.0.0.1:1/x", command="mcp-elicit")
    assert (
        'problem  store: a PostgreSQL store needs the postgres extra: pip install "mcp-elicit[postgres]" '
        "(No module named 'psycopg')\n"
    ) in doctor.stdout  # and nothing after it: the line says what to do
    fastmcp = plain.attempt("-c", "import mcp_elicit.fastmcp")
    assert fastmcp.stderr.splitlines()[-1] == (
        'ImportError: mcp_elicit.fastmcp needs the fastmcp extra: pip install "mcp-elicit[fastmcp]"'
    )


def test_the_postgres_extra_opens_a_postgresql_store(
    plain: FreshEnvironment, dependencies: Path, tmp_path: Path, pg_schema_url: str
) -> None:
    environment = with_extra("postgres", plain, dependencies, tmp_path)
    assert installed(environment) & ONLY_WITH_AN_EXTRA == {"psycopg", "psycopg-binary", "psycopg-pool"}
    listed = environment.attempt("-m", "mcp_elicit", "decisions", "ls", "--store", pg_schema_url)
    assert listed.returncode == 0 and "No decisions in postgresql://" in listed.stderr, listed.stderr


def test_the_fastmcp_extra_serves_flow_tools_on_fastmcp(
    plain: FreshEnvironment, dependencies: Path, tmp_path: Path
) -> None:
    environment = with_extra("fastmcp", plain, dependencies, tmp_path)
    assert installed(environment) & ONLY_WITH_AN_EXTRA == {"fastmcp"}
    listed = environment.run("-c", FASTMCP_SERVER, f"sqlite://{tmp_path / 'fastmcp.db'}")
    assert listed == "['greet']\n"


FASTMCP_SERVER = """
import asyncio, sys
from mcp_elicit.fastmcp import FastMCPFlows
from mcp_elicit.server import Elicitation, Flow, RequestState

flows = FastMCPFlows(Elicitation(sys.argv[1], request_state=RequestState(single_process=True)))
server = flows.server("packaged")

@flows.tool()
async def greet(flow: Flow, name: str) -> str:
    return f"hello {name}"

print([tool.name for tool in asyncio.run(server.list_tools())])
"""


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str]]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, self.headers.get("Content-Type", "")))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """An OTLP/HTTP collector on loopback that takes whatever is sent and keeps the path and content type."""
    received: list[tuple[str, str]] = []
    handler = type("Collector", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_otel_extra_exports_mcp_elicits_spans_over_otlp(
    plain: FreshEnvironment, dependencies: Path, tmp_path: Path, collector: tuple[str, list[tuple[str, str]]]
) -> None:
    environment = with_extra("otel", plain, dependencies, tmp_path)
    assert installed(environment) & ONLY_WITH_AN_EXTRA == {"opentelemetry-sdk"}
    endpoint, received = collector
    spans = environment.run("-c", OTLP_EXPORT, endpoint, f"sqlite://{tmp_path / 'otel.db'}")
    assert spans == "mcp_elicit.store.sweep\n"
    assert received == [("/v1/traces", "application/x-protobuf")]


OTLP_EXPORT = """
import sys
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_elicit.store import open_store
from mcp_elicit.telemetry import store as telemetry

kept = InMemorySpanExporter()
tracing = TracerProvider()
tracing.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
tracing.add_span_processor(SimpleSpanProcessor(kept))
trace.set_tracer_provider(tracing)
telemetry.install()
store = open_store(sys.argv[2])
store.sweep_expired()
store.close()
tracing.shutdown()
print(*(span.name for span in kept.get_finished_spans()), sep="\\n")
"""
