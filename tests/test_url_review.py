"""What a client is told about a URL before it offers a person to open it."""

from __future__ import annotations

import pytest

from mcp_elicit.client import UrlWarning, review_url

W = UrlWarning


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
