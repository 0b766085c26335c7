"""The token vault: third-party secrets of URL-mode flows, kept server-side and encrypted at rest.

A URL-mode flow (third-party OAuth, an API-key page) ends with a secret the MCP server needs later and
the MCP client must never see. `Vault` keeps it in the store, sealed with AES-256-GCM under a key ring
the operator configures (`MCP_ELICIT_VAULT_KEYS`), one entry per (principal, name).

Guarantees:

- The store only ever holds a sealed blob and the id of the key that sealed it: neither the plaintext
  nor a key reaches the database, its backups or replicas. Each seal uses a fresh random 96-bit nonce.
- A blob opens only in the row it was sealed for: the associated data binds it to the principal id, the
  entry name and the key id, so a blob copied to another row or another principal, edited in place, or
  relabelled with another key id fails to open.
- Failure is closed: an unknown key id, a tampered, truncated or moved blob raises `VaultError` with a
  generic message; the reason goes to this module's logger at WARNING. Nothing returns a partial or
  unauthenticated value.
- The secret appears in no log line, exception message, `repr`, or audit row. Vault writes are audited
  by the store (subject kind `vault`, subject id `principal_id/name`, statuses `stored` / `deleted`)
  with the key id as the only detail.
- `Principal` binding: entries belong to the principal id (the authenticated subject), shared by the
  clients that subject uses; another principal reads `None` for the same name.

Does not guarantee:

- Protection against a compromised server process: whoever runs code in it, reads its memory or its
  environment holds the keys and every plaintext it handles. Python strings cannot be wiped, so a secret
  stays in memory until the garbage collector reuses it.
- Protection of the keys themselves: they come from the environment (or whatever builds the ring);
  keep them out of the database, its backups and the process's logs, and give each deployment its own.
- Confidentiality of the metadata: principal ids, entry names, key ids, timestamps and the secret's
  length (ciphertext length = plaintext length + 29 bytes) are stored in clear.
- Freshness against a database rollback: restoring an old row restores an old, still valid secret.

Keys: `MCP_ELICIT_VAULT_KEYS="id1:base64key,id2:base64key"`, each key exactly 32 random bytes in base64
(standard or URL-safe alphabet, padding optional). The first key seals; every key opens. Generate one:
`python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())"`.

Rotation, each step fully rolled out to every instance before the next:

1. Add the new key *first*: `new:...,old:...`. New entries are sealed under `new`; old ones still open.
2. Run `Vault.rotate()`: it re-seals every entry not under the first key and returns how many. An entry
   it cannot open (unknown key, tampered) is left as it is and logged; a concurrent `put` wins over it.
3. When `store.vault_entries(key_id_not="new")` is empty, drop the old key: `new:...`.

Never reuse a key id for different key material: entries sealed under the old material would fail to
open (closed, but lost).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import struct
from collections.abc import Mapping, Sequence
from typing import NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mcp_elicit.model import Principal, System
from mcp_elicit.settings import Settings, SettingsError, variable
from mcp_elicit.store import Store, VaultRecord

__all__ = ["ENV_VAR", "Vault", "VaultConfigError", "VaultError", "VaultKeyRing"]

log = logging.getLogger(__name__)

ENV_VAR = variable("vault_keys")
KEY_BYTES = 32
MAX_NAME_LENGTH = 200
MAX_SECRET_BYTES = 64 * 1024
ROTATION = System("vault-rotation")

_FORMAT = b"\x01"  # the blob layout version; bound under the tag through the associated data
_NONCE_BYTES = 12
_TAG_BYTES = 16
_AD_LABEL = b"mcp-elicit/vault/v1"
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
_KEY_ID_RULE = "a key id is 1 to 32 characters of A-Z a-z 0-9 . _ -, starting with a letter or a digit"
_ROTATE_BATCH = 500
_GENERATE = 'python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())"'
_OPEN_FAILED = "the vault entry cannot be opened"


class VaultError(Exception):
    """A vault entry cannot be opened, or the vault keys are unusable.

    Opening failures carry one generic message whatever the cause; the cause is logged at WARNING.
    """


class VaultConfigError(VaultError, ValueError):
    """The key configuration is unusable. The message says which entry and why, never the key material."""


def _utf8(text: str) -> bytes:
    # surrogatepass keeps every Python string sealable and restores it exactly.
    return text.encode("utf-8", "surrogatepass")


def _associated_data(key_id: str, principal_id: str, name: str) -> bytes:
    """What the tag binds besides the plaintext: the layout version, the key id and the row.

    Each part is length-prefixed, so ("a/b", "c") and ("a", "b/c") bind differently.
    """
    parts = [_AD_LABEL, _FORMAT, *(_utf8(field) for field in (key_id, principal_id, name))]
    return b"".join(struct.pack(">I", len(part)) + part for part in parts)


class VaultKeyRing:
    """The vault's AES-256 keys by id. The first one seals new entries; all of them open.

    Holds the key material only inside the AEAD objects; its `repr` names the ids and nothing else.
    """

    __slots__ = ("_aeads", "_sealing")

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise VaultConfigError(f"the vault needs at least one key (id:base64key); generate one with: {_GENERATE}")
        self._aeads: dict[str, AESGCM] = {}
        seen: dict[bytes, str] = {}
        for position, (key_id, key) in enumerate(keys, start=1):
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise VaultConfigError(f"vault key {position}: {_KEY_ID_RULE}")
            if key_id in self._aeads:
                raise VaultConfigError(f"vault key {position}: the key id {key_id!r} is given twice")
            if not isinstance(key, bytes | bytearray):
                raise VaultConfigError(f"vault key {key_id!r}: the key must be bytes, not {type(key).__name__}")
            if len(key) != KEY_BYTES:
                raise VaultConfigError(
                    f"vault key {key_id!r} is {len(key)} bytes; AES-256 needs exactly {KEY_BYTES} random bytes. "
                    f"Generate one with: {_GENERATE}"
                )
            material = bytes(key)
            if material in seen:
                raise VaultConfigError(
                    f"vault keys {seen[material]!r} and {key_id!r} are the same key; a new key id needs new key bytes"
                )
            seen[material] = key_id
            self._aeads[key_id] = AESGCM(material)
        self._sealing = keys[0][0]

    @classmethod
    def from_text(cls, text: str) -> VaultKeyRing:
        """Parse `id1:base64key,id2:base64key` (whitespace around entries is ignored)."""
        if not text.strip():
            raise VaultConfigError(
                f"no vault keys given: expected 'id:base64key[,id:base64key...]'; generate a key with: {_GENERATE}"
            )
        keys: list[tuple[str, bytes]] = []
        for position, entry in enumerate(text.split(","), start=1):
            if not entry.strip():
                raise VaultConfigError(f"vault key {position} is empty (a stray comma?)")
            key_id, colon, encoded = entry.partition(":")
            key_id = key_id.strip()
            if not colon:
                raise VaultConfigError(f"vault key {position} has no ':'; expected 'id:base64key'")
            if not _KEY_ID.fullmatch(key_id):
                # The id is not echoed: a malformed entry may hold the key where the id belongs.
                raise VaultConfigError(f"vault key {position}: {_KEY_ID_RULE}")
            keys.append((key_id, _decode_key(key_id, encoded.strip())))
        return cls(keys)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> VaultKeyRing:
        """The ring configured in `MCP_ELICIT_VAULT_KEYS` or the file `MCP_ELICIT_VAULT_KEYS_FILE` names (in
        `environ`, when given; see `mcp_elicit.settings`)."""
        try:
            settings = Settings.read(environ, only=["vault_keys"])
        except SettingsError as error:
            raise VaultConfigError(str(error)) from None
        if settings.vault_keys is None:
            raise VaultConfigError(
                f"{ENV_VAR} is not set: give it 'id:base64key' (32 random bytes); generate one with: {_GENERATE}"
            )
        try:
            return cls.from_text(settings.vault_keys.get_secret_value())
        except VaultConfigError as error:
            raise VaultConfigError(f"{settings.origin('vault_keys')}: {error}") from None

    @property
    def sealing_key_id(self) -> str:
        """The id of the key that seals new entries (the first one)."""
        return self._sealing

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._aeads)

    def _aead(self, key_id: str) -> AESGCM | None:
        return self._aeads.get(key_id)

    def __repr__(self) -> str:
        return f"VaultKeyRing(sealing={self._sealing!r}, key_ids={self.key_ids!r})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a VaultKeyRing holds secret keys and cannot be pickled")


def _decode_key(key_id: str, encoded: str) -> bytes:
    normalized = encoded.replace("-", "+").replace("_", "/")
    normalized += "=" * (-len(normalized) % 4)
    try:
        raw = base64.b64decode(normalized, validate=True)
    except (binascii.Error, ValueError):
        raise VaultConfigError(f"vault key {key_id!r} is not valid base64; generate one with: {_GENERATE}") from None
    if len(raw) != KEY_BYTES:
        raise VaultConfigError(
            f"vault key {key_id!r} decodes to {len(raw)} bytes; AES-256 needs exactly {KEY_BYTES}. "
            f"Generate one with: {_GENERATE}"
        )
    return raw


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH or not name.isprintable():
        raise ValueError(f"a vault entry name is 1 to {MAX_NAME_LENGTH} printable characters")


def _check_principal(principal: Principal) -> None:
    if not isinstance(principal, Principal):
        raise TypeError(f"the vault is used on behalf of a Principal, not {type(principal).__name__}")


class Vault:
    """Secrets sealed per (principal, name) in a `Store`, under a `VaultKeyRing`."""

    __slots__ = ("_ring", "_store")

    def __init__(self, store: Store, ring: VaultKeyRing) -> None:
        if not isinstance(ring, VaultKeyRing):
            raise TypeError(f"a Vault needs a VaultKeyRing, not {type(ring).__name__}")
        self._store = store
        self._ring = ring

    def __repr__(self) -> str:
        return f"Vault({self._store.display_url}, {self._ring!r})"

    def put(self, principal: Principal, name: str, secret: str) -> None:
        """Seal `secret` under the sealing key and store it as the principal's entry `name`, replacing any."""
        _check_principal(principal)
        _check_name(name)
        if not isinstance(secret, str):
            raise TypeError(f"a vault secret is a str, not {type(secret).__name__}")
        plaintext = _utf8(secret)
        if len(plaintext) > MAX_SECRET_BYTES:
            raise ValueError(f"a vault secret is at most {MAX_SECRET_BYTES} bytes of UTF-8, this one {len(plaintext)}")
        key_id = self._ring.sealing_key_id
        sealed = self._seal(key_id, principal.principal_id, name, plaintext)
        self._store.vault_put(principal.principal_id, name, key_id, sealed, actor=principal.actor)

    def get(self, principal: Principal, name: str) -> str | None:
        """The principal's secret `name`, or None if there is none. Raises `VaultError` if it cannot be opened."""
        _check_principal(principal)
        _check_name(name)
        record = self._store.vault_get(principal.principal_id, name)
        if record is None:
            return None
        return self._open(record).decode("utf-8", "surrogatepass")

    def delete(self, principal: Principal, name: str) -> bool:
        """Remove the principal's entry `name`; False if there was none."""
        _check_principal(principal)
        _check_name(name)
        return self._store.vault_delete(principal.principal_id, name, actor=principal.actor)

    def rotate(self, *, batch: int = _ROTATE_BATCH) -> int:
        """Re-seal every entry not under the sealing key; return how many were re-sealed.

        Entries that cannot be opened are left untouched and logged. An entry changed by a concurrent
        `put` meanwhile is skipped: the newer value stands (and was sealed by the writer's ring). The entries
        are read `batch` at a time, so a large vault is never held in memory at once.
        """
        if batch < 1:
            raise ValueError(f"a rotation reads at least one entry at a time, not {batch}")
        current = self._ring.sealing_key_id
        resealed = unopenable = 0
        after: tuple[str, str] | None = None
        while True:
            entries = self._store.vault_entries(key_id_not=current, limit=batch, after=after)
            for record in entries:
                try:
                    plaintext = self._open(record)
                except VaultError:
                    unopenable += 1
                    continue
                sealed = self._seal(current, record.principal_id, record.name, plaintext)
                if self._store.vault_reseal(record, current, sealed, actor=ROTATION.actor):
                    resealed += 1
            if len(entries) < batch:
                break
            after = (entries[-1].principal_id, entries[-1].name)
        log.info("vault rotation: %d entries re-sealed under key %r", resealed, current)
        if unopenable:
            log.warning(
                "vault rotation: %d entries cannot be opened with the key ring %s and stay as they are",
                unopenable,
                self._ring.key_ids,
            )
        return resealed

    # -- sealing --------------------------------------------------------------------------------

    def _seal(self, key_id: str, principal_id: str, name: str, plaintext: bytes) -> bytes:
        aead = self._ring._aead(key_id)
        if aead is None:  # the sealing key is always in the ring
            raise AssertionError(f"sealing key {key_id!r} missing from the ring")
        nonce = os.urandom(_NONCE_BYTES)
        return _FORMAT + nonce + aead.encrypt(nonce, plaintext, _associated_data(key_id, principal_id, name))

    def _open(self, record: VaultRecord) -> bytes:
        aead = self._ring._aead(record.key_id)
        if aead is None:
            self._refuse(record, f"unknown key id {record.key_id!r} (the ring has {self._ring.key_ids})")
        blob = record.sealed
        if len(blob) < len(_FORMAT) + _NONCE_BYTES + _TAG_BYTES or blob[: len(_FORMAT)] != _FORMAT:
            self._refuse(record, "malformed blob (wrong layout version or truncated)")
        nonce = blob[len(_FORMAT) : len(_FORMAT) + _NONCE_BYTES]
        ciphertext = blob[len(_FORMAT) + _NONCE_BYTES :]
        try:
            return aead.decrypt(nonce, ciphertext, _associated_data(record.key_id, record.principal_id, record.name))
        except InvalidTag:
            self._refuse(record, "authentication failed: the blob was altered, or sealed for another entry")

    @staticmethod
    def _refuse(record: VaultRecord, reason: str) -> NoReturn:
        log.warning("vault entry %r of principal %r cannot be opened: %s", record.name, record.principal_id, reason)
        raise VaultError(_OPEN_FAILED) from None
