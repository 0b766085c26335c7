"""The `MCP_ELICIT_*` environment settings, read in one place: `Settings`.

Every variable mcp-elicit reads is a field here, and the table of docs/guides/configuration.md documents each one.
A secret may come from a file instead (systemd credentials, Docker or Kubernetes secrets): the file that
`MCP_ELICIT_<NAME>_FILE` names holds the value, surrounding whitespace ignored. Such a file must not be open to
other users (mode 600, or 640 for the service's group), and a variable and its `_FILE` are never both set.

A blank variable counts as not set. Each field checks its own format (a key ring's keys, a URL); what a
command needs, and the objects built from the text (`LocalUsers.from_text`, `VaultKeyRing.from_text`,
`Webhook`, `Mail`), are the business of the code that uses them. Every problem names its variable, never a
secret's value.

The command line's `--store` option, `gateway --config` and `serve --log-format` take `MCP_ELICIT_STORE`,
`MCP_ELICIT_GATEWAY_CONFIG` and `MCP_ELICIT_LOG_FORMAT` through the command line parser, so that
`mcp-elicit decisions ls` starts without loading this module.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from collections.abc import Collection, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, PrivateAttr, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mcp_elicit.model.approvers import ROLE

__all__ = ["PREFIX", "SECRETS", "Settings", "SettingsError", "variable"]

PREFIX: Final = "MCP_ELICIT_"
MAX_FILE_BYTES: Final = 64 * 1024
GENERATE_KEY: Final = (
    'python -c "import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"'
)
_MIN_KEY_BYTES: Final = 32


class SettingsError(ValueError):
    """Settings that cannot be used: every problem found, each naming its variable, none repeating a secret."""

    def __init__(self, problems: Collection[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


def _key_ring(text: object) -> object:
    """Comma-separated base64 keys (URL-safe or standard, padding optional) of at least 32 bytes, newest first."""
    if not isinstance(text, str):
        return text
    keys: list[bytes] = []
    for index, part in enumerate(p.strip() for p in text.split(",")):
        try:
            standard = part.replace("-", "+").replace("_", "/")
            key = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {index + 1} is not base64; generate one with: {GENERATE_KEY}") from None
        if len(key) < _MIN_KEY_BYTES:
            raise ValueError(
                f"key {index + 1} has {len(key)} bytes; at least {_MIN_KEY_BYTES} are needed; "
                f"generate one with: {GENERATE_KEY}"
            )
        if key in keys:
            raise ValueError(f"key {index + 1} repeats key {keys.index(key) + 1}; give each key of the ring once")
        keys.append(key)
    return tuple(keys)


def _audit_seeds(text: object) -> object:
    """A key ring (`_key_ring`) whose keys are Ed25519 seeds: exactly 32 bytes each."""
    keys = _key_ring(text)
    if isinstance(keys, tuple):
        for index, key in enumerate(keys):
            if len(key) != _MIN_KEY_BYTES:
                raise ValueError(
                    f"key {index + 1} has {len(key)} bytes; an Ed25519 seed has exactly {_MIN_KEY_BYTES}; "
                    f"generate one with: {GENERATE_KEY}"
                )
    return keys


def _names(text: object) -> object:
    """Comma-separated names; blanks around and between them are ignored."""
    if not isinstance(text, str):
        return text
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _role_members(text: object) -> object:
    """`role=member,member;role=member`: each approver role and the people in it (usernames or principal ids)."""
    if not isinstance(text, str):
        return text
    members: dict[str, tuple[str, ...]] = {}
    for position, part in enumerate((p.strip() for p in text.split(";")), start=1):
        if not part:
            continue
        role, equals, names = (word.strip() for word in part.partition("="))
        people = tuple(name.strip() for name in names.split(",") if name.strip())
        if not equals or not role or not people:
            example = "release-managers=alice,bob;finance=carol"
            raise ValueError(f"part {position} ({part!r}) is not role=member,member: write e.g. {example}")
        if not ROLE.fullmatch(role):
            raise ValueError(
                f"part {position} names the role {role!r}: a role is 1-64 letters, digits and _.:@/-, "
                "starting with a letter or digit"
            )
        if role in members:
            raise ValueError(f"the role {role} is named twice; list all its members in one part")
        members[role] = people
    return members


def _base_url(text: object) -> object:
    """An http(s) URL with a host and neither query nor fragment; its trailing slashes dropped."""
    if not isinstance(text, str):
        return text
    url = text.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"must be an http(s) base URL, not {url!r}")
    return url


def _exact_url(text: object) -> object:
    """An http(s) URL with a host and neither query nor fragment, kept as written: an issuer is compared with
    each token's `iss` character for character (Auth0's ends in a slash)."""
    if not isinstance(text, str):
        return text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"must be an http(s) URL without query or fragment, not {text!r}")
    return text


_CLAIM_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.:/-]{0,127}")
_NOT_SUBJECTS: Final = frozenset(
    {"iss", "aud", "exp", "nbf", "iat", "jti", "nonce", "azp", "client_id", "scope", "scp"}
)
_NOT_IDENTIFIERS: Final = frozenset(
    {
        *("name", "given_name", "family_name", "middle_name", "nickname", "preferred_username"),
        *("email", "phone_number", "profile", "picture", "website", "address"),
        *("upn", "unique_name", "username", "login", "mail"),
    }
)
"""OpenID Connect Core 5.7: the profile claims "MUST NOT be used as unique identifiers"; Entra ID's `upn` and
`unique_name` are reassigned and renamed by its administrators."""


def _claim_name(text: object) -> object:
    """The name of a token claim that names the person (`oid`): one the provider gives every token alike."""
    if not isinstance(text, str):
        return text
    if not _CLAIM_NAME.fullmatch(text):
        raise ValueError(
            f"{text!r} is not a claim name: 1-128 letters, digits and _.:/-, starting with a letter (e.g. oid)"
        )
    if text in _NOT_SUBJECTS:
        raise ValueError(f"{text} is a claim about the token, not about its person; name e.g. sub or oid")
    if text in _NOT_IDENTIFIERS:
        raise ValueError(
            f"{text} is what the person is called, not a stable identifier: an address or user name can be given to "
            "someone else, or set by a person on their own account, and with it their decisions and roles; name sub, "
            "or the provider's immutable id (oid for Entra ID)"
        )
    return text


KeyRing = Annotated[tuple[bytes, ...] | None, BeforeValidator(_key_ring), Field(repr=False)]
SeedRing = Annotated[tuple[bytes, ...] | None, BeforeValidator(_audit_seeds), Field(repr=False)]
Names = Annotated[tuple[str, ...], BeforeValidator(_names)]
RoleMembers = Annotated[dict[str, tuple[str, ...]], BeforeValidator(_role_members)]
BaseURL = Annotated[str | None, BeforeValidator(_base_url)]
ExactURL = Annotated[str | None, BeforeValidator(_exact_url)]
ClaimName = Annotated[str | None, BeforeValidator(_claim_name)]
Secret = Annotated[SecretStr | None, Field(repr=False)]


class Settings(BaseSettings):
    """mcp-elicit's configuration from `MCP_ELICIT_*` variables. `Settings.read()` says every problem at once."""

    model_config = SettingsConfigDict(frozen=True)

    store: str | None = None
    """`MCP_ELICIT_STORE`: the store URL (`sqlite:///path/elicit.db`, `postgresql://user@host/db`)."""
    users: Secret = None
    """`MCP_ELICIT_USERS`: who signs in to the local authorization server, `username:password[:display name],...`."""
    idp_issuer: ExactURL = None
    """`MCP_ELICIT_IDP_ISSUER`: the external identity provider (OpenID Connect) whose access tokens `gateway` accepts
    and whose sign-in its pages use, in place of the local authorization server; its `iss` as written."""
    idp_audience: ExactURL = None
    """`MCP_ELICIT_IDP_AUDIENCE`: the `aud` its access tokens carry for this server (default: the MCP endpoint)."""
    idp_client_id: str | None = None
    """`MCP_ELICIT_IDP_CLIENT_ID`: the pages' OpenID Connect client id at the provider (a confidential client)."""
    idp_client_secret: Secret = None
    """`MCP_ELICIT_IDP_CLIENT_SECRET`: that client's secret."""
    idp_subject_claim: ClaimName = None
    """`MCP_ELICIT_IDP_SUBJECT_CLAIM`: the claim of access and ID tokens that names the person (default `sub`):
    `oid` for Entra ID, whose `sub` differs from one application to another."""
    auth_keys: KeyRing = None
    """`MCP_ELICIT_AUTH_KEYS`: signs access tokens, codes, browser sessions and page forms; the first signs."""
    state_keys: KeyRing = None
    """`MCP_ELICIT_STATE_KEYS`: seals 2026-07-28 `requestState`; the first seals, every key opens."""
    vault_keys: Secret = None
    """`MCP_ELICIT_VAULT_KEYS`: the vault's AES-256 keys, `id:base64key,...`; the first seals."""
    audit_keys: SeedRing = None
    """`MCP_ELICIT_AUDIT_KEYS`: Ed25519 seeds signing the audit's checkpoints; the first signs, all are published."""
    operators: Names = ()
    """`MCP_ELICIT_OPERATORS`: usernames (among the users) who see and may cancel everyone's decisions."""
    approver_roles: RoleMembers = Field(default_factory=dict)
    """`MCP_ELICIT_APPROVER_ROLES`: who holds each approver role, `role=username,username;role=username`."""
    provider_url: BaseURL = None
    """`MCP_ELICIT_PROVIDER_URL`: the third-party OAuth provider's base URL (serves `connect_account`)."""
    provider_client_id: str | None = None
    """`MCP_ELICIT_PROVIDER_CLIENT_ID`: this server's client id at the provider."""
    provider_client_secret: Secret = None
    """`MCP_ELICIT_PROVIDER_CLIENT_SECRET`: this server's client secret at the provider."""
    provider_webhook_secret: Secret = None
    """`MCP_ELICIT_PROVIDER_WEBHOOK_SECRET`: the secret the provider's payment webhooks are signed with (at least 16
    characters); with it, the reference server serves `pay_invoice`."""
    webhook_url: Secret = None
    """`MCP_ELICIT_WEBHOOK_URL`: where notifications are POSTed (its path and query are often a secret)."""
    webhook_secret: Secret = None
    """`MCP_ELICIT_WEBHOOK_SECRET`: signs them, `whsec_` and the base64 of 24 bytes or more."""
    webhook_events: Names = ()
    """`MCP_ELICIT_WEBHOOK_EVENTS`: the events sent (default all)."""
    webhook_format: Literal["standard", "slack"] | None = None
    """`MCP_ELICIT_WEBHOOK_FORMAT`: `standard` (signed Standard Webhooks JSON, the default) or `slack`."""
    smtp_host: str | None = None
    """`MCP_ELICIT_SMTP_HOST`: the SMTP server "decision waiting" mail goes through; when set, mail is sent."""
    smtp_port: int | None = Field(default=None, ge=1, le=65535)
    """`MCP_ELICIT_SMTP_PORT`: its port (default 587 for STARTTLS, 465 for TLS, 25 for plain)."""
    smtp_security: Literal["starttls", "tls", "plain"] | None = None
    """`MCP_ELICIT_SMTP_SECURITY`: `starttls` (the default), `tls`, or `plain` to a loopback relay only."""
    smtp_username: str | None = None
    """`MCP_ELICIT_SMTP_USERNAME`: the login at the SMTP server, if it wants one."""
    smtp_password: Secret = None
    """`MCP_ELICIT_SMTP_PASSWORD`: its password."""
    mail_from: str | None = None
    """`MCP_ELICIT_MAIL_FROM`: the sender's address."""
    mail_to: Names = ()
    """`MCP_ELICIT_MAIL_TO`: the recipients' addresses, comma-separated."""
    token: Secret = None
    """`MCP_ELICIT_TOKEN`: the bearer token `mcp-elicit call` sends to an http(s) server."""
    gateway_config: str | None = None
    """`MCP_ELICIT_GATEWAY_CONFIG`: the gateway's configuration file, `gateway.toml` (`mcp-elicit gateway --config`)."""

    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _READING.get() or _Variables(settings_cls, os.environ))

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None, *, only: Collection[str] | None = None) -> Self:
        """The settings in `environ` (default: this process's environment), or only the fields `only` names.

        Raises `SettingsError` with every problem, in the fields' order. A command reads the fields it uses, so
        that a variable meant for another command never stands in its way.
        """
        names = list(cls.model_fields) if only is None else list(only)
        unknown = sorted(set(names) - set(cls.model_fields))
        if unknown:
            raise ValueError(f"no such setting: {', '.join(unknown)}")
        source = _Variables(cls, os.environ if environ is None else environ, names, collect=True)
        settings = None
        # Validation runs the model's sources (pydantic calls a settings class's own `__init__`), so the
        # environment given here is handed to them rather than validated beside this process's environment.
        reading = _READING.set(source)
        try:
            settings = cls()
        except ValidationError as error:
            for found in error.errors(include_url=False, include_input=False):
                name = str(found["loc"][0])
                cause = found.get("ctx", {}).get("error", found["msg"])  # what a validator raised, else pydantic's
                source.problems.setdefault(name, f"{source.origins[name]}: {cause}")
        finally:
            _READING.reset(reading)
        problems = source.problems
        if settings is None or problems:
            raise SettingsError([problems[name] for name in cls.model_fields if name in problems])
        settings._origins.update(source.origins)
        return settings

    def origin(self, name: str) -> str:
        """Where field `name` came from, to name it in a problem: its variable, or the `_FILE` one and the file."""
        return self._origins.get(name, variable(name))


SECRETS: Final = frozenset(name for name, field in Settings.model_fields.items() if field.repr is False)
"""The fields kept out of `repr`: the secrets, each of which may come from a file."""


def variable(name: str) -> str:
    """The environment variable of the field `name`."""
    return PREFIX + name.upper()


class _Variables(PydanticBaseSettingsSource):
    """Each field from its variable, or for a secret from the file its `_FILE` variable names.

    `Settings()` reads this process's environment through it, and a file that cannot be used raises
    `SettingsError` there; `Settings.read` collects the problems instead, to say them all at once.
    """

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        environ: Mapping[str, str],
        names: Collection[str] | None = None,
        *,
        collect: bool = False,
    ) -> None:
        super().__init__(settings_cls)
        self._environ = environ
        self._names = list(settings_cls.model_fields) if names is None else list(names)
        self._collect = collect
        self.problems: dict[str, str] = {}
        self.origins: dict[str, str] = {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._environ.get(variable(field_name)), variable(field_name), False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in self._names:
            given = (self._environ.get(variable(name)) or "").strip()
            named = (self._environ.get(variable(name) + "_FILE") or "").strip() if name in SECRETS else ""
            if given and named:
                self.problems[name] = f"{variable(name)} and {variable(name)}_FILE are both set; set one of them"
            elif named:
                self.origins[name] = f"{variable(name)}_FILE ({named})"
                try:
                    values[name] = _read_secret(Path(named))
                except ValueError as error:
                    self.problems[name] = f"{self.origins[name]}: {error}"
            elif given:
                self.origins[name] = variable(name)
                values[name] = given
        if self.problems and not self._collect:
            raise SettingsError(list(self.problems.values()))
        return values


_READING: ContextVar[_Variables | None] = ContextVar("mcp_elicit_settings_reading", default=None)
"""The source `Settings.read` validates from, in place of this process's environment."""


def _read_secret(path: Path) -> str:
    """A secret file's text: refused when other users may open it or its group may change it, when it is no
    regular file (a pipe would hold the start up), when empty, and when too large for a setting."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as opened:
            mode = os.fstat(opened.fileno()).st_mode
            data = opened.read(MAX_FILE_BYTES + 1) if stat.S_ISREG(mode) else b""
    except OSError as error:
        raise ValueError(f"cannot be read: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise ValueError("is not a regular file")
    if os.name == "posix" and mode & (stat.S_IRWXO | stat.S_IWGRP):
        who = "other users may open it" if mode & stat.S_IRWXO else "its group may change it"
        raise ValueError(
            f"{who} (mode {stat.S_IMODE(mode):04o}); "
            f"give it to the service's user alone: chmod 600 {path} (or 640 for its group)"
        )
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"is larger than {MAX_FILE_BYTES // 1024} KiB, too large for a setting")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None
    if not text:
        raise ValueError("is empty")
    return text
