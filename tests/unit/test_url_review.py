"""What a client is told about a URL before it offers a person to open it, and which URL it would open."""

from __future__ import annotations

import pytest

from mcp_elicit.client import UrlWarning, review_url

W = UrlWarning
FULL_WIDTH_EXAMPLE = "\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45"


@pytest.mark.parametrize(
    ("url", "warnings", "host"),
    [
        ("https://elicit.example/elicit/0b9d3a4e", (), "elicit.example"),
        ("http://127.0.0.1:8000/elicit/x", (), "127.0.0.1"),
        ("http://localhost:8000/elicit/x", (), "localhost"),
        ("http://[::1]:8000/elicit/x", (), "::1"),
        ("http://elicit.example/connect", (W.NOT_HTTPS,), "elicit.example"),
        ("https://203.0.113.7/connect", (W.IP_LITERAL,), "203.0.113.7"),
        ("http://203.0.113.7/connect", (W.NOT_HTTPS, W.IP_LITERAL), "203.0.113.7"),
        ("https://xn--pple-43d.com/login", (W.PUNYCODE, W.MIXED_SCRIPTS), "\u0430pple.com"),
        ("https://\u0430pple.com/login", (W.PUNYCODE, W.MIXED_SCRIPTS), "\u0430pple.com"),
        ("https://m\u00fcnchen.example/", (W.PUNYCODE,), "m\u00fcnchen.example"),
        ("https://bank.example@evil.example/", (W.USERINFO,), "evil.example"),
        ("https://my_service.internal/", (), "my_service.internal"),
    ],
)
def test_warnings_and_displayed_host(url: str, warnings: tuple[UrlWarning, ...], host: str) -> None:
    review = review_url(url)
    assert review.warnings == warnings
    assert review.host == host
    assert review.may_open


@pytest.mark.parametrize("url", ["javascript:alert(1)", "file:///etc/passwd", "data:text/html,hi", "not a url", ""])
def test_non_http_urls_are_never_offered(url: str) -> None:
    review = review_url(url)
    assert review.warnings == (W.NOT_HTTP,)
    assert not review.may_open


def test_the_ascii_host_is_what_the_browser_will_resolve() -> None:
    review = review_url("https://\u0430pple.com/")
    assert review.host_ascii == "xn--pple-43d.com"


@pytest.mark.parametrize(
    ("url", "opened", "host", "warnings"),
    [
        ("https://2130706433/x", "https://127.0.0.1/x", "127.0.0.1", (W.IP_LITERAL, W.NON_CANONICAL)),
        ("http://0x7f000001/", "http://127.0.0.1/", "127.0.0.1", (W.IP_LITERAL, W.NON_CANONICAL)),
        ("https://127.1/", "https://127.0.0.1/", "127.0.0.1", (W.IP_LITERAL, W.NON_CANONICAL)),
        ("https://3405803783/", "https://203.0.113.7/", "203.0.113.7", (W.IP_LITERAL, W.NON_CANONICAL)),
        ("https://0300.0250.0.1/", "https://192.168.0.1/", "192.168.0.1", (W.IP_LITERAL, W.NON_CANONICAL)),
        ("https://[0:0::1]/", "https://[::1]/", "::1", (W.IP_LITERAL, W.NON_CANONICAL)),
        ("https://fa\u00df.de/", "https://xn--fa-hia.de/", "fa\u00df.de", (W.PUNYCODE, W.DEVIATION)),
        ("https://σοφίας.gr/", "https://xn--kxae4bobt.gr/", "σοφίας.gr", (W.PUNYCODE, W.DEVIATION)),
        (f"https://{FULL_WIDTH_EXAMPLE}.com/", "https://example.com/", "example.com", (W.NON_CANONICAL,)),
        ("https://good\u3002example/", "https://good.example/", "good.example", (W.NON_CANONICAL,)),
        ("https://pay\u00adpal.com/", "https://paypal.com/", "paypal.com", (W.NON_CANONICAL,)),
        ("https://go\tod.exa\nmple/", "https://good.example/", "good.example", (W.NON_CANONICAL,)),
        ("https://a@b@evil.example/p", "https://a%40b@evil.example/p", "evil.example", (W.USERINFO,)),
        ("  https://ok.example/a b\u202e  ", "https://ok.example/a%20b%E2%80%AE", "ok.example", ()),
        ("HTTPS://Elicit.Example:0443", "https://elicit.example:443/", "elicit.example", ()),
    ],
)  # fmt: skip
def test_the_url_to_open_is_rebuilt_from_what_was_reviewed(
    url: str, opened: str, host: str, warnings: tuple[UrlWarning, ...]
) -> None:
    review = review_url(url)
    assert review.url == opened
    assert review.host == host
    assert review.warnings == warnings
    assert review.may_open
    assert review.sent == url
    assert review.host_span is not None
    start, end = review.host_span
    assert opened[start:end] == (f"[{review.host_ascii}]" if ":" in review.host_ascii else review.host_ascii)


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("https://evil.example\\@good.example/", W.AMBIGUOUS),
        ("https://evil.example\\.good.example/", W.AMBIGUOUS),
        ("https:\\\\evil.example/", W.AMBIGUOUS),
        ("https:/\\evil.example/", W.AMBIGUOUS),
        ("https:///evil.example/", W.AMBIGUOUS),
        ("https:evil.example/", W.AMBIGUOUS),
        ("https://evil%2Eexample/", W.ENCODED_HOST),
        ("https://good.example%40evil.example/", W.ENCODED_HOST),
        ("https://1.2.3.4.5/", W.INVALID_HOST),
        ("https://999.1.1.1/", W.INVALID_HOST),
        ("https://08.1.1.1/", W.INVALID_HOST),
        ("https://xn--zz.com/", W.INVALID_HOST),
        ("https://good..example/", W.INVALID_HOST),
        ("https://good.example:99999/", W.INVALID_HOST),
        ("https://good.example:80:80/", W.INVALID_HOST),
        ("https://evil\uff03@good.example/", W.INVALID_HOST),
        ("http://[::1/", W.INVALID_HOST),
    ],
)
def test_a_url_a_browser_would_read_differently_is_refused(url: str, refusal: UrlWarning) -> None:
    review = review_url(url)
    assert review.warnings[0] is refusal
    assert refusal.refuses
    assert not review.may_open
    assert review.host_span is None
    assert review.url == url


@pytest.mark.parametrize("joiner", ["\u200d", "\u200c"])
def test_an_invisible_joiner_in_a_host_is_warned_about_and_refused_where_a_browser_would(joiner: str) -> None:
    refused = review_url(f"https://pay{joiner}pal.com/")
    assert refused.warnings == (W.INVALID_HOST, W.DEVIATION)
    assert not refused.may_open
    allowed = review_url("https://\u0915\u094d\u200d\u0937.example/")
    assert allowed.warnings == (W.PUNYCODE, W.DEVIATION)
    assert allowed.host == "\u0915\u094d\u200d\u0937.example"
    assert allowed.url == "https://xn--11b2ezcw70k.example/"
