"""What the terminal handler prints, and the decisions it takes without asking anyone."""

from __future__ import annotations

import io

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from mcp_elicit.client import review_url
from mcp_elicit.client.handler import Accept, Asker, Cancel, Consent, FormRequest, UrlRequest
from mcp_elicit.client.terminal import TerminalHandler
from mcp_elicit.client.terminal_views import host_span, printable, url_view

ASKER = Asker("deploy-server", "1.0", "Deploy Bot", "deploy")


def recording() -> tuple[Console, io.StringIO]:
    sink = io.StringIO()
    return Console(file=sink, width=100, color_system=None, highlight=False, markup=False), sink


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain", "plain"),
        ("red\x1b[31m", "red<U+001B>[31m"),
        ("bell\x07", "bell<U+0007>"),
        ("gpj.exe\u202e", "gpj.exe<U+202E>"),
        ("zero\u200bwidth", "zero<U+200B>width"),
        ("next\u0085line", "next<U+0085>line"),
        ("a\u2028b", "a<U+2028>b"),
        ("family \U0001f468\u200d\U0001f469", "family \U0001f468\u200d\U0001f469"),
        ("tab\there", "tab here"),
        ("two\nlines", "two<U+000A>lines"),
    ],
)
def test_printable_shows_what_could_act_on_the_terminal(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_a_message_keeps_its_lines() -> None:
    assert printable("one\ntwo\tthree\r", multiline=True) == "one\ntwo    three<U+000D>"


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://elicit.example/elicit/abc", "elicit.example"),
        ("https://elicit.example:8443/x", "elicit.example"),
        ("https://bank.example@evil.example/", "evil.example"),
        ("https://user:pw@evil.example:99/", "evil.example"),
        ("http://[::1]:8000/x", "[::1]"),
        ("https://ELICIT.example/", "ELICIT.example"),
        ("https://xn--pple-43d.com/", "xn--pple-43d.com"),
    ],
)
def test_the_host_span_is_the_real_host(url: str, host: str) -> None:
    span = host_span(url)
    assert span is not None
    assert url[span[0] : span[1]] == host


@pytest.mark.parametrize("url", ["javascript:alert(1)", "not a url", "", "http://[::1/"])
def test_no_host_span_without_a_host(url: str) -> None:
    assert host_span(url) is None


def test_the_url_view_shows_the_full_url_both_hosts_and_every_warning() -> None:
    console, sink = recording()
    long_url = "https://xn--pple-43d.com/" + "a" * 300
    console.print(url_view(review_url(long_url)))
    shown = sink.getvalue()
    lines = shown.split("\n")
    host_line = next(number for number, line in enumerate(lines) if line.startswith("Host:"))
    assert "".join(lines[1:host_line]) == long_url
    assert "Host: \u0430pple.com" in shown
    assert "Host as the browser will look it up: xn--pple-43d.com" in shown
    assert "WARNING: the host is written in punycode" in shown
    assert "WARNING: the host mixes writing systems" in shown


def test_the_handler_declares_both_modes_unless_told_otherwise() -> None:
    assert TerminalHandler().modes == frozenset({"form", "url"})
    assert TerminalHandler(modes=["url"]).modes == frozenset({"url"})
    assert TerminalHandler(modes=[]).modes == frozenset()


@pytest.mark.anyio
async def test_an_undeclared_mode_is_cancelled_without_showing_anything() -> None:
    console, sink = recording()
    handler = TerminalHandler(modes=["url"], console=console)
    schema = {"type": "object", "properties": {}}
    assert await handler.form(FormRequest(ASKER, "hi", schema)) == Cancel()
    handler = TerminalHandler(modes=["form"], console=console)
    assert await handler.url(UrlRequest(ASKER, "hi", review_url("https://elicit.example/"))) == Cancel()
    assert sink.getvalue() == ""


@pytest.mark.anyio
async def test_an_unsupported_schema_is_explained_and_cancelled() -> None:
    console, sink = recording()
    schema = {"type": "object", "properties": {"pin": {"type": "string", "pattern": "[0-9]{4}"}}}
    reply = await TerminalHandler(console=console).form(FormRequest(ASKER, "Your PIN", schema))
    assert reply == Cancel()
    shown = sink.getvalue()
    assert "Deploy Bot (deploy-server 1.0)" in shown
    assert "This form cannot be shown faithfully: property 'pin' uses 'pattern'" in shown
    assert "The request is cancelled." in shown


@pytest.mark.anyio
async def test_a_url_that_may_not_be_opened_is_cancelled_without_asking() -> None:
    console, sink = recording()
    request = UrlRequest(ASKER, "Open this", review_url("file:///etc/passwd"))
    assert await TerminalHandler(console=console).url(request) == Cancel()
    shown = sink.getvalue()
    assert "file:///etc/passwd" in shown
    assert "it will not be opened" in shown
    assert "[o] open" not in shown


@pytest.mark.anyio
async def test_the_handler_reads_any_prompt_toolkit_input() -> None:
    console, sink = recording()
    with create_pipe_input() as keys:
        handler = TerminalHandler(console=console, input=keys, output=DummyOutput())
        request = UrlRequest(ASKER, "Connect", review_url("https://elicit.example/elicit/1"))
        keys.send_text("\rxo")
        assert await handler.url(request) == Consent()
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        keys.send_text("x\r\x157\rs\r")
        assert await handler.form(FormRequest(ASKER, "How many?", schema)) == Accept(content={"n": 7})
    assert "! n: must be a whole number" in sink.getvalue()
