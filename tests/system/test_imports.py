"""Every module of the package imports on its own, and the layers point down: no import circle anywhere.

A circle hides while something else happens to import its modules in a working order; imported first, one
of its modules fails with "partially initialized module". So each module is imported first, alone: in a fork
of one interpreter that has forgotten every `mcp_elicit` module (third-party modules stay loaded, which keeps
it fast and cannot hide a circle of ours). Importing `a.b.c` imports `a`, then `a.b`, before `c`'s own code
runs, so `c` is imported in a fork of the fork that imported `a.b`: the state a fresh interpreter reaches at
that point, without running `a` and `a.b` again for each module below them.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import mcp_elicit

PACKAGE = Path(mcp_elicit.__file__).parent
NOT_IMPORTABLE = {"mcp_elicit.__main__"}
"""Runs the CLI when imported."""


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in NOT_IMPORTABLE:
            names.append(name)
    return names


def _fresh(script: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    # Not measured under COVERAGE=1: it only imports, which every other process measures, and importing each
    # module anew under the tracer made this the slowest test of the run.
    unmeasured = {name: value for name, value in os.environ.items() if name != "COVERAGE_PROCESS_CONFIG"}
    return subprocess.run(
        [sys.executable, "-c", script, *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=unmeasured,
    )


EACH_FIRST = """
import importlib, json, os, sys, traceback

def failed(name, error):
    os.write(1, (json.dumps({name: error}) + "\\n").encode())

def first(name, below):
    child = os.fork()
    if child == 0:
        status = 1
        try:
            try:
                importlib.import_module(name)
            except BaseException:
                failed(name, traceback.format_exc(limit=-3))
            else:
                for inner, further in below.items():
                    first(inner, further)
            status = 0
        finally:
            os._exit(status)
    status = os.waitpid(child, 0)[1]
    if status:
        failed(name, f"the fork importing it ended with wait status {status}")

names = json.loads(sys.argv[1])
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        pass
for loaded in [m for m in sys.modules if m == "mcp_elicit" or m.startswith("mcp_elicit.")]:
    del sys.modules[loaded]
tree = {}
for name in names:
    parts = name.split(".")
    node = tree
    for depth in range(1, len(parts) + 1):
        node = node.setdefault(".".join(parts[:depth]), {})
sys.stdout.flush()
for name, below in tree.items():
    first(name, below)
"""


def test_every_module_imports_first_and_alone() -> None:
    modules = _modules()
    assert "mcp_elicit.store._sql" in modules and "mcp_elicit.telemetry.store" in modules
    ran = _fresh(EACH_FIRST, json.dumps(modules))
    assert ran.returncode == 0, ran.stderr
    failed: dict[str, str] = {}
    for line in ran.stdout.splitlines():
        failed.update(json.loads(line))
    assert failed == {}, "\n".join(f"{name}:\n{error}" for name, error in failed.items())


def test_the_store_imports_no_telemetry_and_no_server() -> None:
    """Telemetry subscribes to the store from above (`mcp_elicit.store.hooks`); the store never reaches up."""
    ran = _fresh(
        "import json, sys, mcp_elicit.store, mcp_elicit.store.sqlite, mcp_elicit.store.postgres\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('mcp_elicit.', 'opentelemetry')))))"
    )
    assert ran.returncode == 0, ran.stderr
    loaded: list[str] = json.loads(ran.stdout)
    own = ("mcp_elicit.store", "mcp_elicit.model", "mcp_elicit._exports", "mcp_elicit.printable")  # pure leaves
    assert [m for m in loaded if m.startswith(own)] == loaded
    assert "mcp_elicit.store._sql" in loaded


def test_the_terminal_handler_and_the_url_review_load_no_mcp_sdk() -> None:
    """A host may take only the person's side (the terminal handler, the URL review) without paying for the SDK
    the connection classes need: `mcp_elicit.client` resolves its names on first use."""
    ran = _fresh(
        "import json, sys\n"
        "from mcp_elicit.client import TerminalHandler, review_url\n"
        "from mcp_elicit.client.handler import FormRequest\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    assert ran.returncode == 0, ran.stderr
    loaded = set(json.loads(ran.stdout))
    assert {"prompt_toolkit", "rich"} <= loaded
    assert loaded.isdisjoint({"mcp", "mcp_types", "httpx2", "starlette", "psycopg"}), sorted(loaded)


def test_task_code_imports_no_era_adapter() -> None:
    """Era adapters build on the task service; task code reads only the shared call types (`eras` itself and
    `eras.capabilities`), so the two never import each other's code."""
    shared = {"mcp_elicit.server.eras", "mcp_elicit.server.eras.capabilities"}
    reached: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / "server" / "tasks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mcp_elicit.server.eras"):
                reached.setdefault(path.name, set()).add(node.module)
    assert reached, "task code reads the shared call types"
    assert {name: modules - shared for name, modules in reached.items() if modules - shared} == {}


def test_the_tool_approval_wire_names_are_written_once_in_the_model() -> None:
    """The server and the client kit read the draft extension's identifiers and `_meta` keys from one place,
    `mcp_elicit.model.tool_approval`, so the two sides cannot drift apart."""
    from mcp_elicit.model import tool_approval

    names = {
        value
        for name, value in vars(tool_approval).items()
        if name.isupper() and isinstance(value, str) and ("/" in value or "-" in value)
    }
    assert tool_approval.TOOL_APPROVAL_EXTENSION in names and tool_approval.DISPOSITION_META in names
    written: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "model" / "tool_approval.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                written.setdefault(str(path.relative_to(PACKAGE)), set()).add(str(node.value))
    assert written == {}
