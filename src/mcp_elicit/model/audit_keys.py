"""The Ed25519 keys that sign audit checkpoints, and the published public keys that check them.

A ring of signing keys rotates like the other key rings: the newest (first) signs, and every key's public half
stays published, so a checkpoint signed before a rotation still verifies. A key's id is the first 16 hex digits
of the SHA-256 of its raw 32-byte public key: anyone holding the public key computes the same id.

Verification takes public keys from a source the verifier trusts (the published document fetched from the
server, a file kept apart, or the signing seeds themselves), never from the store: whoever can write to the
database could write a key of their own there and sign forged checkpoints with it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

SEED_BYTES = 32
ALGORITHM = "Ed25519"
_ALGORITHMS = frozenset({ALGORITHM, "EdDSA"})
KEY_TYPE = "OKP"
"""A JWK's `kty` for an Ed25519 key (RFC 8037), whose `crv` is `ALGORITHM`."""
KEYS_PATH = "/.well-known/mcp-elicit/audit-keys"
"""Where a served app publishes its audit public keys (`AuditPublicKeys.document()`)."""


class AuditKeyError(ValueError):
    """Keys that cannot be used: a seed of the wrong length, a published document of the wrong shape."""


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class Signature:
    key_id: str
    value: str
    """The signature, base64url without padding."""


class AuditSigningKeys:
    """The ring of signing keys, newest first: the first signs, all are published."""

    def __init__(self, seeds: Sequence[bytes]) -> None:
        if not seeds:
            raise AuditKeyError("an audit key ring needs at least one key")
        keys = []
        for position, seed in enumerate(seeds, start=1):
            if len(seed) != SEED_BYTES:
                raise AuditKeyError(f"audit key {position} has {len(seed)} bytes; an Ed25519 seed has {SEED_BYTES}")
            keys.append(Ed25519PrivateKey.from_private_bytes(seed))
        self._keys = keys

    def __repr__(self) -> str:
        return f"AuditSigningKeys({', '.join(self.public().ids())})"

    def sign(self, message: bytes) -> Signature:
        signer = self._keys[0]
        return Signature(key_id(signer.public_key()), _b64url(signer.sign(message)))

    def public(self) -> AuditPublicKeys:
        return AuditPublicKeys([key.public_key() for key in self._keys])


class AuditPublicKeys:
    """Public keys by id: what verify checks checkpoints with, and what a served app publishes."""

    def __init__(self, keys: Sequence[Ed25519PublicKey]) -> None:
        self._keys = {key_id(key): key for key in keys}

    def ids(self) -> list[str]:
        return list(self._keys)

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def verifies(self, signature: Signature, message: bytes) -> bool:
        """Whether `signature` is the key's (which must be known: check `in` first) over `message`."""
        try:
            raw = base64.urlsafe_b64decode(signature.value + "=" * (-len(signature.value) % 4))
            self._keys[signature.key_id].verify(raw, message)
        except (InvalidSignature, binascii.Error, ValueError, KeyError):
            return False
        return True

    def document(self) -> dict[str, list[dict[str, str]]]:
        """A JWK set (RFC 8037): `{"keys": [{"kty": "OKP", "crv": "Ed25519", "kid", "alg": "Ed25519", "x"}]}`, `x`
        the raw public key, base64url, so that JOSE libraries read it as it is."""
        return {"keys": [_jwk(kid, key) for kid, key in self._keys.items()]}

    @classmethod
    def from_document(cls, document: object) -> AuditPublicKeys:
        """The keys of a published document; each key's id must be the one its key gives, and its `kty` and `crv`,
        when it has them (a document published before they were added has not), an Ed25519 key's."""
        entries = document.get("keys") if isinstance(document, Mapping) else None
        if not isinstance(entries, list) or not entries:
            raise AuditKeyError('not an audit keys document: expected {"keys": [{"kid", "alg", "x"}, ...]}')
        keys = []
        for position, entry in enumerate(entries, start=1):
            # RFC 8037 names the JWS algorithm "EdDSA"; this server writes the key's own name: either is an Ed25519 key.
            if (
                not isinstance(entry, Mapping)
                or entry.get("alg") not in _ALGORITHMS
                or not isinstance(entry.get("x"), str)
            ):
                raise AuditKeyError(f"key {position} is not an Ed25519 key with its public key in x")
            if entry.get("kty", KEY_TYPE) != KEY_TYPE or entry.get("crv", ALGORITHM) != ALGORITHM:
                raise AuditKeyError(
                    f'key {position} is not an Ed25519 key: a JWK\'s "kty" is "OKP", its "crv" "Ed25519"'
                )
            try:
                text = entry["x"]
                key = Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            except (binascii.Error, ValueError):
                raise AuditKeyError(f"key {position}: x is not a base64url Ed25519 public key") from None
            if entry.get("kid") != key_id(key):
                raise AuditKeyError(f"key {position}: its kid {entry.get('kid')!r} is not its key's id {key_id(key)}")
            keys.append(key)
        return cls(keys)


def _jwk(kid: str, key: Ed25519PublicKey) -> dict[str, str]:
    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"kty": KEY_TYPE, "crv": ALGORITHM, "kid": kid, "alg": ALGORITHM, "x": _b64url(raw)}
