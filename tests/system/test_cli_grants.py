"""`mcp-elicit grants ls` and `grants revoke`, run as the installed command against a real SQLite file."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mcp_elicit.model import Grant, GrantKind, Operator, Principal
from mcp_elicit.store import open_store
from tests.helpers.cli_terminal import Terminal, terminal_env
from tests.helpers.commands import cli
from tests.helpers.grants import recorded_grant

ALICE = Principal("alice", "desktop-app")
BOB = Principal("bob", "cli-app")


@pytest.fixture
def granted(tmp_path: Path) -> tuple[str, dict[str, Grant]]:
    """A store with alice's session grant, bob's scoped always grant, and alice's grant that expired."""
    url = f"sqlite://{tmp_path / 'grants.db'}"
    store = open_store(url)
    now = datetime.now(UTC)
    made = {
        "expired": recorded_grant(store, ALICE, tool="backup", ttl=timedelta(minutes=1), now=now - timedelta(hours=2)),
        "session": recorded_grant(store, ALICE, tool="restart", now=now - timedelta(minutes=1)),
        "always": recorded_grant(
            store, BOB, tool="deploy", kind=GrantKind.ALWAYS, scope="env=staging", ttl=timedelta(days=30), now=now
        ),
    }
    store.close()
    return url, made


def test_ls_lists_what_lets_calls_through_now(granted: tuple[str, dict[str, Grant]]) -> None:
    url, made = granted
    listed = json.loads(cli("grants", "ls", "--json", store=url).stdout)
    assert [(g["grant_id"], g["status"], g["kind"], g["tool"], g["scope"], g["principal_id"], g["client_id"])
            for g in listed] == [
        (made["always"].grant_id, "active", "always", "deploy", "env=staging", "bob", "cli-app"),
        (made["session"].grant_id, "active", "session", "restart", None, "alice", "desktop-app"),
    ]  # fmt: skip
    assert listed[0]["decision_id"] == made["always"].decision_id and listed[0]["revoked_at"] is None
    everything = json.loads(cli("grants", "ls", "--json", "--all", store=url).stdout)
    assert [g["status"] for g in everything] == ["active", "active", "expired"]
    alices = json.loads(cli("grants", "ls", "--json", "--all", "--principal", "alice", store=url).stdout)
    assert [g["tool"] for g in alices] == ["restart", "backup"]

    piped = cli("grants", "ls", store=url)
    assert piped.returncode == 0, piped.stderr
    header, *lines = piped.stdout.splitlines()
    assert header.split("\t") == [
        "grant_id", "status", "kind", "tool", "scope", "principal_id", "client_id", "created_at", "expires_at",
        "revoked_at", "revoked_by", "decision_id",
    ]  # fmt: skip
    first = lines[0].split("\t")
    assert first[:7] == [made["always"].grant_id, "active", "always", "deploy", "env=staging", "bob", "cli-app"]
    assert len(lines) == 2

    paged = cli("grants", "ls", "--limit", "1", store=url)
    assert len(paged.stdout.splitlines()) == 2 and "--after " in paged.stderr
    cursor = paged.stderr.split("--after ")[1].split()[0]
    rest = cli("grants", "ls", "--after", cursor, store=url).stdout.splitlines()[1:]
    assert [line.split("\t")[0] for line in rest] == [made["session"].grant_id]
    bad = cli("grants", "ls", "--after", "tomorrow", store=url)
    assert bad.returncode == 2 and "not a cursor of a grant listing" in bad.stderr


def test_ls_at_a_terminal_is_a_table(granted: tuple[str, dict[str, Grant]]) -> None:
    url, made = granted
    terminal = Terminal(["grants", "ls", "--store", url], terminal_env())
    try:
        status = terminal.finish()
    finally:
        terminal.close()
    assert status == 0, terminal.text
    assert made["always"].grant_id[:8] in terminal.text and made["session"].grant_id[:8] in terminal.text
    assert "deploy with env=staging" in terminal.text and "lets through" in terminal.text
    assert made["expired"].grant_id[:8] not in terminal.text


def test_revoke_takes_effect_once_and_is_audited(granted: tuple[str, dict[str, Grant]]) -> None:
    url, made = granted
    target = made["session"]
    revoked = cli("grants", "revoke", target.grant_id[:8], "--reason", "laptop lost", "--as", "dana", store=url)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == (
        f"Revoked {target.grant_id}: restart for alice through desktop-app. Its calls are asked again."
    )
    again = cli("grants", "revoke", target.grant_id, "--as", "dana", store=url)
    assert again.returncode == 1 and "not revoked:" in again.stderr
    assert f"grant {target.grant_id} was revoked at" in again.stderr and "by operator:dana" in again.stderr
    expired = cli("grants", "revoke", made["expired"].grant_id, store=url)
    assert expired.returncode == 1 and "expired at" in expired.stderr
    missing = cli("grants", "revoke", "ffffffff", store=url)
    assert missing.returncode == 1 and "not found" in missing.stderr

    store = open_store(url)
    try:
        trail = store.audit_trail(target.grant_id, Operator())
        assert store.covering_grant(ALICE, "restart", None) is None
        assert store.covering_grant(BOB, "deploy", "env=staging") == made["always"]
    finally:
        store.close()
    assert [(row.to_status, row.actor, row.reason) for row in trail][1:] == [
        ("revoked", "operator:dana", "laptop lost")
    ]
    audited = json.loads(cli("decisions", "audit", target.grant_id, "--json", store=url).stdout)
    assert [row["subject_kind"] for row in audited] == ["grant", "grant"]

    as_json = json.loads(cli("grants", "revoke", made["always"].grant_id, "--json", store=url).stdout)
    assert as_json["status"] == "revoked" and as_json["revoked_by"].startswith("operator:")


def test_audit_takes_a_unique_start_of_a_grant_id_as_of_a_decision_id(granted: tuple[str, dict[str, Grant]]) -> None:
    url, made = granted
    target = made["session"]
    full = json.loads(cli("decisions", "audit", target.grant_id, "--json", store=url).stdout)
    short = cli("decisions", "audit", target.grant_id[:8], "--json", store=url)
    assert short.returncode == 0, short.stderr
    assert json.loads(short.stdout) == full and [row["subject_id"] for row in full] == [target.grant_id]
    decision = json.loads(cli("decisions", "audit", target.decision_id[:8], "--json", store=url).stdout)
    assert {row["subject_id"] for row in decision} == {target.decision_id}, "a decision's prefix still names it"

    store = open_store(url)
    try:  # a grant whose id starts as alice's approval's id does: that start names neither
        shared = target.decision_id[:8]
        twin = recorded_grant(store, BOB, tool="drain", grant_id=shared + str(uuid.uuid4())[8:])
    finally:
        store.close()
    ambiguous = cli("decisions", "audit", shared, store=url)
    assert ambiguous.returncode == 1 and "ambiguous id:" in ambiguous.stderr
    said = " ".join(ambiguous.stderr.split())
    assert f"a decision id ({target.decision_id}) and a grant id ({twin.grant_id})" in said
    missing = cli("decisions", "audit", "ffffffff", store=url)
    assert missing.returncode == 1 and "no decision, grant or operation ffffffff" in " ".join(missing.stderr.split())
