"""CI's coverage floor fails a report below it, names what fell, and passes one at or above it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tools import coverage_floor


def summary(statements: int, covered: int, branches: int, covered_branches: int) -> dict[str, object]:
    return {
        "summary": {
            "num_statements": statements,
            "covered_lines": covered,
            "num_branches": branches,
            "covered_branches": covered_branches,
        }
    }


def report(**overrides: dict[str, object]) -> dict[str, object]:
    """Every guarded module at 95 % of its branches, then `overrides` by module path under the package."""
    files = {f"src/mcp_elicit/{prefix}x.py" if prefix.endswith("/") else f"src/mcp_elicit/{prefix}": None
             for prefixes in coverage_floor.GROUPS.values() for prefix in prefixes}  # fmt: skip
    built = {path: summary(100, 99, 100, 95) for path in files}
    built.update({f"src/mcp_elicit/{path}": entry for path, entry in overrides.items()})
    return {"files": built}


def run(tmp_path: Path, content: dict[str, object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "coverage.json"
    path.write_text(json.dumps(content))
    code = coverage_floor.main([str(path)])
    return code, capsys.readouterr().err


def test_a_report_above_the_floor_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, report(), capsys) == (0, "")


def test_a_guarded_module_below_ninety_percent_of_its_branches_fails_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, errors = run(tmp_path, report(**{"web/oidc.py": summary(100, 99, 10, 8)}), capsys)
    assert code == 1
    assert "web/oidc branches 80.0 % < 90.0 %" in errors


def test_the_total_below_its_floor_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, errors = run(tmp_path, report(**{"cli/big.py": summary(10_000, 5_000, 10_000, 5_000)}), capsys)
    assert code == 1
    assert "total lines" in errors
    assert "total branches" in errors


def test_a_guarded_module_that_is_not_measured_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = report()
    files = content["files"]
    assert isinstance(files, dict)
    del files["src/mcp_elicit/web/jwks.py"]
    code, errors = run(tmp_path, content, capsys)
    assert code == 1
    assert "web/jwks: no branches measured" in errors
