"""Reviewing a URL-mode elicitation's URL before a person is asked to open it.

Guarantees: `review_url` never fetches anything; it parses the text the way a browser does (the WHATWG URL
rules for http and https) and rebuilds the URL from the parts it reviewed. That rebuilt URL is what the
person is shown and what the kit opens after consent, never the server's text itself: so the highlighted
host is the host the browser will contact, whatever tricks the text plays. The review reports the host in
the form a person can compare (Unicode) and the ASCII form the browser really looks up (IDNA 2008 / UTS 46,
non-transitional, as browsers do: `faß.de` is `xn--fa-hia.de`, not `fass.de`).

It refuses to offer (the `refuses` warnings) a URL that is no http(s) URL at all, one whose host a browser
reads differently from how it is written (a backslash before the path, which browsers take for `/`; a
number of slashes other than two), one with `%` in the host (browsers decode it into another name), and
one whose host is no valid name or address (a browser would not open it either, or guess). It warns when
the URL is not HTTPS (loopback development excepted), when the host is an IP address (numeric, hex,
octal and short IPv4 forms such as `2130706433`, `0x7f000001` or `127.1` included, shown as the address
they mean), when it is punycode or mixes writing systems, when it holds `ß`, `ς` or an invisible joiner
(names that older software reads as another one), when it was written in an unusual form (full-width
letters, other dots, characters browsers drop), and when it carries user-info
(`https://bank.example@evil.example/` opens evil.example).

Does not guarantee: that a host without warnings is the one the person expects. Only the person, shown the
server, the message and the highlighted host, can judge that.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote, urlsplit

import idna


class UrlWarning(StrEnum):
    NOT_HTTP = "not an http(s) URL: do not open it"
    AMBIGUOUS = "browsers read the host of this URL differently from how it is written: do not open it"
    ENCODED_HOST = "the host contains '%': browsers decode it into another name: do not open it"
    INVALID_HOST = "the host is not a valid name or address: do not open it"
    NOT_HTTPS = "not HTTPS: what you type there can be read on the way"
    IP_LITERAL = "the host is a bare IP address, not a name"
    PUNYCODE = "the host is written in punycode: it may imitate another name"
    MIXED_SCRIPTS = "the host mixes writing systems: it may imitate another name"
    DEVIATION = "the host contains ß, ς or an invisible joiner: it may pass for another name"
    NON_CANONICAL = "the URL was written in an unusual form (shown as a browser reads it): it may imitate another"
    USERINFO = "the URL hides a name before '@': the real host is after it"

    @property
    def refuses(self) -> bool:
        """Whether this warning alone means the URL must not be offered at all."""
        return self in _REFUSING


_REFUSING = frozenset({UrlWarning.NOT_HTTP, UrlWarning.AMBIGUOUS, UrlWarning.ENCODED_HOST, UrlWarning.INVALID_HOST})
LOOPBACK_NAMES = frozenset({"localhost"})
_EDGES = "".join(map(chr, range(0x21)))
"""C0 controls and space: browsers strip them from both ends of a URL."""
_DROPPED = re.compile("[\t\n\r]")
"""Browsers remove tabs and line breaks anywhere in a URL."""
_DOTS = re.compile("[.\u3002\uff0e\uff61]")
"""The label separators of UTS 46: the full stop and three look-alikes browsers treat as one."""
_ASCII_LABEL = re.compile(r"[a-z0-9_-]*")
"""What browsers accept in an ASCII label (underscores included, which strict IDNA would refuse)."""
_DEVIATIONS = frozenset("\u00df\u03c2\u200c\u200d")
"""The UTS 46 deviation characters: transitional processing (older software) maps them to another name."""


@dataclass(frozen=True, slots=True)
class UrlReview:
    """What a person is shown before consenting, and what is opened after.

    `url` is the URL rebuilt from the reviewed parts: shown, and the only text the kit ever opens. For a
    refused URL (`may_open` false) it is the server's text, stripped, shown so the person sees what was
    refused. `sent` is the server's text as it arrived. `host_span` locates `host_ascii` (bracketed for
    IPv6) inside `url`, for highlighting; None when refused.
    """

    url: str
    scheme: str
    host: str
    host_ascii: str
    warnings: tuple[UrlWarning, ...]
    sent: str = ""
    host_span: tuple[int, int] | None = None

    @property
    def may_open(self) -> bool:
        """Whether a client may offer to open it at all (after explicit consent)."""
        return not any(warning.refuses for warning in self.warnings)


class _Refused(Exception):
    def __init__(self, warning: UrlWarning) -> None:
        self.warning = warning


@dataclass(frozen=True, slots=True)
class _Host:
    ascii: str
    unicode: str
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    unusual: bool
    deviation: bool


def review_url(url: str) -> UrlReview:
    stripped = url.strip(_EDGES)
    cleaned = _DROPPED.sub("", stripped)
    try:
        parts = urlsplit(cleaned)
        scheme = parts.scheme.lower()
    except ValueError:
        scheme = cleaned.partition(":")[0].lower()
        if scheme in ("http", "https"):
            return UrlReview(stripped, scheme, "", "", (UrlWarning.INVALID_HOST,), url)
        return UrlReview(stripped, "", "", "", (UrlWarning.NOT_HTTP,), url)
    if scheme not in ("http", "https"):
        return UrlReview(stripped, scheme, "", "", (UrlWarning.NOT_HTTP,), url)
    host_text = ""
    try:
        authority = _authority(cleaned[len(parts.scheme) + 1 :])
        userinfo, at, host_and_port = authority.rpartition("@")
        host_text, port = _split_port(host_and_port)
        if "%" in host_text:
            raise _Refused(UrlWarning.ENCODED_HOST)
        host = _host(host_text)
    except _Refused as refused:
        warnings = [refused.warning]
        if _DEVIATIONS.intersection(host_text):
            warnings.append(UrlWarning.DEVIATION)
        return UrlReview(stripped, scheme, host_text.lower(), host_text.lower(), tuple(warnings), url)
    shown_host = f"[{host.ascii}]" if isinstance(host.ip, ipaddress.IPv6Address) else host.ascii
    prefix = f"{scheme}://" + (_visible(userinfo).replace("@", "%40") + "@" if at else "")
    rebuilt = (
        prefix + shown_host + (f":{port}" if port is not None else "") + _rest(parts.path, parts.query, parts.fragment)
    )
    found = _warnings(scheme, host, bool(at), unusual=host.unusual or cleaned != stripped)
    span = (len(prefix), len(prefix) + len(shown_host))
    return UrlReview(rebuilt, scheme, host.unicode, host.ascii, found, url, span)


def _authority(after_scheme: str) -> str:
    """The text between `//` and the path; refused when a browser would find the host elsewhere."""
    slashes = len(after_scheme) - len(after_scheme.lstrip("/\\"))
    if after_scheme[:slashes] != "//":
        raise _Refused(UrlWarning.AMBIGUOUS)
    authority = re.match(r"[^/?#]*", after_scheme[slashes:])
    assert authority is not None
    if "\\" in authority.group():
        raise _Refused(UrlWarning.AMBIGUOUS)
    return authority.group()


def _split_port(host_and_port: str) -> tuple[str, int | None]:
    if host_and_port.startswith("["):
        end = host_and_port.find("]")
        if end < 0:
            raise _Refused(UrlWarning.INVALID_HOST)
        host, rest = host_and_port[: end + 1], host_and_port[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _Refused(UrlWarning.INVALID_HOST)
        port_text = rest[1:]
    else:
        host, _, port_text = host_and_port.partition(":")
        if ":" in port_text:
            raise _Refused(UrlWarning.INVALID_HOST)
    if not host:
        raise _Refused(UrlWarning.INVALID_HOST)
    if not port_text:
        return host, None
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise _Refused(UrlWarning.INVALID_HOST)
    return host, int(port_text)


def _host(text: str) -> _Host:
    if text.startswith("["):
        try:
            address = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise _Refused(UrlWarning.INVALID_HOST) from None
        return _Host(address.compressed, address.compressed, address, text[1:-1].lower() != address.compressed, False)
    labels = _DOTS.split(text)
    if any(label == "" for label in labels[:-1]) or (len(labels) == 1 and not labels[0]):
        raise _Refused(UrlWarning.INVALID_HOST)
    ascii_labels: list[str] = []
    unicode_labels: list[str] = []
    for label in labels:
        ascii_label, unicode_label = _label(label)
        ascii_labels.append(ascii_label)
        unicode_labels.append(unicode_label)
    if _ends_in_number(ascii_labels):
        ipv4 = _ipv4(ascii_labels)
        if ipv4 is None:
            raise _Refused(UrlWarning.INVALID_HOST)
        return _Host(str(ipv4), str(ipv4), ipv4, text != str(ipv4), False)
    ascii_form, unicode_form = ".".join(ascii_labels), ".".join(unicode_labels)
    deviation = bool(_DEVIATIONS.intersection(text) or _DEVIATIONS.intersection(unicode_form))
    return _Host(ascii_form, unicode_form, None, text.lower() not in (ascii_form, unicode_form), deviation)


def _label(label: str) -> tuple[str, str]:
    """(ASCII, Unicode) forms of one label, as UTS 46 non-transitional processing gives them."""
    if label.isascii():
        lower = label.lower()
        if not _ASCII_LABEL.fullmatch(lower):
            raise _Refused(UrlWarning.INVALID_HOST)
        if not lower.startswith("xn--"):
            return lower, lower
        try:
            decoded = idna.decode(lower)
            canonical = idna.encode(decoded, uts46=True, transitional=False).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            raise _Refused(UrlWarning.INVALID_HOST) from None
        if canonical != lower:
            raise _Refused(UrlWarning.INVALID_HOST)
        return lower, decoded
    try:
        encoded = idna.encode(label, uts46=True, transitional=False).decode("ascii")
        return encoded, idna.decode(encoded) if encoded.startswith("xn--") else encoded
    except (idna.IDNAError, UnicodeError):
        raise _Refused(UrlWarning.INVALID_HOST) from None


def _ends_in_number(labels: list[str]) -> bool:
    """The WHATWG rule: a host whose last label is a number is an IPv4 address, or no host at all."""
    parts = labels[:-1] if len(labels) > 1 and labels[-1] == "" else labels
    last = parts[-1]
    return (last.isascii() and last.isdigit()) or _ipv4_number(last) is not None


def _ipv4_number(text: str) -> int | None:
    if not text:
        return None
    base, digits = 10, text
    if text[:2] in ("0x", "0X"):
        base, digits = 16, text[2:]
        if not digits:
            return 0
    elif len(text) > 1 and text[0] == "0":
        base, digits = 8, text[1:]
    allowed = {10: "0123456789", 16: "0123456789abcdefABCDEF", 8: "01234567"}[base]
    if not all(character in allowed for character in digits):
        return None
    return int(digits, base)


def _ipv4(labels: list[str]) -> ipaddress.IPv4Address | None:
    """The address a browser reads from 1 to 4 decimal, octal or hex parts; None where it fails."""
    parts = labels[:-1] if len(labels) > 1 and labels[-1] == "" else labels
    if len(parts) > 4:
        return None
    numbers = [_ipv4_number(part) for part in parts]
    if any(number is None for number in numbers):
        return None
    values = [number for number in numbers if number is not None]
    if any(value > 255 for value in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        return None
    return ipaddress.IPv4Address(
        values[-1] + sum(value * 256 ** (3 - index) for index, value in enumerate(values[:-1]))
    )


def _rest(path: str, query: str, fragment: str) -> str:
    """Path, query and fragment, with what could hide or disguise text percent-encoded."""
    rest = _visible(path) or "/"
    if query:
        rest += "?" + _visible(query)
    if fragment:
        rest += "#" + _visible(fragment)
    return rest


def _visible(text: str) -> str:
    """`text` with spaces, controls and invisible characters percent-encoded (as browsers send them)."""
    return "".join(quote(character, safe="") if _disguising(character) else character for character in text)


def _disguising(character: str) -> bool:
    return unicodedata.category(character) in ("Cc", "Cf", "Cs", "Co", "Zs", "Zl", "Zp")


def _warnings(scheme: str, host: _Host, userinfo: bool, *, unusual: bool) -> tuple[UrlWarning, ...]:
    warnings: list[UrlWarning] = []
    loopback = host.ascii in LOOPBACK_NAMES or (host.ip is not None and host.ip.is_loopback)
    if scheme == "http" and not loopback:
        warnings.append(UrlWarning.NOT_HTTPS)
    if host.ip is not None and (not loopback or host.unusual):
        warnings.append(UrlWarning.IP_LITERAL)
    if any(label.startswith("xn--") for label in host.ascii.split(".")):
        warnings.append(UrlWarning.PUNYCODE)
    if _mixes_scripts(host.unicode):
        warnings.append(UrlWarning.MIXED_SCRIPTS)
    if host.deviation:
        warnings.append(UrlWarning.DEVIATION)
    if unusual:
        warnings.append(UrlWarning.NON_CANONICAL)
    if userinfo:
        warnings.append(UrlWarning.USERINFO)
    return tuple(warnings)


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
