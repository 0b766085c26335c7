"""The types `flow.ask` gives back, as mypy --strict infers them (the cases are in `typing_asks.py`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "helpers" / "typing_asks.py"


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_kind_of_question_is_typed_by_what_it_asks() -> None:
    checked = mypy(CASES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert CASES.read_text().count("assert_type(") >= 20


def test_a_changed_inference_or_a_call_that_became_legal_fails_the_check(tmp_path: Path) -> None:
    source = CASES.read_text()
    wrong = tmp_path / "typing_asks_wrong.py"
    wrong.write_text(
        source.replace('flow.ask("Deploy?", bool), Answer[bool]', 'flow.ask("Deploy?", bool), Answer[int]')
        + '\n\nasync def legal(flow: Flow) -> None:\n    await flow.ask("Count?", int)  # type: ignore[call-overload]\n'
    )
    checked = mypy(wrong)
    assert checked.returncode == 1, checked.stdout
    lines = checked.stdout.splitlines()
    assert any('Expression is of type "Accepted[bool] | Declined | Cancelled | Expired"' in line for line in lines), (
        lines
    )
    assert any('Unused "type: ignore" comment' in line for line in lines), lines
