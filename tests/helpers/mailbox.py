"""A real SMTP server on loopback for the mail notification tests: aiosmtpd in its own thread, keeping what it takes.

It can refuse the first messages (a `451` to DATA, as a server that is busy does), refuse some recipients (`550`),
offer STARTTLS with a certificate of the test's CA and require it, serve implicit TLS, and require a login.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.helpers.balancer import Tls
from tests.helpers.http_harness import free_port

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Taken:
    sender: str
    recipients: list[str]
    data: bytes
    login: str | None

    @property
    def message(self) -> EmailMessage:
        parsed = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class Mailbox:
    """What the server took, and its script of refusals; read under `lock`."""

    def __init__(self, *, refuse: int, refuse_recipients: frozenset[str], login: tuple[str, str] | None) -> None:
        self.refuse = refuse
        self.refuse_recipients = refuse_recipients
        self.login = login
        self.taken: list[Taken] = []
        self.refused: list[str] = []
        self.logins: list[str] = []
        self.lock = threading.Lock()
        self.port = 0

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: list[str]) -> str:
        if address in self.refuse_recipients:
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            if self.refuse > 0:
                self.refuse -= 1
                self.refused.append(envelope.mail_from)
                return "451 4.3.0 busy, try again later"
            login = session.auth_data.decode() if isinstance(session.auth_data, bytes) else None
            self.taken.append(Taken(envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content, login))
        return "250 OK"

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        if isinstance(data, LoginPassword) and self.login is not None:
            username, password = data.login.decode(), data.password.decode()
            with self.lock:
                self.logins.append(username)
            if (username, password) == self.login:
                return AuthResult(success=True, auth_data=data.login)
        return AuthResult(success=False, handled=False)

    def messages(self) -> list[Taken]:
        with self.lock:
            return list(self.taken)


@contextmanager
def mailbox(
    *,
    refuse: int = 0,
    refuse_recipients: frozenset[str] = frozenset(),
    starttls: Tls | None = None,
    implicit_tls: Tls | None = None,
    login: tuple[str, str] | None = None,
) -> Iterator[Mailbox]:
    """An SMTP server on a free loopback port: STARTTLS required with `starttls`, TLS from the first byte with
    `implicit_tls`, a login required with `login` (username, password)."""
    box = Mailbox(refuse=refuse, refuse_recipients=refuse_recipients, login=login)
    box.port = free_port()
    options: dict[str, Any] = {}
    if starttls is not None:
        options.update(tls_context=_server_context(starttls), require_starttls=True)
    if login is not None:
        options.update(authenticator=box.authenticate, auth_required=True, auth_require_tls=starttls is not None)
    controller = Controller(
        box,
        hostname=HOST,
        port=box.port,
        ssl_context=_server_context(implicit_tls) if implicit_tls is not None else None,
        **options,
    )
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


def _server_context(tls: Tls) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.chain)
    return context
