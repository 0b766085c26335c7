"""Run `@modelcontextprotocol/conformance` against the adapter server and the kit's client, held to account.

Server side: the suite's own baseline mechanism (`--expected-failures`) decides each run: a failed check
that is not listed, or a listed check that passes, fails it. Its baseline has no spec versions and no
reasons, so the listed failures live in `expected-failures.json` with both, and each run gets the entries
of its version. The suite tolerates a listed check that no longer appears at all (renamed, or its scenario
gone); this runner does not, so a baseline cannot outlive the checks it names.

Client side: the suite's `client` command runs `conformance/client.py` (built only on the client kit)
against each scenario of `CLIENT_SCENARIOS` at the spec versions it applies to. There is no baseline: the
suite must exit 0, and every check it saved must be a success (or skipped, or informational).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SPEC_VERSIONS = ("2025-11-25", "2026-07-28")
FAILED = frozenset({"FAILURE", "WARNING"})
STATUSES = ("SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO")
RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")
STARTUP_TIMEOUT = 30.0
CLIENT_SCENARIOS: dict[str, tuple[str, ...]] = {
    "elicitation-sep1034-client-defaults": ("2025-11-25",),
    "sep-2322-client-request-state": ("2026-07-28",),
    "request-metadata": ("2026-07-28",),
}
"""The client scenarios the kit's client answers, and the spec versions each runs at."""
TASKS_SCENARIOS = (
    "tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
    "tasks-mrtr-input", "tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-status-notifications",
    "tasks-required-task-error", "tasks-mrtr-composition",
)  # fmt: skip
EXTENSION_SCENARIOS: dict[str, tuple[str, ...]] = {scenario: ("2026-07-28",) for scenario in TASKS_SCENARIOS}
"""Server scenarios of extensions, which `--suite all` leaves out (the suite runs them only when named, with
`--force`), and the spec versions each runs at: the `io.modelcontextprotocol/tasks` extension's. The suite has
none for the 2025-11-25 experimental tasks, and `tasks-status-notifications` is skipped by the suite itself."""
PARTS = ("server", "client")

Check = dict[str, Any]


@dataclass(frozen=True)
class Expected:
    check: str
    spec_versions: tuple[str, ...]
    reason: str

    @property
    def scenario(self) -> str:
        return self.check.split(":", 1)[0]

    @property
    def check_id(self) -> str | None:
        _, _, check_id = self.check.partition(":")
        return check_id or None


@dataclass
class Outcome:
    """One spec version's run, read back from the results the suite saved."""

    spec_version: str
    exit_code: int
    scenarios: dict[str, list[Check]] = field(default_factory=dict)
    passed: list[str] = field(default_factory=list)
    failed_as_expected: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def judge(self, expected: list[Expected]) -> None:
        """Sort the scenarios, and name every failure no entry explains and every entry nothing failed for."""
        listed: dict[str, set[str | None]] = {}
        for entry in expected:
            listed.setdefault(entry.scenario, set()).add(entry.check_id)
        for scenario, checks in sorted(self.scenarios.items()):
            failing = {str(check.get("id")) for check in checks if check.get("status") in FAILED}
            allowed = listed.get(scenario, set())
            if not failing:
                self.passed.append(scenario)
            elif None in allowed or failing <= allowed:
                self.failed_as_expected.append(scenario)
            else:
                self.problems.append(f"unexpected failure: {scenario}: {', '.join(sorted(failing - allowed))}")
        for entry in expected:
            seen = self._statuses(entry)
            if not seen:
                self.problems.append(f"listed check absent (renamed, or its scenario did not run): {entry.check}")
            elif not seen & FAILED:
                self.problems.append(f"listed check passes; remove it from the expected failures: {entry.check}")
        if not self.scenarios:
            self.problems.append("the suite saved no results")
        if self.exit_code != 0 and not self.problems:
            self.problems.append(f"the suite exited with {self.exit_code}")

    def _statuses(self, entry: Expected) -> set[str]:
        checks = self.scenarios.get(entry.scenario, [])
        chosen = [check for check in checks if entry.check_id is None or check.get("id") == entry.check_id]
        return {str(check.get("status")) for check in chosen if check.get("status") != "INFO"}

    def summary(self) -> str:
        counts = Counter(str(check.get("status")) for checks in self.scenarios.values() for check in checks)
        return (
            f"{self.spec_version}: {len(self.scenarios)} scenarios: {len(self.passed)} passed, "
            f"{len(self.failed_as_expected)} failed only as expected, "
            f"{len(self.scenarios) - len(self.passed) - len(self.failed_as_expected)} failed otherwise; "
            f"checks: " + ", ".join(f"{counts[status]} {status.lower()}" for status in STATUSES)
        )


@dataclass
class ClientOutcome:
    """One client scenario at one spec version, read back from the checks the suite saved."""

    scenario: str
    spec_version: str
    exit_code: int
    checks: list[Check] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def judge(self) -> None:
        failing = sorted({str(check.get("id")) for check in self.checks if check.get("status") in FAILED})
        if failing:
            self.problems.append(f"failed checks: {', '.join(failing)}")
        if not any(check.get("status") == "SUCCESS" for check in self.checks):
            self.problems.append("the suite saved no successful check")
        if self.exit_code != 0:
            self.problems.append(f"the suite exited with {self.exit_code}")

    def summary(self) -> str:
        counts = Counter(str(check.get("status")) for check in self.checks)
        verdict = "passed" if not self.problems else "FAILED"
        return f"client {self.scenario} at {self.spec_version}: {verdict}; checks: " + ", ".join(
            f"{counts[status]} {status.lower()}" for status in STATUSES
        )


def load_expected(path: Path) -> list[Expected]:
    """The expected failures, refused whole when an entry lacks a check, a known spec version or a reason."""
    raw = json.loads(path.read_text())
    entries: list[Expected] = []
    for index, item in enumerate(raw.get("failures", [])):
        check, spec_versions, reason = item.get("check"), item.get("spec_versions"), item.get("reason")
        where = f"{path.name} entry {index + 1}"
        if not isinstance(check, str) or not check or check.startswith(":") or check.endswith(":"):
            raise SystemExit(f"{where}: 'check' must be '<scenario>' or '<scenario>:<check-id>'")
        if not isinstance(spec_versions, list) or not spec_versions or not set(spec_versions) <= set(SPEC_VERSIONS):
            raise SystemExit(f"{where} ({check}): 'spec_versions' must be a non-empty subset of {list(SPEC_VERSIONS)}")
        if not isinstance(reason, str) or len(reason.strip()) < 20:
            raise SystemExit(f"{where} ({check}): every expected failure says why in 'reason'")
        entries.append(Expected(check, tuple(spec_versions), reason))
    checks = [entry.check for entry in entries]
    duplicated = sorted({check for check in checks if checks.count(check) > 1})
    if duplicated:
        raise SystemExit(f"{path.name}: listed more than once: {', '.join(duplicated)}")
    return entries


def start_server(log_path: Path, port_file: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The adapter on a free loopback port of its own choosing, once it accepts connections."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "conformance.server", "--port-file", str(port_file)],
            cwd=HERE.parent,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the adapter server exited with {process.returncode}; see {log_path}")
        text = port_file.read_text().strip() if port_file.exists() else ""
        if text.isdigit():
            try:
                socket.create_connection(("127.0.0.1", int(text)), timeout=1).close()
            except OSError:
                pass
            else:
                return process, int(text)
        time.sleep(0.1)
    stop_server(process)
    raise SystemExit(f"the adapter server did not listen within {STARTUP_TIMEOUT:.0f}s; see {log_path}")


def start_gateway(log_path: Path, upstream: str) -> tuple[subprocess.Popen[bytes], int]:
    """`mcp-elicit gateway` over streamable HTTP in front of the adapter, once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The adapter asks in its results on 2026-07-28 (mcp-elicit's own rounds): pinned, as the gateway guide advises
    # for such an upstream, so that 2026-07-28 clients get its rounds as they are.
    command = [sys.executable, "-m", "mcp_elicit", "gateway", "--upstream", upstream, "--era", "2026-07-28"]
    command += [
        "--transport",
        "streamable-http",
        "--dev-loopback",
        "--port",
        str(port),
        "--store",
        f"sqlite:///{log_path.parent.resolve()}/gateway.db",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=HERE.parent, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the gateway exited with {process.returncode}; see {log_path}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(0.1)
        else:
            return process, port
    stop_server(process)
    raise SystemExit(f"the gateway did not listen within {STARTUP_TIMEOUT:.0f}s; see {log_path}")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """SIGINT, which uvicorn and the adapter's cleanup (store, scratch directory) answer; SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_suite(node: Path, cli: Path, url: str, spec_version: str, expected: list[Expected], results: Path) -> Outcome:
    """`--suite all` and the extension scenarios at one spec version, with this version's entries as the
    suite's own baseline."""
    mine = [entry for entry in expected if spec_version in entry.spec_versions]
    baseline = results / f"expected-failures-{spec_version}.yml"
    baseline.write_text(json.dumps({"server": [entry.check for entry in mine]}, indent=2) + "\n")
    output = results / spec_version
    command = [str(node), str(cli), "server", "--url", url, "--suite", "all", "--spec-version", spec_version]
    command += ["--expected-failures", str(baseline), "-o", str(output)]
    print(f"\n##### conformance server --suite all --spec-version {spec_version}", flush=True)
    exit_code = subprocess.run(command, check=False).returncode  # noqa: S603
    for scenario, applicable in EXTENSION_SCENARIOS.items():
        if spec_version not in applicable:
            continue
        named = [str(node), str(cli), "server", "--url", url, "--scenario", scenario, "--force"]
        named += ["--spec-version", spec_version, "--expected-failures", str(baseline), "-o", str(output)]
        print(f"\n##### conformance server --scenario {scenario} --force --spec-version {spec_version}", flush=True)
        named_exit = subprocess.run(named, check=False).returncode  # noqa: S603
        exit_code = exit_code or named_exit  # every scenario runs, whichever failed before
    outcome = Outcome(spec_version, exit_code)
    for directory in sorted(output.iterdir()) if output.is_dir() else []:
        match = RESULT_DIR.match(directory.name)
        if match is not None and (directory / "checks.json").is_file():
            checks = json.loads((directory / "checks.json").read_text())
            outcome.scenarios.setdefault(match["scenario"], []).extend(checks)
    outcome.judge(mine)
    return outcome


def client_command() -> str:
    """The command the suite runs for the client; it splits it at spaces, so no path may contain one."""
    if any(character.isspace() for character in sys.executable):
        raise SystemExit(
            f"the suite splits --command at spaces; run from a Python whose path has none, not {sys.executable!r}"
        )
    return f"{sys.executable} -m conformance.client"


def run_client(node: Path, cli: Path, scenario: str, spec_version: str, results: Path) -> ClientOutcome:
    """One client scenario at one spec version, run from the project root so `conformance.client` imports."""
    output = results / "client" / f"{scenario}-{spec_version}"
    command = [str(node), str(cli), "client", "--command", client_command(), "--scenario", scenario]
    command += ["--spec-version", spec_version, "-o", str(output)]
    print(f"\n##### conformance client --scenario {scenario} --spec-version {spec_version}", flush=True)
    completed = subprocess.run(command, check=False, cwd=HERE.parent)  # noqa: S603
    outcome = ClientOutcome(scenario, spec_version, completed.returncode)
    for saved in sorted(output.rglob("checks.json")) if output.is_dir() else []:
        outcome.checks.extend(json.loads(saved.read_text()))
    outcome.judge()
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--node", type=Path, required=True, help="a Node.js >= 22 binary")
    parser.add_argument("--cli", type=Path, required=True, help="the suite's dist/index.js")
    parser.add_argument("--results", type=Path, default=Path("test-artifacts/conformance"))
    parser.add_argument("--expected", type=Path, default=HERE / "expected-failures.json")
    parser.add_argument("--spec-version", action="append", choices=SPEC_VERSIONS, dest="spec_versions")
    parser.add_argument("--only", choices=PARTS, help="run only the server suite or only the client scenarios")
    parser.add_argument(
        "--through-gateway",
        action="store_true",
        help="run the server suite against `mcp-elicit gateway` relaying the adapter (its own expected failures)",
    )
    arguments = parser.parse_args(argv)
    if arguments.through_gateway and arguments.expected == HERE / "expected-failures.json":
        arguments.expected = HERE / "expected-failures-gateway.json"
    versions: list[str] = arguments.spec_versions or list(SPEC_VERSIONS)
    parts = (arguments.only,) if arguments.only else PARTS
    expected = load_expected(arguments.expected)
    results: Path = arguments.results
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    outcomes: list[Outcome] = []
    if "server" in parts:
        process, port = start_server(results / "server.log", results / "port")
        gateway = None
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            if arguments.through_gateway:
                gateway, port = start_gateway(results / "gateway.log", url)
                url = f"http://127.0.0.1:{port}/mcp"
            outcomes = [run_suite(arguments.node, arguments.cli, url, v, expected, results) for v in versions]
        finally:
            if gateway is not None:
                stop_server(gateway)
            stop_server(process)
    clients: list[ClientOutcome] = []
    if "client" in parts:
        clients = [
            run_client(arguments.node, arguments.cli, scenario, version, results)
            for scenario, applicable in CLIENT_SCENARIOS.items()
            for version in applicable
            if version in versions
        ]

    print("\n##### conformance summary")
    for outcome in outcomes:
        print(outcome.summary())
        for problem in outcome.problems:
            print(f"  problem: {problem}")
    for entry in expected:
        if outcomes and set(entry.spec_versions) & set(versions):
            print(f"  expected failure at {', '.join(entry.spec_versions)}: {entry.check}")
    for client in clients:
        print(client.summary())
        for problem in client.problems:
            print(f"  problem: {problem}")
    passed = sum(len(outcome.passed) for outcome in outcomes) + sum(not client.problems for client in clients)
    failed = sum(len(outcome.problems) for outcome in outcomes) + sum(len(client.problems) for client in clients)
    print(f"conformance: {passed} passed, {failed} failed")
    if failed:
        print(f"results and the adapter's log are in {results}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
