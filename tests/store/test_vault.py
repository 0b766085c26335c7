"""The token vault on both stores, with real AES-GCM: isolation, tampering, rotation, and no leaks."""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_elicit.model import Principal
from mcp_elicit.store import Store
from mcp_elicit.store.url import sqlite_path
from mcp_elicit.web import Vault, VaultError, VaultKeyRing
from mcp_elicit.web import vault as vault_module
from tests.helpers.records import ALICE, ALICE_OTHER_CLIENT, BOB

CANARY = "canary-vault-5d1e8b2f-ünï-🔑"
GENERIC = "the vault entry cannot be opened"


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


OLD_KEY, NEW_KEY, OTHER_KEY = new_key(), new_key(), new_key()


def ring(*entries: tuple[str, str]) -> VaultKeyRing:
    return VaultKeyRing.from_text(",".join(f"{key_id}:{key}" for key_id, key in entries))


class Raw:
    """Straight SQL on the store's database, behind the store's back (%s placeholders on both engines)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = sqlite_path(url) if url.startswith("sqlite:") else None

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        if self.sqlite is not None:
            with closing(sqlite3.connect(self.sqlite)) as connection:
                return connection.execute(sql.replace("%s", "?"), params).fetchall()
        with psycopg.connect(self.url, autocommit=True) as pg:
            return pg.execute(sql, params).fetchall()

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> int:
        if self.sqlite is not None:
            with closing(sqlite3.connect(self.sqlite)) as connection, connection:
                return connection.execute(sql.replace("%s", "?"), params).rowcount
        with psycopg.connect(self.url, autocommit=True) as pg:
            return pg.execute(sql, params).rowcount

    def sealed(self, principal_id: str, name: str) -> bytes:
        rows = self.query("SELECT sealed FROM elicit_vault WHERE principal_id = %s AND name = %s", (principal_id, name))
        assert len(rows) == 1
        return bytes(rows[0][0])

    def set_sealed(self, principal_id: str, name: str, sealed: bytes) -> None:
        assert (
            self.execute(
                "UPDATE elicit_vault SET sealed = %s WHERE principal_id = %s AND name = %s",
                (sealed, principal_id, name),
            )
            == 1
        )

    def vault_audit(self) -> list[tuple[str, str | None, str, str, str, dict[str, Any]]]:
        rows = self.query(
            "SELECT subject_id, from_status, to_status, actor, reason, details FROM elicit_audit"
            " WHERE subject_kind = 'vault' ORDER BY seq"
        )
        return [(*row[:5], row[5] if isinstance(row[5], dict) else json.loads(row[5])) for row in rows]

    def everything(self) -> bytes:
        """Every byte the database holds: the files for SQLite, a dump of every elicit_* row for PostgreSQL."""
        if self.sqlite is not None:
            files = [self.sqlite, Path(f"{self.sqlite}-wal")]
            return b"".join(path.read_bytes() for path in files if path.exists())
        dump = bytearray()
        for table in ("elicit_operations", "elicit_decisions", "elicit_audit", "elicit_journal", "elicit_vault"):
            for row in self.query(f"SELECT * FROM {table}"):
                for value in row:
                    dump += bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
        return bytes(dump)


@pytest.fixture
def raw(store_url: str, store: Store) -> Raw:
    return Raw(store_url)


@pytest.fixture
def vault(store: Store) -> Vault:
    return Vault(store, ring(("k1", OLD_KEY)))


def refused(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == vault_module.__name__ and r.levelno == logging.WARNING]


# -- round trip and audit ------------------------------------------------------------------------


def test_put_get_replace_delete_round_trip_with_its_audit(vault: Vault, store: Store, raw: Raw) -> None:
    assert vault.get(ALICE, "github") is None
    vault.put(ALICE, "github", "gho_first")
    assert vault.get(ALICE, "github") == "gho_first"
    vault.put(ALICE, "github", "gho_second")
    assert vault.get(ALICE, "github") == "gho_second"
    record = store.vault_get("alice", "github")
    assert record is not None and record.key_id == "k1"
    assert len(record.sealed) == len(b"gho_second") + 29  # version byte + 96-bit nonce + 128-bit tag
    assert vault.delete(ALICE, "github") is True
    assert vault.get(ALICE, "github") is None
    assert vault.delete(ALICE, "github") is False

    assert raw.vault_audit() == [
        ("alice/github", None, "stored", ALICE.actor, "stored", {"key_id": "k1"}),
        ("alice/github", "stored", "stored", ALICE.actor, "replaced", {"key_id": "k1"}),
        ("alice/github", "stored", "deleted", ALICE.actor, "deleted", {"key_id": "k1"}),
    ]


def test_two_seals_of_one_secret_differ(vault: Vault, store: Store) -> None:
    vault.put(ALICE, "a", "same secret")
    vault.put(ALICE, "b", "same secret")
    first, second = store.vault_get("alice", "a"), store.vault_get("alice", "b")
    assert first is not None and second is not None
    assert first.sealed[1:13] != second.sealed[1:13]  # fresh nonces
    assert first.sealed[13:] != second.sealed[13:]


def test_empty_secret_round_trips(vault: Vault) -> None:
    vault.put(ALICE, "empty", "")
    assert vault.get(ALICE, "empty") == ""


# -- isolation -----------------------------------------------------------------------------------


def test_another_principal_sees_nothing_and_cannot_delete(vault: Vault) -> None:
    vault.put(ALICE, "github", "alice-token")
    assert vault.get(BOB, "github") is None
    assert vault.delete(BOB, "github") is False
    assert vault.get(ALICE, "github") == "alice-token"
    # The entry belongs to the subject: the same principal through another client reads it.
    assert vault.get(ALICE_OTHER_CLIENT, "github") == "alice-token"


def test_a_blob_copied_to_another_principal_or_name_fails_closed(
    vault: Vault, raw: Raw, caplog: pytest.LogCaptureFixture
) -> None:
    vault.put(ALICE, "github", "alice-token")
    vault.put(BOB, "github", "bob-token")
    vault.put(ALICE, "gitlab", "alice-gitlab")
    alice_blob = raw.sealed("alice", "github")

    raw.set_sealed("bob", "github", alice_blob)
    raw.set_sealed("alice", "gitlab", alice_blob)
    raw.execute(
        "INSERT INTO elicit_vault (principal_id, name, key_id, sealed, created_at, updated_at)"
        " SELECT 'carol', name, key_id, sealed, created_at, updated_at FROM elicit_vault"
        " WHERE principal_id = 'alice' AND name = 'github'"
    )
    caplog.set_level(logging.WARNING)
    for principal, name in ((BOB, "github"), (ALICE, "gitlab"), (Principal("carol", "client-a"), "github")):
        with pytest.raises(VaultError) as raised:
            vault.get(principal, name)
        assert str(raised.value) == GENERIC
    assert vault.get(ALICE, "github") == "alice-token"
    assert len(refused(caplog)) == 3
    assert all("authentication failed" in message for message in refused(caplog))


# -- tampering and unknown keys ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["version", "nonce", "ciphertext", "tag"])
def test_a_flipped_byte_fails_closed(vault: Vault, raw: Raw, caplog: pytest.LogCaptureFixture, where: str) -> None:
    vault.put(ALICE, "api", "sk-live-123456")
    blob = bytearray(raw.sealed("alice", "api"))
    index = {"version": 0, "nonce": 5, "ciphertext": 13 + 3, "tag": len(blob) - 1}[where]
    blob[index] ^= 0x01
    raw.set_sealed("alice", "api", bytes(blob))
    caplog.set_level(logging.WARNING)
    with pytest.raises(VaultError, match=f"^{GENERIC}$") as raised:
        vault.get(ALICE, "api")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    expected = "malformed" if where == "version" else "authentication failed"
    assert [m for m in refused(caplog) if expected in m and "'api'" in m and "'alice'" in m]


@pytest.mark.parametrize("blob", [b"", b"\x01", b"\x01" + bytes(27)], ids=["empty", "version-only", "short"])
def test_a_truncated_blob_fails_closed(vault: Vault, raw: Raw, caplog: pytest.LogCaptureFixture, blob: bytes) -> None:
    vault.put(ALICE, "api", "sk-live-123456")
    raw.set_sealed("alice", "api", blob)
    caplog.set_level(logging.WARNING)
    with pytest.raises(VaultError, match=f"^{GENERIC}$"):
        vault.get(ALICE, "api")
    assert any("malformed" in m for m in refused(caplog))


def test_an_unknown_key_id_fails_closed(store: Store, raw: Raw, caplog: pytest.LogCaptureFixture) -> None:
    Vault(store, ring(("k1", OLD_KEY))).put(ALICE, "api", "sk-live-123456")
    caplog.set_level(logging.WARNING)
    stranger = Vault(store, ring(("k9", OTHER_KEY)))
    with pytest.raises(VaultError, match=f"^{GENERIC}$"):
        stranger.get(ALICE, "api")
    assert any("unknown key id 'k1'" in m for m in refused(caplog))


def test_the_same_key_id_with_other_key_bytes_fails_closed(store: Store) -> None:
    Vault(store, ring(("k1", OLD_KEY))).put(ALICE, "api", "sk-live-123456")
    with pytest.raises(VaultError, match=f"^{GENERIC}$"):
        Vault(store, ring(("k1", OTHER_KEY))).get(ALICE, "api")


def test_a_relabelled_key_id_fails_closed(store: Store, raw: Raw, caplog: pytest.LogCaptureFixture) -> None:
    both = Vault(store, ring(("k2", NEW_KEY), ("k1", OLD_KEY)))
    both.put(ALICE, "api", "sealed-under-k2")
    assert raw.execute("UPDATE elicit_vault SET key_id = 'k1' WHERE principal_id = 'alice'") == 1
    caplog.set_level(logging.WARNING)
    with pytest.raises(VaultError, match=f"^{GENERIC}$"):
        both.get(ALICE, "api")
    assert any("authentication failed" in m for m in refused(caplog))


# -- rotation ------------------------------------------------------------------------------------

ENTRIES = [(ALICE, "github", "gho_alice"), (ALICE, "slack", "xoxb-alice"), (BOB, "github", "gho_bob")]


def test_rotation_reseals_under_the_new_key_and_the_old_key_can_then_go(store: Store, raw: Raw) -> None:
    old_only = Vault(store, ring(("old", OLD_KEY)))
    for principal, name, secret in ENTRIES:
        old_only.put(principal, name, secret)

    rolled = Vault(store, ring(("new", NEW_KEY), ("old", OLD_KEY)))
    rolled.put(BOB, "slack", "xoxb-bob")  # a write after the roll-out is sealed under the new key at once
    for principal, name, secret in ENTRIES:
        assert rolled.get(principal, name) == secret
    assert {r.name + "@" + r.principal_id for r in store.vault_entries(key_id_not="new")} == {
        "github@alice",
        "slack@alice",
        "github@bob",
    }
    before = {(p.principal_id, n): raw.sealed(p.principal_id, n) for p, n, _ in ENTRIES}

    assert rolled.rotate() == 3
    assert store.vault_entries(key_id_not="new") == []
    for principal, name, _ in ENTRIES:
        record = store.vault_get(principal.principal_id, name)
        assert record is not None and record.key_id == "new"
        assert record.sealed != before[(principal.principal_id, name)]
    assert rolled.rotate() == 0

    new_only = Vault(store, ring(("new", NEW_KEY)))
    for principal, name, secret in [*ENTRIES, (BOB, "slack", "xoxb-bob")]:
        assert new_only.get(principal, name) == secret
    with pytest.raises(VaultError):
        old_only.get(ALICE, "github")

    rotations = [row for row in raw.vault_audit() if row[3] == vault_module.ROTATION.actor]
    assert sorted(row[0] for row in rotations) == ["alice/github", "alice/slack", "bob/github"]
    assert all(row[1:3] == ("stored", "stored") and row[5] == {"key_id": "new"} for row in rotations)


def test_rotation_pages_through_many_entries_and_leaves_unopenable_ones(
    store: Store, raw: Raw, caplog: pytest.LogCaptureFixture
) -> None:
    old_only = Vault(store, ring(("old", OLD_KEY)))
    for index in range(7):
        old_only.put(Principal(f"user{index % 3}", "client-a"), f"entry{index}", f"secret-{index}")
    Vault(store, ring(("lost", OTHER_KEY))).put(Principal("user0", "client-a"), "orphan", "no key for this")
    raw.set_sealed("user1", "entry1", b"\x01" + bytes(40))  # tampered: cannot be opened

    caplog.set_level(logging.INFO)
    rolled = Vault(store, ring(("new", NEW_KEY), ("old", OLD_KEY)))
    assert rolled.rotate(batch=2) == 6
    assert sorted(r.name for r in store.vault_entries(key_id_not="new")) == ["entry1", "orphan"]
    assert any("2 entries cannot be opened" in m for m in refused(caplog))
    for index in (0, 2, 3, 4, 5, 6):
        assert Vault(store, ring(("new", NEW_KEY))).get(Principal(f"user{index % 3}", "client-a"), f"entry{index}")


def test_a_reseal_never_overwrites_a_concurrent_put(store: Store, raw: Raw) -> None:
    old_only = Vault(store, ring(("old", OLD_KEY)))
    old_only.put(ALICE, "github", "stale")
    snapshot = store.vault_get("alice", "github")
    assert snapshot is not None
    old_only.put(ALICE, "github", "fresh")
    assert store.vault_reseal(snapshot, "new", b"whatever", actor="system:test") is False
    assert old_only.get(ALICE, "github") == "fresh"
    store.vault_delete("alice", "github")
    assert store.vault_reseal(snapshot, "new", b"whatever") is False
    assert store.vault_get("alice", "github") is None
    assert [row[2] for row in raw.vault_audit()] == ["stored", "stored", "deleted"]


def test_vault_entries_pages_in_key_order(store: Store) -> None:
    vault = Vault(store, ring(("k1", OLD_KEY)))
    for principal_id, name in [("b", "x"), ("a", "z"), ("a", "y"), ("c", "a")]:
        vault.put(Principal(principal_id, "c1"), name, "s")
    first = store.vault_entries(limit=2)
    rest = store.vault_entries(limit=10, after=(first[-1].principal_id, first[-1].name))
    assert [(r.principal_id, r.name) for r in [*first, *rest]] == [("a", "y"), ("a", "z"), ("b", "x"), ("c", "a")]
    assert store.vault_entries(key_id_not="k1") == []
    with pytest.raises(ValueError, match="limit"):
        store.vault_entries(limit=0)


# -- nothing leaks -------------------------------------------------------------------------------


def test_the_canary_secret_never_leaves_the_vault_in_clear(
    store: Store, raw: Raw, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    canary = CANARY.encode()
    old_only = Vault(store, ring(("old", OLD_KEY)))
    old_only.put(ALICE, "github", CANARY)
    old_only.put(ALICE, "gitlab", CANARY)
    old_only.put(BOB, "github", "bob-token")
    rolled = Vault(store, ring(("new", NEW_KEY), ("old", OLD_KEY)))
    assert rolled.get(ALICE, "github") == CANARY
    assert rolled.rotate() == 3
    assert rolled.delete(ALICE, "gitlab")
    raw.set_sealed("bob", "github", raw.sealed("alice", "github"))  # a moved blob: refused, logged
    with pytest.raises(VaultError) as raised:
        rolled.get(BOB, "github")

    assert CANARY not in str(raised.value) and CANARY not in repr(raised.value)
    assert CANARY not in repr(rolled) and CANARY not in repr(store.vault_get("alice", "github"))
    assert caplog.records and CANARY not in caplog.text
    audit = raw.vault_audit()
    assert len(audit) == 7 and CANARY not in json.dumps(audit, ensure_ascii=False)
    every_row = json.dumps([[str(v) for v in row] for row in raw.query("SELECT * FROM elicit_audit")])
    assert CANARY not in every_row

    sealed = raw.sealed("alice", "github")
    assert len(sealed) == len(canary) + 29 and canary not in sealed
    stored = raw.everything()
    assert b"alice" in stored and b"github" in stored  # the scan does see the database's content
    assert canary not in stored
    assert CANARY.encode("utf-16-le") not in stored


def test_key_material_never_shows_in_reprs_or_pickles() -> None:
    key_ring = ring(("k1", OLD_KEY), ("k2", NEW_KEY))
    assert repr(key_ring) == "VaultKeyRing(sealing='k1', key_ids=('k1', 'k2'))"
    assert key_ring.sealing_key_id == "k1" and key_ring.key_ids == ("k1", "k2")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(key_ring)


# -- key configuration ---------------------------------------------------------------------------

SHORT = base64.b64encode(os.urandom(16)).decode()
LONG = base64.b64encode(os.urandom(33)).decode()


def _stable(text: str) -> str:
    """A test id without the random keys, the same in every process (pytest-xdist compares them)."""
    for key, name in ((OLD_KEY, "OLD"), (NEW_KEY, "NEW"), (OLD_KEY[:-3], "OLD-3"), (SHORT, "SHORT"), (LONG, "LONG")):
        text = text.replace(key, name)
    return text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no vault keys given"),
        ("   ", "no vault keys given"),
        (f"k1:{SHORT}", r"'k1' decodes to 16 bytes; AES-256 needs exactly 32"),
        (f"k1:{LONG}", r"'k1' decodes to 33 bytes"),
        ("k1:", r"'k1' decodes to 0 bytes"),
        ("k1:not*base64!at-all", r"'k1' is not valid base64"),
        (f"k1:{OLD_KEY[:-3]}", r"'k1' (is not valid base64|decodes to 30 bytes)"),
        (f"k1:{OLD_KEY},k1:{NEW_KEY}", r"the key id 'k1' is given twice"),
        (f"k1:{OLD_KEY},", r"vault key 2 is empty"),
        (f",k1:{OLD_KEY}", r"vault key 1 is empty"),
        (OLD_KEY, r"vault key 1 has no ':'"),
        (f"{OLD_KEY}:{NEW_KEY}", r"vault key 1: a key id is 1 to 32 characters"),
        (f"bad id:{OLD_KEY}", r"vault key 1: a key id is"),
        (f"k1:{OLD_KEY},_k2:{NEW_KEY}", r"vault key 2: a key id is"),
        (f"{'k' * 33}:{OLD_KEY}", r"a key id is 1 to 32 characters"),
        (f"kë:{OLD_KEY}", r"a key id is"),
        (f"k1:{OLD_KEY},k2:{OLD_KEY}", r"vault keys 'k1' and 'k2' are the same key"),
    ],
    ids=lambda value: _stable(str(value)),
)
def test_bad_key_configuration_is_a_clear_error_without_the_key(text: str, message: str) -> None:
    with pytest.raises(VaultError, match=message) as raised:
        VaultKeyRing.from_text(text)
    assert isinstance(raised.value, ValueError)
    for key in (OLD_KEY, NEW_KEY, SHORT, LONG):
        assert key not in str(raised.value)


def test_keys_given_as_bytes_are_checked_too() -> None:
    with pytest.raises(VaultError, match="at least one key"):
        VaultKeyRing([])
    with pytest.raises(VaultError, match="is 31 bytes"):
        VaultKeyRing([("k1", os.urandom(31))])
    with pytest.raises(VaultError, match="must be bytes, not str"):
        VaultKeyRing([("k1", "x" * 32)])  # type: ignore[list-item]
    with pytest.raises(VaultError, match="vault key 1: a key id is 1 to 32 characters"):
        VaultKeyRing([("no spaces", os.urandom(32))])
    with pytest.raises(VaultError, match="vault key 2: a key id is"):
        VaultKeyRing([("k1", os.urandom(32)), (2, os.urandom(32))])  # type: ignore[list-item]
    assert VaultKeyRing([("k1", os.urandom(32))]).key_ids == ("k1",)


def test_a_rotation_reads_at_least_one_entry_at_a_time(store: Store) -> None:
    vault = Vault(store, ring(("new", NEW_KEY), ("old", OLD_KEY)))
    with pytest.raises(ValueError, match="at least one entry at a time, not 0"):
        vault.rotate(batch=0)


def test_url_safe_unpadded_and_spaced_keys_are_the_same_key(store: Store) -> None:
    raw_key = os.urandom(32)
    standard = VaultKeyRing.from_text(f"k1:{base64.b64encode(raw_key).decode()}")
    url_safe = VaultKeyRing.from_text(f"  k1 : {base64.urlsafe_b64encode(raw_key).decode().rstrip('=')}  ")
    Vault(store, standard).put(ALICE, "api", "shared")
    assert Vault(store, url_safe).get(ALICE, "api") == "shared"


def test_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_ELICIT_VAULT_KEYS", raising=False)
    with pytest.raises(VaultError, match="MCP_ELICIT_VAULT_KEYS is not set"):
        VaultKeyRing.from_env()
    monkeypatch.setenv("MCP_ELICIT_VAULT_KEYS", f"k1:{SHORT}")
    with pytest.raises(VaultError, match=r"^MCP_ELICIT_VAULT_KEYS: vault key 'k1' decodes to 16 bytes") as raised:
        VaultKeyRing.from_env()
    assert SHORT not in str(raised.value)
    monkeypatch.setenv("MCP_ELICIT_VAULT_KEYS", f"new:{NEW_KEY}, old:{OLD_KEY}")
    assert VaultKeyRing.from_env().key_ids == ("new", "old")
    assert VaultKeyRing.from_env({"MCP_ELICIT_VAULT_KEYS": f"x:{OTHER_KEY}"}).sealing_key_id == "x"


def test_bad_arguments_are_refused_without_echoing_the_secret(vault: Vault, store: Store) -> None:
    with pytest.raises(ValueError, match="name"):
        vault.put(ALICE, "", "s")
    with pytest.raises(ValueError, match="name"):
        vault.put(ALICE, "line\nbreak", "s")
    with pytest.raises(ValueError, match="name"):
        vault.get(ALICE, "x" * 201)
    with pytest.raises(TypeError, match="not bytes") as raised:
        vault.put(ALICE, "api", CANARY.encode())  # type: ignore[arg-type]
    assert CANARY not in str(raised.value)
    with pytest.raises(ValueError, match="at most 65536 bytes") as too_big:
        vault.put(ALICE, "api", CANARY * 3000)
    assert CANARY not in str(too_big.value)
    with pytest.raises(TypeError, match="Principal"):
        vault.get("alice", "api")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="VaultKeyRing"):
        Vault(store, OLD_KEY)  # type: ignore[arg-type]


# -- every string round-trips ----------------------------------------------------------------------

names = st.text(min_size=1, max_size=40).filter(str.isprintable)


# On the async engine an event loop of its own runs beside the test, and psycopg's pool there draws from the
# `random` module (reconnect jitter) while Hypothesis generates: Hypothesis takes that for the strategy's own use.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=st.text(st.characters(exclude_categories=()), max_size=300), name=names)
def test_any_unicode_secret_round_trips(vault: Vault, store: Store, secret: str, name: str) -> None:
    vault.put(ALICE, name, secret)
    assert vault.get(ALICE, name) == secret
    assert vault.get(BOB, name) is None
    record = store.vault_get(ALICE.principal_id, name)
    assert record is not None
    assert len(record.sealed) == len(secret.encode("utf-8", "surrogatepass")) + 29
