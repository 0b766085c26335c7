"""Sign-ins kept per server: the tokens `mcp-elicit login URL` obtained, which `mcp-elicit call URL` then uses.

Guarantees: one file per server under the user's data directory (`$XDG_DATA_HOME/mcp-elicit/logins/`, by
default `~/.local/share/mcp-elicit/logins/`), named by a digest of the server's canonical URL, in a
directory of mode 0700. A file is created with mode 0600 (never readable by others, not even for an
instant) and replaced atomically, so a reader sees the old sign-in or the new one, never half of either.
A file that others can read or write, or that another user owns, is refused, not used, with the command
that fixes it. An access token within `REFRESH_MARGIN` of its expiry is renewed with the refresh token
when the authorization server issued one, and the renewed tokens replace the file; a sign-in that cannot be
renewed says to sign in again.

Does not guarantee: encryption at rest. Like `~/.netrc` or an SSH key, the file is protected by its mode
and the account alone; anyone who can read it can act as the user until the tokens expire or are revoked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import httpx2
from mcp.shared.auth_utils import resource_url_from_server_url

__all__ = ["LoginError", "LoginStore", "SavedLogin", "canonical_server", "default_login_dir", "fresh_access_token"]

log = logging.getLogger(__name__)

VERSION: Final = 1
REFRESH_MARGIN: Final = 60.0
"""Seconds before its expiry at which an access token is renewed instead of sent."""
_SECRET_METHODS: Final = ("client_secret_post", "client_secret_basic")


class LoginError(RuntimeError):
    """A kept sign-in cannot be used; the message says why and what to run."""


def default_login_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mcp-elicit" / "logins"


def canonical_server(url: str) -> str:
    """The server's URL as the sign-in is kept under: scheme and host lower-case, no fragment, no trailing slash."""
    return resource_url_from_server_url(url.strip()).rstrip("/")


@dataclass(frozen=True, slots=True)
class SavedLogin:
    """What a later call needs: the tokens, and how to renew them (the token endpoint, the client)."""

    server: str
    issuer: str | None
    token_endpoint: str
    client_id: str
    access_token: str = field(repr=False)
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint_auth_method: str | None = None
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    scope: str | None = None
    resource: str | None = None

    def due(self, now: float) -> bool:
        """Expired, or about to: renew before sending it."""
        return self.expires_at is not None and now >= self.expires_at - REFRESH_MARGIN

    def renewed(self, answer: dict[str, Any], now: float) -> SavedLogin:
        """This sign-in with the tokens of a token-endpoint answer (RFC 6749 §5.1); a refresh token it leaves
        out stays the one held (§6: the server need not rotate it)."""
        access = answer.get("access_token")
        if not isinstance(access, str) or not access:
            raise LoginError("the authorization server's answer has no access_token")
        refresh = answer.get("refresh_token")
        expires_in = answer.get("expires_in")
        scope = answer.get("scope")
        return replace(
            self,
            access_token=access,
            refresh_token=refresh if isinstance(refresh, str) and refresh else self.refresh_token,
            expires_at=now + float(expires_in) if isinstance(expires_in, int | float) else None,
            scope=scope if isinstance(scope, str) else self.scope,
        )


class LoginStore:
    """The kept sign-ins of this user, one file per server."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or default_login_dir()

    def path_for(self, server: str) -> Path:
        digest = hashlib.sha256(canonical_server(server).encode()).hexdigest()[:32]
        return self.directory / f"{digest}.json"

    def load(self, server: str) -> SavedLogin | None:
        """The sign-in kept for `server`, or None if there is none; `LoginError` if its file cannot be trusted."""
        path = self.path_for(server)
        try:
            descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return None
        except OSError as error:
            raise LoginError(f"the sign-in file {path} cannot be read ({error.strerror})") from None
        with os.fdopen(descriptor, "rb") as opened:
            status = os.fstat(opened.fileno())
            if hasattr(os, "getuid") and status.st_uid != os.getuid():
                raise LoginError(f"the sign-in file {path} belongs to another user; remove it and sign in again")
            if status.st_mode & 0o077:
                raise LoginError(
                    f"the sign-in file {path} can be read or written by others (mode {status.st_mode & 0o777:o}); "
                    f"its tokens may have leaked: remove it, sign in again, or at least run chmod 600 {path}"
                )
            raw = opened.read()
        try:
            data = json.loads(raw)
            if data.pop("version", None) != VERSION:
                raise ValueError("unknown version")
            login = SavedLogin(**data)
        except (ValueError, TypeError):
            raise LoginError(f"the sign-in file {path} is not one this mcp-elicit wrote; sign in again") from None
        if login.server != canonical_server(server):
            raise LoginError(f"the sign-in file {path} is for {login.server}, not {server}; sign in again")
        return login

    def save(self, login: SavedLogin) -> Path:
        """Write the sign-in, mode 0600 from the start, replacing any earlier one for its server at once."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        path = self.path_for(login.server)
        text = json.dumps({"version": VERSION, **asdict(login)}, indent=2, sort_keys=True)
        descriptor, temporary = tempfile.mkstemp(prefix=".login-", dir=self.directory)  # created 0600
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return path

    def remove(self, server: str) -> bool:
        try:
            self.path_for(server).unlink()
        except FileNotFoundError:
            return False
        return True


async def fresh_access_token(
    logins: LoginStore,
    login: SavedLogin,
    *,
    http: Callable[[], httpx2.AsyncClient] | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """The kept access token, renewed first (and the renewal kept) when it is due and can be renewed."""
    now = clock()
    if not login.due(now):
        return login.access_token
    again = f"sign in again: mcp-elicit login {login.server}"
    if login.refresh_token is None:
        raise LoginError(f"the sign-in to {login.server} has expired and its server issued no refresh token; {again}")
    data = {"grant_type": "refresh_token", "refresh_token": login.refresh_token, "client_id": login.client_id}
    if login.resource:
        data["resource"] = login.resource
    headers = {"Accept": "application/json"}
    basic = login.token_endpoint_auth_method == _SECRET_METHODS[1]
    if login.client_secret is not None and basic:
        pair = f"{quote(login.client_id, safe='')}:{quote(login.client_secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        del data["client_id"]
    elif login.client_secret is not None and login.token_endpoint_auth_method in (None, *_SECRET_METHODS):
        data["client_secret"] = login.client_secret
    client = (http or (lambda: httpx2.AsyncClient(timeout=30)))()
    try:
        async with client:
            response = await client.post(login.token_endpoint, data=data, headers=headers)
    except httpx2.HTTPError as error:
        raise LoginError(
            f"the sign-in to {login.server} has expired and the authorization server could not be reached to "
            f"renew it ({type(error).__name__}); try again, or {again}"
        ) from None
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if response.status_code != 200 or not isinstance(answer, dict):
        reason = answer.get("error") if isinstance(answer, dict) else None
        said = f"{reason}" if isinstance(reason, str) else f"HTTP {response.status_code}"
        raise LoginError(f"the sign-in to {login.server} has expired and could not be renewed ({said}); {again}")
    renewed = login.renewed(answer, clock())
    logins.save(renewed)
    log.info("renewed the access token for %s", login.server)
    return renewed.access_token
