"""`mcp-elicit audit verify|export|seal|keys`, run as the installed command, and the served app's sealer."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_elicit.model import DecisionStatus, Operator, System
from mcp_elicit.model.audit_keys import KEYS_PATH, AuditPublicKeys, AuditSigningKeys
from mcp_elicit.server.audit_sealer import AuditSealer
from mcp_elicit.store import Store, open_store, utc_now
from mcp_elicit.store.aio import AsyncStore
from tests.helpers.audit_tamper import cut_back, run_sql
from tests.helpers.clock import FakeClock
from tests.helpers.commands import cli, spawn
from tests.helpers.grants import recorded_grant
from tests.helpers.http_harness import free_port, stop, wait_for_port
from tests.helpers.records import ALICE, Records

OLD, NEW = bytes(range(32)), bytes(range(100, 132))


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


def keys_env(*seeds: bytes) -> dict[str, str]:
    return {"MCP_ELICIT_AUDIT_KEYS": ",".join(b64(seed) for seed in seeds)}


NO_KEYS = {"MCP_ELICIT_AUDIT_KEYS": ""}


def written(store_url: str, clock: FakeClock) -> dict[str, str]:
    """A decision answered with a secret field, noted twice; another operation's decision. Their ids."""
    store = open_store(store_url, clock=clock)
    try:
        records = Records(store, clock)
        decision = records.form(sensitive=("note",))
        for number in range(2):
            store.note(decision, actor=System("checker"), reason=f"looked ({number})")
        clock.advance(timedelta(minutes=1))
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True, "note": "hunter2"})
        other = records.form()
        return {
            "decision": decision.elicitation_id, "operation": decision.operation_id,
            "other": other.operation_id, "other_decision": other.elicitation_id,
        }  # fmt: skip
    finally:
        store.close()


@pytest.mark.engines("sqlite", "postgres")
def test_seal_then_verify_is_sound_and_states_the_exposure_window(store_url: str, clock: FakeClock) -> None:
    written(store_url, clock)
    before = cli("audit", "verify", "--max-exposure", "off", store=store_url, env=keys_env(OLD))
    assert before.returncode == 0, before.stderr
    assert "no checkpoint yet" in before.stdout and "7 rows written since" in before.stdout
    exposed = cli("audit", "verify", store=store_url, env=keys_env(OLD))
    assert exposed.returncode == 1, "the rows were written days ago (the test clock) and no checkpoint covers them"
    said = " ".join(exposed.stderr.split())
    assert "7 rows are covered by no checkpoint, the oldest (seq 1, written " in said, said
    assert "for longer than 0:10:00, the max exposure" in said and "(not covered in time)" in said
    assert "note: a store sealed only by hand (`mcp-elicit audit seal`) takes --max-exposure longer" in said
    by_hand = cli("audit", "verify", "--max-exposure", "1000d", store=store_url, env=keys_env(OLD))
    assert by_hand.returncode == 0 and by_hand.stderr == "", by_hand.stderr
    sealed = cli("audit", "seal", store=store_url, env=keys_env(OLD))
    assert sealed.returncode == 0, sealed.stderr
    assert re.fullmatch(r"sealed 7 rows in 1 checkpoint; last checkpoint 1:[0-9a-f]{64}", sealed.stdout.strip())
    again = cli("audit", "seal", store=store_url, env=keys_env(OLD))
    assert again.stdout.startswith("nothing to seal")
    verified = cli("audit", "verify", store=store_url, env=keys_env(OLD))
    assert verified.returncode == 0 and verified.stderr == "", verified.stderr
    assert verified.stdout.startswith("sound: 4 chains, 7 rows sealed\nlast checkpoint 1 at ")
    assert "it was written as a served app's sealer stopped, or by hand" in verified.stdout
    assert "every row is covered by a checkpoint" in verified.stdout
    assert f"anchor: {sealed.stdout.split()[-1]} (keep it outside the database" in verified.stdout


@pytest.mark.engines("sqlite", "postgres")
def test_an_anchor_catches_recent_history_rewritten_and_sealed_again(
    tmp_path: Path, store_url: str, clock: FakeClock
) -> None:
    ids = written(store_url, clock)
    assert cli("audit", "seal", store=store_url, env=keys_env(OLD)).returncode == 0
    printed = cli("audit", "verify", store=store_url, env=keys_env(OLD))
    anchor = re.search(r"^anchor: (\S+) ", printed.stdout, re.MULTILINE).group(1)  # type: ignore[union-attr]
    anchors = tmp_path / "anchors.txt"
    anchors.write_text(f"# kept by cron\n{anchor}\n")
    kept = cli("audit", "verify", "--anchors", str(anchors), store=store_url, env=keys_env(OLD))
    assert kept.returncode == 0 and "1 anchor found as recorded" in kept.stdout, kept.stderr
    cut_back(store_url, 1)
    run_sql(store_url, [("UPDATE elicit_audit SET actor = 'principal:mallory' WHERE subject_id = %s",
                         (ids["decision"],))])  # fmt: skip
    assert cli("audit", "seal", store=store_url, env=keys_env(OLD)).returncode == 0, "no memory: it signs again"
    fooled = cli("audit", "verify", store=store_url, env=keys_env(OLD))
    assert fooled.returncode == 0, "without the anchor the rewrite is out of sight"
    caught = cli("audit", "verify", "--anchor", anchor, store=store_url, env=keys_env(OLD))
    assert caught.returncode == 1, caught.stdout
    assert "checkpoint 1: its root is " in caught.stderr and f"says {anchor.split(':')[1]} (anchor broken)" in (
        caught.stderr
    )
    again = cli("audit", "verify", "--anchors", str(anchors), store=store_url, env=keys_env(OLD))
    assert again.returncode == 1 and "(anchor broken)" in again.stderr


def test_the_sealer_logs_each_checkpoint_and_refuses_to_sign_over_a_rewrite(
    sqlite_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    written(sqlite_url, clock)
    store = open_store(sqlite_url, clock=clock)
    keys = AuditSigningKeys([OLD])
    sealer = AuditSealer(AsyncStore(store), keys, timedelta(seconds=5))
    try:
        with caplog.at_level(logging.INFO, logger="mcp_elicit.server.audit_sealer"):
            first = anyio.run(sealer.seal)
            assert first is not None and first.anchor is not None
            assert f"audit checkpoint {first.anchor} sealed 7 rows" in caplog.text
            cut_back(sqlite_url, 1)
            assert anyio.run(sealer.seal) is None
            assert sealer.refused is not None and "checkpoint 1, signed by this sealer" in sealer.refused
            [refusal] = [record for record in caplog.records if record.levelno == logging.ERROR]
            assert "refusing to seal the audit trail" in refusal.getMessage()
            assert anyio.run(sealer.seal) is None, "it keeps refusing"
        assert store.verify_audit(keys.public()).unsealed == 7, "nothing was signed over the rewrite"
    finally:
        store.close()


def test_the_sealer_reads_past_more_unreadable_rows_than_its_batch_and_names_them_once(
    sqlite_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ids = written(sqlite_url, clock)
    [unreadable] = run_sql(
        sqlite_url,
        [("UPDATE elicit_audit SET details = '[]' WHERE subject_id IN (%s, %s) RETURNING seq",
          (ids["decision"], ids["operation"]))],
    )  # fmt: skip
    assert len(unreadable) == 5
    store = open_store(sqlite_url, clock=clock)
    keys = AuditSigningKeys([OLD])
    sealer = AuditSealer(AsyncStore(store), keys, timedelta(seconds=5), batch=2)
    try:
        with caplog.at_level(logging.INFO, logger="mcp_elicit.server.audit_sealer"):
            last = anyio.run(sealer.seal)
        assert last is not None and not last.more
        report = store.verify_audit(keys.public())
        assert report.rows_sealed == 2 and report.unsealed == 5, "the other operation's two rows, past five unread"
        [error] = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
        assert error.endswith("seq " + ", ".join(str(seq) for (seq,) in sorted(unreadable)))
    finally:
        store.close()


def sealed_by_hand(store_url: str) -> None:
    """What `audit seal` does (its own tests run it), for a test whose subject is another command."""
    store = open_store(store_url)
    try:
        while store.seal_audit(AuditSigningKeys([OLD])).more:
            pass
    finally:
        store.close()


def left_unsealed(store: Store) -> int:
    report = store.verify_audit(AuditSigningKeys([OLD]).public(), max_exposure=None)
    assert report.sound, report.breaks
    return report.unsealed


@pytest.mark.engines("sqlite", "postgres")
def test_commands_that_write_audit_rows_seal_them_when_the_keys_are_set(store_url: str, clock: FakeClock) -> None:
    """`decisions cancel` and `sweep`, `grants revoke` seal what they wrote with the keys set; without them the
    rows wait; keys set but unreadable stop the command before it writes anything. The commands are the subject
    and run as installed; the seals by hand and the checks read the store in process."""
    overdue = written(store_url, clock)["other_decision"]
    store = open_store(store_url)
    try:
        waiting = Records(store, utc_now).form().elicitation_id
        grant = recorded_grant(store, ALICE).grant_id
        sealed_by_hand(store_url)
        bad = cli("decisions", "cancel", waiting, store=store_url, env={"MCP_ELICIT_AUDIT_KEYS": "not base64"})
        assert bad.returncode == 2 and "MCP_ELICIT_AUDIT_KEYS" in bad.stderr, bad.stderr
        assert store.get_decision(waiting, Operator()).status is DecisionStatus.REQUESTED, "nothing was cancelled"
        assert left_unsealed(store) == 0, "nothing was written"
        cancelled = cli("decisions", "cancel", waiting, store=store_url, env=keys_env(OLD))
        assert cancelled.returncode == 0 and cancelled.stderr == "", cancelled.stderr
        assert left_unsealed(store) == 0, "the cancel sealed what it wrote"
        assert cli("grants", "revoke", grant, store=store_url, env=NO_KEYS).returncode == 0
        assert left_unsealed(store) == 1, "no keys, no seal"
        sealed_by_hand(store_url)
        swept = cli("decisions", "sweep", store=store_url, env=keys_env(OLD))
        assert swept.returncode == 0 and "Expired 1 decision(s)" in swept.stdout, swept.stdout + swept.stderr
        assert swept.stderr == "", swept.stderr
        assert left_unsealed(store) == 0, "the sweep sealed what it wrote"
        assert store.get_decision(overdue, Operator()).status is DecisionStatus.EXPIRED
    finally:
        store.close()


@pytest.mark.engines("sqlite", "postgres")
def test_a_command_that_writes_audit_rows_does_not_sign_rows_from_before_it(store_url: str, clock: FakeClock) -> None:
    """The latest checkpoints deleted, the rows they covered unsealed and edited (the attack an anchor finds):
    the next cron `decisions sweep` with the keys set leaves them, and what it wrote, unsealed, says why and
    exits 3 (a cron job that never seals again is not silent), so that verify still calls them a break, instead
    of signing the edit."""
    ids = written(store_url, clock)
    sealed_by_hand(store_url)
    cut_back(store_url, 1)
    [edited] = run_sql(
        store_url,
        [("UPDATE elicit_audit SET actor = 'principal:mallory' WHERE subject_id = %s RETURNING seq",
          (ids["decision"],))],
    )  # fmt: skip
    swept = cli("decisions", "sweep", store=store_url, env=keys_env(OLD))
    assert swept.returncode == 3 and "Expired 1 decision(s)" in swept.stdout, swept.stdout + swept.stderr
    said = " ".join(swept.stderr.split())
    assert said.startswith(
        "not sealed: the change was made and audited, but the audit rows this command wrote were not sealed: 7 "
        "unsealed rows were written before it started, the first seq 1, the oldest written "
    ), said
    assert " d before. A server running on this store seals them" in said
    assert "run `mcp-elicit audit verify` (with `--anchor ID:ROOT` if you keep anchors;" in said
    assert said.endswith("then `mcp-elicit audit seal` once you know why they wait."), said
    verified = cli("audit", "verify", store=store_url, env=keys_env(OLD))
    assert verified.returncode == 1, verified.stdout
    assert "10 rows are covered by no checkpoint, the oldest (seq 1, " in " ".join(verified.stderr.split())
    store = open_store(store_url)
    try:
        export = store.audit_export()
    finally:
        store.close()
    assert all(row.row_hash is None for row in export) and {seq for (seq,) in edited} <= {r.entry.seq for r in export}


@pytest.mark.engines("sqlite", "postgres")
def test_a_refused_seal_after_a_command_wrote_exits_3(store_url: str, clock: FakeClock) -> None:
    """A checkpoint deleted with its heads left: the command's change is made, its seal refused, the exit code
    says so (the command's help names it: the next test)."""
    written(store_url, clock)
    store = open_store(store_url)
    try:
        waiting = Records(store, utc_now).form().elicitation_id
        sealed_by_hand(store_url)
        run_sql(store_url, [("DELETE FROM elicit_audit_checkpoints WHERE checkpoint_id = 1", ())])
        refused = cli("decisions", "cancel", waiting, store=store_url, env=keys_env(OLD))
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert f"Cancelled {waiting}" in refused.stdout
        said = " ".join(refused.stderr.split())
        assert said.startswith("refused: the change was made and audited, but the audit trail of "), said
        assert "was not sealed: the heads of checkpoint 1 are stored without it" in said
        assert store.get_decision(waiting, Operator()).status is DecisionStatus.CANCELLED
    finally:
        store.close()


def test_the_help_of_each_command_that_seals_names_exit_3() -> None:
    for command in (("decisions", "cancel"), ("decisions", "sweep"), ("grants", "revoke")):
        shown = " ".join(cli(*command, "--help").stdout.split())
        assert "Exit 3: the change was made, but with MCP_ELICIT_AUDIT_KEYS set the audit trail" in shown, shown
        assert "holding unsealed rows older than the command" in shown and "then `mcp-elicit audit seal`" in shown


def test_verify_names_a_sealed_row_whose_text_is_not_utf8(sqlite_url: str, clock: FakeClock) -> None:
    """SQLite holds any bytes as text: a sealed row edited into bytes that are not UTF-8 is named, exit 1."""
    ids = written(sqlite_url, clock)
    assert cli("audit", "seal", store=sqlite_url, env=keys_env(OLD)).returncode == 0
    [[(seq,)]] = run_sql(
        sqlite_url,
        [("UPDATE elicit_audit SET reason = CAST(X'EDA080' AS TEXT) WHERE subject_id = %s AND chain_seq = 2"
          " RETURNING seq", (ids["decision"],))],
    )  # fmt: skip
    result = cli("audit", "verify", store=sqlite_url, env=keys_env(OLD))
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"chain {ids['decision']}, chain_seq 2: the row (seq {seq}) cannot be read: audit row {seq}: column reason"
        " holds text that is not UTF-8 where text belongs" in " ".join(result.stderr.split())
    )


@pytest.mark.engines("sqlite", "postgres")
def test_verify_exits_1_naming_the_first_break(store_url: str, clock: FakeClock) -> None:
    ids = written(store_url, clock)
    sealed_by_hand(store_url)
    run_sql(
        store_url,
        [("UPDATE elicit_audit SET actor = 'principal:mallory' WHERE subject_id = %s AND chain_seq = 4",
          (ids["decision"],))],
    )  # fmt: skip
    result = cli("audit", "verify", store=store_url, env=keys_env(OLD))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    assert f"chain {ids['decision']}, chain_seq 4: its contents do not match its hash (edited)" in result.stderr


def test_rotation_keys_document_and_an_unknown_key(tmp_path: Path, sqlite_url: str, clock: FakeClock) -> None:
    written(sqlite_url, clock)
    assert cli("audit", "seal", store=sqlite_url, env=keys_env(OLD)).returncode == 0
    store = open_store(sqlite_url, clock=clock)
    try:
        Records(store, clock).form()
    finally:
        store.close()
    assert cli("audit", "seal", store=sqlite_url, env=keys_env(NEW, OLD)).returncode == 0
    printed = cli("audit", "keys", env=keys_env(NEW, OLD))
    assert printed.returncode == 0, printed.stderr
    document = json.loads(printed.stdout)
    assert [key["kid"] for key in document["keys"]] == AuditSigningKeys([NEW, OLD]).public().ids()
    published = tmp_path / "audit-keys.json"
    published.write_text(printed.stdout)
    verified = cli("audit", "verify", "--keys", str(published), store=sqlite_url, env=NO_KEYS)
    assert verified.returncode == 0, verified.stderr
    assert "last checkpoint 2 at " in verified.stdout
    newest = tmp_path / "newest.json"
    newest.write_text(json.dumps(AuditSigningKeys([NEW]).public().document()))
    refused = cli("audit", "verify", "--keys", str(newest), store=sqlite_url, env=NO_KEYS)
    assert refused.returncode == 1
    old_id = AuditSigningKeys([OLD]).public().ids()[0]
    assert f"checkpoint 1: signed by key {old_id}, which is not among the public keys given (unknown key)" in (
        refused.stderr
    )


def test_usage_errors_exit_2_and_say_what_to_do(tmp_path: Path, sqlite_url: str, clock: FakeClock) -> None:
    written(sqlite_url, clock)
    no_keys = cli("audit", "verify", store=sqlite_url, env=NO_KEYS)
    assert no_keys.returncode == 2 and "give --keys FILE|URL" in no_keys.stderr
    seal = cli("audit", "seal", store=sqlite_url, env=NO_KEYS)
    assert seal.returncode == 2 and "audit seal needs the audit's signing keys" in seal.stderr
    short = cli("audit", "keys", env={"MCP_ELICIT_AUDIT_KEYS": b64(bytes(48))})
    assert short.returncode == 2 and "an Ed25519 seed has exactly 32" in short.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"keys": []}')
    unreadable = cli("audit", "verify", "--keys", str(bad), store=sqlite_url, env=NO_KEYS)
    assert unreadable.returncode == 2 and "not an audit keys document" in unreadable.stderr
    anchor = cli("audit", "verify", "--anchor", "1:abc", store=sqlite_url, env=keys_env(OLD))
    assert anchor.returncode == 2 and "'1:abc' is not an anchor: expected ID:ROOT" in anchor.stderr
    exposure = cli("audit", "verify", "--max-exposure", "soon", store=sqlite_url, env=keys_env(OLD))
    assert exposure.returncode == 2 and "is not a duration" in exposure.stderr
    since = cli("audit", "export", "--since", "yesterday", store=sqlite_url)
    assert since.returncode == 2 and "is not an ISO 8601 time" in since.stderr
    store = open_store(sqlite_url, clock=clock)
    try:
        assert store.verify_audit(AuditSigningKeys([OLD]).public()).rows_sealed == 0, "nothing was sealed"
    finally:
        store.close()


def test_export_jsonl_by_time_and_operation_keeps_redactions(sqlite_url: str, clock: FakeClock) -> None:
    start = clock()
    ids = written(sqlite_url, clock)
    assert cli("audit", "seal", store=sqlite_url, env=keys_env(OLD)).returncode == 0
    every = cli("audit", "export", "--format", "jsonl", store=sqlite_url)
    assert every.returncode == 0, every.stderr
    lines = [json.loads(line) for line in every.stdout.splitlines()]
    assert len(lines) == 7 and [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
    assert all(line["row_hash"] and line["chain_seq"] for line in lines)
    assert "hunter2" not in every.stdout
    accepted = next(line for line in lines if line["to_status"] == "accepted")
    assert accepted["actor"] == "principal:alice@client-a" and accepted["details"]["content"]["note"] != "hunter2"
    created = next(line for line in lines if line["subject_kind"] == "operation")
    assert created["argument_digest"].startswith("sha256:")
    mine = cli("audit", "export", "--operation", ids["operation"], store=sqlite_url)
    subjects = {json.loads(line)["subject_id"] for line in mine.stdout.splitlines()}
    assert subjects == {ids["operation"], ids["decision"]}
    later = (start + timedelta(seconds=30)).isoformat()
    recent = [
        json.loads(line) for line in cli("audit", "export", "--since", later, store=sqlite_url).stdout.splitlines()
    ]
    assert [(line["subject_id"], line["to_status"]) for line in recent] == [
        (ids["decision"], "accepted"), (ids["other"], "open"), (ids["other_decision"], "requested"),
    ]  # fmt: skip


def test_the_served_app_seals_by_itself_and_publishes_its_keys(tmp_path: Path, sqlite_url: str) -> None:
    """`serve --transport http` with `MCP_ELICIT_AUDIT_KEYS`: rows written meanwhile are covered within the
    checkpoint interval, and verify checks them against the keys the server publishes."""
    port = free_port()
    log = tmp_path / "serve.log"
    environ = {
        **os.environ, **keys_env(NEW, OLD), "MCP_ELICIT_USERS": "alice:wonderland",
        "MCP_ELICIT_AUTH_KEYS": b64(b"A" * 32), "MCP_ELICIT_STATE_KEYS": b64(b"S" * 32),
        "MCP_ELICIT_VAULT_KEYS": "v1:" + b64(b"V" * 32),
    }  # fmt: skip
    process = spawn(
        ["serve", "--transport", "http", "--port", str(port), "--store", sqlite_url,
         "--workspace", str(tmp_path / "workspace")],
        env=environ, output=log,
    )  # fmt: skip
    try:
        wait_for_port(port, process)
        url = f"http://127.0.0.1:{port}{KEYS_PATH}"
        published = httpx2.get(url, timeout=30)
        assert published.status_code == 200
        assert AuditPublicKeys.from_document(published.json()).ids() == AuditSigningKeys([NEW, OLD]).public().ids()
        written(sqlite_url, FakeClock(datetime.now(UTC)))
        deadline = time.monotonic() + 20
        while True:
            result = cli("audit", "verify", "--keys", url, store=sqlite_url, env=NO_KEYS)
            assert result.returncode == 0, result.stderr
            sealed = int(re.search(r"(\d+) rows sealed", result.stdout).group(1))  # type: ignore[union-attr]
            if "every row is covered by a checkpoint" in result.stdout and sealed >= 7:
                break
            assert time.monotonic() < deadline, result.stdout + log.read_text(errors="replace")
            time.sleep(0.5)
        assert f"key {AuditSigningKeys([NEW]).public().ids()[0]}" in result.stdout, "the newest key signs"
        assert "it was written while a served app's sealer ran" in result.stdout
        ready = httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=30).json()
        assert ready["checks"]["audit"] == "ok", ready
        assert re.search(r"audit checkpoint \d+:[0-9a-f]{64} sealed \d+ rows", log.read_text(errors="replace"))
        written(sqlite_url, FakeClock(datetime.now(UTC)))
    finally:
        stop(process)
    stopped = cli("audit", "verify", store=sqlite_url, env=keys_env(NEW, OLD))
    assert stopped.returncode == 0 and stopped.stderr == "", stopped.stderr
    assert "every row is covered by a checkpoint" in stopped.stdout, "the rows written just before it stopped too"
    assert "it was written as a served app's sealer stopped, or by hand" in stopped.stdout
