"""Telemetry and logging as a process sets them up, a process each (so this tier, not the runtime one).

A fresh interpreter: the core runs on the OpenTelemetry API alone, and a meter provider without a tracer
provider still counts. `mcp-elicit serve` over stdio: JSON log lines naming the operation, never an argument.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent

from mcp_elicit.server import REPLAYED_META_KEY

pytestmark = pytest.mark.anyio


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def _run_script(script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter with no OTEL_ settings, so what the process sets up is all it has."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, env=environment
    )


def test_the_core_imports_the_api_only_and_runs_without_an_sdk(tmp_path: Path) -> None:
    script = f"""
import sys
import anyio
from mcp import Client
import mcp_elicit.server
from mcp_elicit.server import Elicitation, Flow, RequestState
from opentelemetry import trace

runtime = Elicitation("sqlite://{tmp_path / "bare.db"}", request_state=RequestState(single_process=True))
server = runtime.server("bare")

@runtime.tool()
async def hello(flow: Flow) -> str:
    return await flow.step("greet", lambda: "hello")

async def main() -> str:
    async with Client(server) as client:
        result = await client.call_tool("hello", {{}})
    return result.content[0].text

print(anyio.run(main))
print(type(trace.get_tracer_provider()).__name__)
print(sorted(name for name in sys.modules if name.startswith("opentelemetry.sdk")))
"""
    ran = _run_script(script)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["hello", "ProxyTracerProvider", "[]"]


def test_a_meter_provider_without_a_tracer_provider_still_counts_a_lost_compare_and_set(tmp_path: Path) -> None:
    """Spans are skipped when no SDK records them; the conflict metric is not."""
    script = f"""
from datetime import timedelta
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from mcp_elicit.model import OperationStatus, Principal, new_operation, request_digest
from mcp_elicit.store import OperationConflict, open_store, utc_now
from mcp_elicit.telemetry.store import install

install()  # a program using the store alone installs its telemetry itself
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
store = open_store("sqlite://{tmp_path / "metrics.db"}")
alice = Principal("alice", "client-a")
digest = request_digest("tools/call", {{"name": "deploy", "arguments": {{}}}})
hour = timedelta(hours=1)
opened = store.create_operation(
    new_operation(alice, method="tools/call", target="deploy", request_digest=digest, now=utc_now(), ttl=hour)
)
store.finish_operation(opened, OperationStatus.COMPLETED, caller=alice, result="done")
try:
    store.finish_operation(opened, OperationStatus.FAILED, caller=alice)
except OperationConflict:
    print("lost")
counted = [
    (dict(point.attributes), point.value)
    for resource in reader.get_metrics_data().resource_metrics
    for scope in resource.scope_metrics
    for metric in scope.metrics
    if metric.name == "mcp_elicit.conflicts"
    for point in metric.data.data_points
]
print(counted)
print(type(trace.get_tracer_provider()).__name__)
"""
    ran = _run_script(script)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["lost", "[({'mcp_elicit.subject': 'operation'}, 1)]", "ProxyTracerProvider"]


@pytest.mark.parametrize("how", ["option", "environment"])
async def test_serve_logs_json_lines_carrying_the_operation_id(tmp_path: Path, how: str) -> None:
    store_url = f"sqlite://{tmp_path / 'served.db'}"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    arguments = ["-m", "mcp_elicit", "serve", "--store", store_url, "--workspace", str(tmp_path / "ws")]
    if how == "option":
        arguments += ["--log-format", "json"]
    else:
        environment["MCP_ELICIT_LOG_FORMAT"] = "json"
    server = StdioServerParameters(command=sys.executable, args=arguments, env=environment)
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        async with Client(stdio_client(server, errlog=log), mode="2026-07-28") as client:
            ticket = {"title": "Rotate keys", "priority": "low"}
            first = await client.call_tool("create_ticket", ticket)
            again = await client.call_tool("create_ticket", ticket)
    assert text(first) == text(again)
    lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    assert lines, "serve logged nothing"
    records = [json.loads(line) for line in lines]
    assert all({"time", "level", "logger", "message"} <= set(record) for record in records)
    assert again.meta is not None
    operation_id = again.meta[REPLAYED_META_KEY]["operationId"]
    replayed = [r for r in records if r["message"].startswith("replaying the recorded result")]
    assert [r.get("operation_id") for r in replayed] == [operation_id]
    assert replayed[0]["method"] == "tools/call" and replayed[0]["target"] == "create_ticket"
    ends = [r for r in records if r["logger"] == "mcp_elicit.telemetry.calls"]
    assert [(r["message"].split(" ended: ")[0], r["outcome"], r["era"]) for r in ends] == [
        ("tools/call create_ticket", "result", "mrtr"),
        ("tools/call create_ticket", "replayed", "mrtr"),
    ], "one line per finished call, with no SDK recording spans"
    assert all(r["operation_id"] == operation_id and r["duration_ms"] >= 0 for r in ends)
    assert all((r["method"], r["target"]) == ("tools/call", "create_ticket") for r in ends)
    assert not any("Rotate keys" in line for line in lines)
