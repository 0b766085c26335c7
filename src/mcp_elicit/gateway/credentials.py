"""An upstream's credential per person: what `[upstream.credential]` says, and how the gateway sends it.

Why per person: an upstream that acts for someone (their tickets, their repositories) needs that someone's key or
token, which the model and the client must never see. Each signed-in person connects the upstream once, on the
gateway's own page (a URL-mode decision: `mcp_elicit.web.flows`' `ApiKeyEntry` or `OAuthConnect`), which keeps
the secret in the vault under the person and the upstream; the gateway opens that person's sessions with the
upstream carrying it, in an HTTP header of every request or in a variable of the process it starts
(`mcp_elicit.gateway.upstream`), and those sessions carry nobody else's calls.

Guarantees: the secret goes from the vault into the upstream's connection and nowhere else; the configuration
holds no secret (an OAuth client's secret is read from the variable the file names, at start).
Does not guarantee: that the upstream keeps the secret to itself (one that echoes it back is the upstream's doing).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Annotated, Final, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mcp_elicit.web.flows import ApiKeyEntry, ExternalFlow, OAuthConnect, unfit_secret

__all__ = ["CONNECT_TOOL", "SECRET", "Credential", "connect_key", "vault_name"]

SECRET: Final = "{secret}"  # noqa: S105 (the placeholder, not a secret)
"""Where the secret goes in `value`."""
CONNECT_TOOL: Final = "connect"
"""The gateway's own tool of an upstream with a credential, under the upstream's prefix: it connects the person's
account (again, to replace it)."""
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_OAUTH_KEYS: Final = ("authorize_url", "token_url", "client_id", "client_secret_env")


class Credential(BaseModel):
    """An `[upstream.credential]` table: what each person connects, and how it is sent to the upstream."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: Literal["api_key", "oauth"]
    """`api_key`: the person types it on the gateway's page; `oauth`: they sign in at the provider, whose access
    token is kept."""
    title: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    """How the pages name the service ("connect your GitHub account"); default: the upstream's name."""
    header: Annotated[str, Field(pattern=f"^{_HEADER.pattern}$")] | None = None
    """An HTTP upstream: the header every request carries it in (default `Authorization`)."""
    env: Annotated[str, Field(pattern=f"^{_VARIABLE.pattern}$")] | None = None
    """A stdio upstream: the variable its process is started with (required there)."""
    value: str | None = None
    """What the header or variable holds, `{secret}` standing for the secret: default `Bearer {secret}` for a
    header, `{secret}` for a variable."""
    authorize_url: str | None = None
    """`oauth`: the provider's authorization endpoint."""
    token_url: str | None = None
    """`oauth`: the provider's token endpoint."""
    client_id: Annotated[str, Field(min_length=1)] | None = None
    """`oauth`: the gateway's client id at the provider."""
    client_secret_env: Annotated[str, Field(pattern=f"^{_VARIABLE.pattern}$")] | None = None
    """`oauth`: the environment variable that holds the gateway's client secret at the provider (never the secret
    itself in the file), read at start."""
    scope: str = ""
    """`oauth`: the scopes asked for, space-separated."""

    @field_validator("authorize_url", "token_url")
    @classmethod
    def _endpoint(cls, url: str | None) -> str | None:
        parts = urlsplit(url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an https:// URL, not {url!r}")
        if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
            raise ValueError(f"expected an https:// URL (plain http on loopback only), not {url!r}")
        return url

    @field_validator("value")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None and (value.count(SECRET) != 1 or unfit_secret(value, header=False) is not None):
            raise ValueError(f"expected one {SECRET} where the secret goes, on one line, without control characters")
        return value

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.kind == "oauth":
            missing = [key for key in _OAUTH_KEYS if getattr(self, key) is None]
            if missing:
                raise ValueError(f'expected {", ".join(missing)} with kind = "oauth"')
        else:
            given = [key for key in (*_OAUTH_KEYS, "scope") if key in self.model_fields_set]
            if given:
                raise ValueError(f'expected no {", ".join(given)} with kind = "api_key" (they are for "oauth")')
        return self

    def carried(self, *, command: bool) -> str | None:
        """What keeps this credential from working with an upstream given by a command (`command`) or a URL: the
        key path under the table, and what was expected; None when it fits."""
        if command and self.header is not None:
            return "header: expected with url only: a command's credential goes in env"
        if command and self.env is None:
            return "env: missing; a command's credential goes in the variable env names"
        if not command and self.env is not None:
            return "env: expected with command only: an HTTP upstream's credential goes in header"
        if not command and self.value is not None and unfit_secret(self.value, header=True) is not None:
            return "value: expected printable ASCII: it goes in an HTTP header"
        return None

    def unfit(self, secret: str) -> str | None:
        """What keeps a person's `secret` from being sent (in a header for an HTTP upstream, in a variable for a
        command), said without quoting it; None when it fits. The page refuses such a key as it is typed; this
        catches a provider's token, or a key stored before the page checked."""
        unfit = unfit_secret(secret, header=self.env is None)
        return (
            None if unfit is None else f"{unfit}, so it cannot go in {'a header' if self.env is None else 'a variable'}"
        )

    def headers(self, secret: str) -> dict[str, str]:
        """The headers an HTTP upstream's requests carry for the person whose `secret` this is."""
        return {self.header or "Authorization": (self.value or f"Bearer {SECRET}").replace(SECRET, secret)}

    def variables(self, secret: str) -> dict[str, str]:
        """The variables a stdio upstream's process gets for the person whose `secret` this is."""
        assert self.env is not None
        return {self.env: (self.value or SECRET).replace(SECRET, secret)}

    def flow(self, upstream: str, environ: Mapping[str, str]) -> ExternalFlow:
        """The page's flow that connects it, keeping the secret in the vault; `ValueError` naming
        `client_secret_env` when the variable it names is not set."""
        title = self.title or upstream
        if self.kind == "api_key":
            return ApiKeyEntry(vault_name=vault_name(upstream), service_title=title, header=self.env is None)
        assert self.client_secret_env is not None
        secret = environ.get(self.client_secret_env, "")
        if not secret.strip():
            said = "empty" if self.client_secret_env in environ else "not set"
            raise ValueError(
                f"client_secret_env: expected the name of a variable set in the gateway's environment, with the "
                f"client secret of {title}; {self.client_secret_env} is {said}"
            )
        assert self.authorize_url is not None
        assert self.token_url is not None
        assert self.client_id is not None
        return OAuthConnect(
            vault_name=vault_name(upstream),
            provider_title=title,
            authorize_url=self.authorize_url,
            token_url=self.token_url,
            client_id=self.client_id,
            client_secret=secret.strip(),
            scope=self.scope,
        )

    def doing(self, upstream: str) -> str:
        """What the person is asked to connect: "your GitHub account", "your Tickets API key"."""
        return f"your {self.title or upstream} {'API key' if self.kind == 'api_key' else 'account'}"


def vault_name(upstream: str) -> str:
    """The vault entry a person's credential of `upstream` is kept under."""
    return f"gateway/upstream/{upstream}"


def connect_key(upstream: str) -> str:
    """The key of the decision that connects `upstream` (the pages find its flow by it): `connect.` and the name,
    which is 64 characters at most, so at most 72; a longer key is not a question key, so names past 56 characters
    are shortened with a digest."""
    key = f"connect.{upstream}"
    if len(key) <= 64:
        return key
    return f"{key[:47]}.{hashlib.sha256(upstream.encode()).hexdigest()[:16]}"
