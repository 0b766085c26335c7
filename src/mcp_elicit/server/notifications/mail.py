"""E-mail notifications: a `Mail` target sends "decision waiting" and "decision escalated" (by default) through an
SMTP server.

A mail target is delivered by the outbox like a webhook (`mcp_elicit.server.notifications.delivery`): at least once,
retried with the same backoff, marked dead once the retry policy gives up. Each attempt is one SMTP session in a
worker thread (the standard library's `smtplib`); the attempt gives up after `Notifications.timeout` (each socket
operation is bounded by it too, though not the session as a whole: see `delivery`): STARTTLS (the default) or
implicit TLS, each checking the server's certificate against the system's trust store (`SSL_CERT_FILE` names
another), or plain SMTP to a loopback relay only; then the login, when a username is given, and the message.

The message has a subject and a plain-text body, with a simple HTML alternative: the tool, what its call is about
(the redacted summary the pages show), the deadline and the decision page's signed link (`Notifications.links`).
Its `Message-ID` is the event's, so the copy a retry may send (a server that took the message and whose answer was
lost) is recognizably the same message.

Guarantees: no header can be injected: line breaks (CR, LF and the Unicode ones) are removed from everything that
goes into a header, the addresses are checked when the target is built, and the message is written by the `email`
package's SMTP policy, which refuses a header with a line break in it. The HTML is escaped. The password is never
logged, stored or shown in `repr`; a failed attempt is recorded by the error's kind and SMTP code only, not by the
server's words, which may quote addresses.

Does not guarantee: that a recipient reads the message, nor secrecy past the server taken (mail is relayed on in
whatever way the server relays it): that is why a message carries no question and no answer, and the link
authorizes nothing by itself.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import smtplib
import ssl
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from typing import Literal

from mcp_elicit.server.notifications import wording
from mcp_elicit.store.protocol import Delivery, NotificationEvent

Security = Literal["starttls", "tls", "plain"]
PORTS: dict[str, int] = {"starttls": 587, "tls": 465, "plain": 25}
_LOOPBACK_NAMES = frozenset({"localhost"})


@dataclass(frozen=True, slots=True)
class Mail:
    """One mail subscription: the events (by default `decision.waiting` and `decision.escalated`, those that ask
    someone to act) sent from `sender` to `to` through the SMTP server at `host`.

    `security`: `"starttls"` (port 587 by default), `"tls"` (implicit TLS, port 465) or `"plain"` (port 25), which
    is allowed to a loopback address only (a relay on the same host). `username` and `password` log in, when given.
    `tls` is the TLS context that checks the server (default: the system's trust store). `name` keys the target's
    rows in the outbox and names it in the log, by default `smtp://host:port` and a digest of the server, the sender
    and the recipients; every instance must give the same target the same name.
    """

    host: str
    sender: str
    to: Sequence[str]
    port: int | None = None
    security: Security = "starttls"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    events: AbstractSet[NotificationEvent] = frozenset(
        {NotificationEvent.DECISION_WAITING, NotificationEvent.DECISION_ESCALATED}
    )
    name: str | None = None
    tls: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.host or any(c.isspace() or c in "/@[]" for c in self.host.strip("[]")):
            raise ValueError(f"a mail target's host is a host name or an address, not {self.host!r}")
        if self.security not in PORTS:
            raise ValueError(f"a mail target's security is starttls, tls or plain, not {self.security!r}")
        if self.security == "plain" and not _loopback(self.host):
            raise ValueError(
                f"plain SMTP to {self.host} would send the message (and any login) in clear: it is for a relay on "
                "loopback only; use security='starttls' or 'tls'"
            )
        port = PORTS[self.security] if self.port is None else self.port
        if not 0 < port < 65536:
            raise ValueError(f"a mail target's port is from 1 to 65535, not {port}")
        object.__setattr__(self, "port", port)
        if (self.username is None) != (self.password is None):
            raise ValueError("a mail target's login needs both username= and password=, or neither")
        if self.username is not None and any(c in self.username for c in "\r\n\0"):
            raise ValueError("a mail target's username holds a line break")
        object.__setattr__(self, "sender", _address(self.sender, "sender"))
        if isinstance(self.to, str):
            raise TypeError("a mail target's to= is a list of addresses, not one string")
        recipients = tuple(_address(address, "recipient") for address in self.to)
        if not recipients:
            raise ValueError("a mail target needs at least one recipient in to=")
        object.__setattr__(self, "to", recipients)
        events = frozenset(NotificationEvent(event) for event in self.events)
        if not events:
            raise ValueError(f"mail target {self.origin} subscribes to no event")
        object.__setattr__(self, "events", events)
        if self.name is None:
            digest = hashlib.sha256("\n".join([self.host, str(port), self.sender, *recipients]).encode()).hexdigest()
            object.__setattr__(self, "name", f"{self.origin} ({digest[:12]})")

    @property
    def subscription(self) -> str:
        assert self.name is not None
        return self.name

    @property
    def origin(self) -> str:
        """`smtp://host:port`: how the log names the server (never a login)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"smtp://{host}:{self.port}"

    def message(self, delivery: Delivery, link: str | None) -> EmailMessage:
        """The message of one delivery; `link` is the decision's signed page, for an event that asks someone to act."""
        tool, about, until = wording.tool(delivery), wording.about(delivery), wording.when(delivery.deadline)
        headline = wording.headline(delivery)
        message = EmailMessage(policy=SMTP)
        message["Subject"] = wording.single_line(
            f"{headline} (until {until})" if wording.waiting(delivery) else headline
        )
        message["From"] = self.sender
        message["To"] = ", ".join(self.to)
        message["Date"] = format_datetime(delivery.occurred_at)
        message["Message-ID"] = f"<{delivery.event.value}.{delivery.elicitation_id}@{self.sender.rpartition('@')[2]}>"
        message["Auto-Submitted"] = "auto-generated"
        facts = [("Tool", tool)]
        if about:
            facts.append(("Call", about))
        if wording.waiting(delivery):
            facts.append(("Until", until))
            if link is not None:
                facts.append(("Open", link))
        else:
            facts.append(("Status", delivery.status.value))
        width = max(len(term) for term, _ in facts) + 3
        lines = [f"{headline}.", "", *(f"{term + ':':<{width}}{value}" for term, value in facts), ""]
        if link is not None and wording.waiting(delivery):
            lines.append("The link itself decides nothing: you sign in, and the page shows you the question.")
        lines.append(f"Decision {delivery.elicitation_id} of operation {delivery.operation_id}.")
        message.set_content("\n".join(lines) + "\n")
        rows = "".join(
            f'<tr><th align="left">{html.escape(term)}</th><td>{_cell(term, value, link)}</td></tr>'
            for term, value in facts
        )
        message.add_alternative(
            f"<!doctype html><html><body><p><strong>{html.escape(headline)}</strong></p><table>{rows}</table>"
            f"<p>Decision {html.escape(delivery.elicitation_id)}.</p></body></html>",
            subtype="html",
        )
        return message

    def send(self, message: EmailMessage, timeout: float) -> int:
        """One SMTP session that hands `message` over (blocking: run it in a worker thread); how many recipients the
        server refused while it took the message for the others (when it takes it for none, that raises)."""
        assert self.port is not None
        context = self.tls or ssl.create_default_context()
        client: smtplib.SMTP
        if self.security == "tls":
            client = smtplib.SMTP_SSL(self.host, self.port, timeout=timeout, context=context)
        else:
            client = smtplib.SMTP(self.host, self.port, timeout=timeout)
        with client:
            if self.security == "starttls":
                client.starttls(context=context)
            if self.username is not None and self.password is not None:
                client.login(self.username, self.password)
            refused = client.send_message(message)
        return len(refused)


def described(error: BaseException) -> str:
    """What the outbox records and the log says of a failed attempt: the error's kind and SMTP code, no words."""
    code = getattr(error, "smtp_code", None)
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        codes = sorted({str(answer[0]) for answer in error.recipients.values()})
        return f"SMTPRecipientsRefused {'/'.join(codes)}"
    return f"{type(error).__name__} {code}" if isinstance(code, int) else type(error).__name__


def _cell(term: str, value: str, link: str | None) -> str:
    if term == "Open" and link is not None:
        return f'<a href="{html.escape(link)}">Open the decision</a>'
    if term == "Call":
        return f"<code>{html.escape(value)}</code>"
    return html.escape(value)


def _address(given: str, role: str) -> str:
    """An address as the message will carry it; refused with a line break, without a domain, or unparseable."""
    if not isinstance(given, str) or any(c in given for c in "\r\n\0") or given.count("@") != 1:
        raise ValueError(f"a mail {role} is one address, local-part@domain, not {given!r}")
    local, domain = given.strip().split("@")
    try:
        return str(Address(username=local, domain=domain))
    except (ValueError, IndexError) as error:
        raise ValueError(f"a mail {role} is one address, local-part@domain, not {given!r} ({error})") from None


def _loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
