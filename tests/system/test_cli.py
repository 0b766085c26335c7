"""The operator CLI, run as the installed `mcp-elicit` command against a real SQLite file."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mcp_elicit.model import Approver, ApproverRule, Decision, DecisionStatus, Verdict
from mcp_elicit.store import open_store
from tests.helpers.clock import FakeClock
from tests.helpers.commands import cli
from tests.helpers.records import ALICE, BOB, Records


@pytest.fixture
def populated(tmp_path: Path) -> tuple[str, dict[str, Decision]]:
    """A store with a waiting, an accepted (with a secret answer), an overdue and a foreign decision."""
    url = f"sqlite://{tmp_path / 'ops.db'}"
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    store = open_store(url, clock=clock)
    records = Records(store, clock)
    operation = records.operation(ttl=timedelta(days=2))
    waiting = records.form(operation, key="approve-prod", ttl=timedelta(days=1))
    accepted = store.transition(
        records.form(operation, key="profile", ttl=timedelta(days=1)),
        DecisionStatus.ACCEPTED,
        caller=ALICE,
        content={"approve": True, "password": "hunter2"},
    )
    overdue = records.form(operation, key="stale", ttl=timedelta(minutes=5))
    foreign = records.url(records.operation(BOB, ttl=timedelta(days=2)), ttl=timedelta(days=1))
    store.close()
    return url, {"waiting": waiting, "accepted": accepted, "overdue": overdue, "foreign": foreign}


def test_ls_human_and_json(populated: tuple[str, dict[str, Decision]]) -> None:
    url, made = populated
    human = cli("decisions", "ls", "--store", url)
    assert human.returncode == 0, human.stderr
    for decision in made.values():
        assert decision.elicitation_id[:8] in human.stdout
    assert "approve-prod" in human.stdout and "requested" in human.stdout

    listed = json.loads(cli("decisions", "ls", "--json", store=url).stdout)
    assert {d["elicitation_id"] for d in listed} == {d.elicitation_id for d in made.values()}

    mine = json.loads(cli("decisions", "ls", "--json", "--principal", "bob", store=url).stdout)
    assert [d["elicitation_id"] for d in mine] == [made["foreign"].elicitation_id]
    accepted = json.loads(cli("decisions", "ls", "--json", "--status", "accepted", store=url).stdout)
    assert [d["status"] for d in accepted] == ["accepted"]


def test_ls_rejects_an_unknown_status(populated: tuple[str, dict[str, Decision]]) -> None:
    url, _ = populated
    result = cli("decisions", "ls", "--status", "approved", store=url)
    assert result.returncode == 2 and "approved" in result.stderr


def test_show_redacts_secret_answers(populated: tuple[str, dict[str, Decision]]) -> None:
    url, made = populated
    target = made["accepted"].elicitation_id
    human = cli("decisions", "show", target[:8], store=url)
    assert human.returncode == 0, human.stderr
    assert target in human.stdout and "[redacted]" in human.stdout and "hunter2" not in human.stdout
    shown = json.loads(cli("decisions", "show", target, "--json", store=url).stdout)
    assert shown["content"] == {"approve": True, "password": "[redacted]"}
    assert shown["status"] == "accepted" and shown["principal_id"] == "alice"


def test_show_names_the_approvers_and_their_votes(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'votes.db'}"
    clock = FakeClock(datetime.now(UTC))
    store = open_store(url, clock=clock)
    decision = Records(store, clock).form(approvers=ApproverRule(["release-managers"], quorum=2))
    managers = frozenset({"release-managers"})
    store.cast_vote(decision.elicitation_id, Approver("carol", managers), Verdict.APPROVE, {"approve": True})
    store.close()
    shown = json.loads(cli("decisions", "show", decision.elicitation_id, "--json", store=url).stdout)
    assert shown["approvers"] == {"roles": ["release-managers"], "quorum": 2}
    [vote] = shown["votes"]
    assert (vote["approver"], vote["verdict"], vote["roles"]) == ("carol", "approve", ["release-managers"])
    human = cli("decisions", "show", decision.elicitation_id[:8], store=url)
    assert human.returncode == 0 and "carol" in human.stdout and "release-managers" in human.stdout


def test_show_unknown_and_ambiguous_ids(populated: tuple[str, dict[str, Decision]]) -> None:
    url, _ = populated
    missing = cli("decisions", "show", "ffffffff-0000", store=url)
    assert missing.returncode == 1 and "not found" in missing.stderr
    ambiguous = cli("decisions", "show", "", store=url)
    assert ambiguous.returncode != 0


def test_audit_to_a_pipe_and_json(populated: tuple[str, dict[str, Decision]]) -> None:
    url, made = populated
    target = made["accepted"].elicitation_id
    piped = cli("decisions", "audit", target, store=url)
    assert piped.returncode == 0, piped.stderr
    header, *lines = piped.stdout.splitlines()
    assert header.split("\t") == ["seq", "at", "from_status", "to_status", "actor", "reason", "details"]
    rows = [line.split("\t") for line in lines]
    assert [(row[2], row[3]) for row in rows] == [("", "requested"), ("requested", "accepted")]
    assert rows[1][4] == "principal:alice@client-a"
    assert all(len(row) == 7 and datetime.fromisoformat(row[1]).tzinfo is not None for row in rows)
    assert "hunter2" not in piped.stdout
    rows = json.loads(cli("decisions", "audit", target, "--json", store=url).stdout)
    assert [(r["from_status"], r["to_status"]) for r in rows] == [(None, "requested"), ("requested", "accepted")]
    operation_rows = json.loads(cli("decisions", "audit", made["accepted"].operation_id, "--json", store=url).stdout)
    assert operation_rows[0]["subject_kind"] == "operation"


def test_cancel_waiting_then_refuse_to_cancel_again(populated: tuple[str, dict[str, Decision]]) -> None:
    url, made = populated
    target = made["waiting"].elicitation_id
    done = cli("decisions", "cancel", target, "--reason", "wrong environment", "--as", "oncall", store=url)
    assert done.returncode == 0, done.stderr
    assert f"Cancelled {target}" in done.stdout
    again = cli("decisions", "cancel", target, store=url)
    assert again.returncode == 1, again.stderr
    assert again.stderr == f"not cancelled: {target} already ended as cancelled\n"
    rows = json.loads(cli("decisions", "audit", target, "--json", store=url).stdout)
    assert rows[-1]["actor"] == "operator:oncall" and rows[-1]["reason"] == "wrong environment"


def test_cancel_json(populated: tuple[str, dict[str, Decision]]) -> None:
    url, made = populated
    result = cli("decisions", "cancel", made["foreign"].elicitation_id, "--json", store=url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "cancelled"


def test_sweep_human_and_json(populated: tuple[str, dict[str, Decision]]) -> None:
    url, made = populated
    human = cli("decisions", "sweep", store=url)
    assert human.returncode == 0, human.stderr
    assert "Expired 1 decision(s) and 0 operation(s)" in human.stdout
    assert json.loads(cli("decisions", "sweep", "--json", store=url).stdout) == {
        "decisions": 0,
        "operations": 0,
        "tokens": 0,
    }
    shown = json.loads(cli("decisions", "show", made["overdue"].elicitation_id, "--json", store=url).stdout)
    assert shown["status"] == "expired"


def test_default_store_is_created_in_the_data_directory(tmp_path: Path) -> None:
    result = cli("decisions", "ls", env={"XDG_DATA_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "No decisions in" in result.stderr  # stdout, a pipe, holds the listing's header line only
    assert (tmp_path / "mcp-elicit" / "elicit.db").is_file()


@pytest.mark.parametrize(
    ("url", "message"),
    [("mongodb://x", "unknown store URL scheme"), ("sqlite:///no/such/dir/x.db", "does not exist")],
)
def test_bad_store_urls_exit_2_with_the_reason(url: str, message: str) -> None:
    result = cli("decisions", "ls", "--store", url)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_corrupt_store_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"
    path.write_bytes(b"\x00garbage" * 512)
    result = cli("decisions", "ls", store=f"sqlite://{path}")
    assert result.returncode == 2 and "not a readable mcp-elicit database" in result.stderr


def test_module_entry_point_matches_the_script() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mcp_elicit", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and "decisions" in result.stdout
