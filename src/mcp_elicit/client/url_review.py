"""Reviewing a URL-mode elicitation's URL before a person is asked to open it.

Guarantees: `review_url` never fetches anything; it parses the text. It reports the host in the form a
person can compare (Unicode, and the ASCII form the browser will really use), and warns when the URL is not
HTTPS (loopback development excepted), when the host is an IP literal, when it is punycode or mixes writing
systems (the look-alike tricks), when it carries user-info (`https://bank.example@evil.example/` opens
evil.example), or when it is no http(s) URL at all, which a client must not offer to open.

Does not guarantee: that a host without warnings is the one the person expects. Only the person, shown the
server, the message and the highlighted host, can judge that.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit


class UrlWarning(StrEnum):
    NOT_HTTP = "not an http(s) URL: do not open it"
    NOT_HTTPS = "not HTTPS: what you type there can be read on the way"
    IP_LITERAL = "the host is a bare IP address, not a name"
    PUNYCODE = "the host is written in punycode: it may imitate another name"
    MIXED_SCRIPTS = "the host mixes writing systems: it may imitate another name"
    USERINFO = "the URL hides a name before '@': the real host is after it"


LOOPBACK_NAMES = frozenset({"localhost"})


@dataclass(frozen=True, slots=True)
class UrlReview:
    url: str
    scheme: str
    host: str
    host_ascii: str
    warnings: tuple[UrlWarning, ...]

    @property
    def may_open(self) -> bool:
        """Whether a client may offer to open it at all (after explicit consent)."""
        return UrlWarning.NOT_HTTP not in self.warnings


def review_url(url: str) -> UrlReview:
    try:
        parts = urlsplit(url.strip())
        hostname = parts.hostname or ""
    except ValueError:
        return UrlReview(url, "", "", "", (UrlWarning.NOT_HTTP,))
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not hostname:
        return UrlReview(url, scheme, hostname, hostname, (UrlWarning.NOT_HTTP,))
    host_ascii, host_unicode = _host_forms(hostname)
    warnings: list[UrlWarning] = []
    loopback = _is_loopback(host_ascii)
    if scheme == "http" and not loopback:
        warnings.append(UrlWarning.NOT_HTTPS)
    if _is_ip(host_ascii) and not loopback:
        warnings.append(UrlWarning.IP_LITERAL)
    if any(label.startswith("xn--") for label in host_ascii.split(".")):
        warnings.append(UrlWarning.PUNYCODE)
    if _mixes_scripts(host_unicode):
        warnings.append(UrlWarning.MIXED_SCRIPTS)
    if parts.username is not None or "@" in parts.netloc:
        warnings.append(UrlWarning.USERINFO)
    return UrlReview(url, scheme, host_unicode, host_ascii, tuple(warnings))


def _host_forms(hostname: str) -> tuple[str, str]:
    """(ASCII as the browser resolves it, Unicode as a person reads it); undecodable punycode stays ASCII."""
    try:
        ascii_form = hostname.encode("idna").decode("ascii")
    except UnicodeError:
        ascii_form = hostname
    try:
        unicode_form = ascii_form.encode("ascii").decode("idna")
    except UnicodeError:
        unicode_form = hostname
    return ascii_form.lower(), unicode_form


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _script(character: str) -> str | None:
    if not character.isalpha():
        return None
    name = unicodedata.name(character, "")
    return name.split(" ", 1)[0] if name else None


def _mixes_scripts(host: str) -> bool:
    """Letters of more than one script within one label (by the first word of their Unicode names)."""
    for label in host.split("."):
        scripts = {script for script in map(_script, label) if script is not None}
        if len(scripts) > 1:
            return True
    return False
