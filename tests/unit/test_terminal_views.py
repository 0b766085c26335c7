"""What the terminal handler prints, and the decisions it takes without asking anyone."""

from __future__ import annotations

import io
from typing import Any

import anyio
import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console
from rich.style import Style

from mcp_elicit.client import review_url
from mcp_elicit.client.handler import Accept, Asker, Cancel, Consent, Decline, FormRequest, UrlRequest
from mcp_elicit.client.terminal import TerminalHandler
from mcp_elicit.client.terminal_views import HOST_STYLE, asker_view, constraints, display, printable, url_view
from mcp_elicit.client.url_review import UrlReview
from mcp_elicit.model.form_schema import parse_form

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


def highlighted(review: UrlReview) -> list[str]:
    """The texts printed in the host style, in order (the URL line's first, then the host lines)."""
    console = Console(width=200, color_system="standard", highlight=False, markup=False)
    host_style = Style.parse(HOST_STYLE)
    return [segment.text for segment in console.render(url_view(review)) if segment.style == host_style]


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://elicit.example/elicit/abc", "elicit.example"),
        ("https://elicit.example:8443/x", "elicit.example"),
        ("https://bank.example@evil.example/", "evil.example"),
        ("https://user:pw@evil.example:99/", "evil.example"),
        ("http://[::1]:8000/x", "[::1]"),
        ("https://ELICIT.example/", "elicit.example"),
        ("https://xn--pple-43d.com/", "xn--pple-43d.com"),
        ("https://2130706433/", "127.0.0.1"),
        ("https://fa\u00df.de/", "xn--fa-hia.de"),
    ],
)
def test_the_highlighted_host_is_the_host_the_browser_contacts(url: str, host: str) -> None:
    review = review_url(url)
    assert highlighted(review)[0] == host
    assert review.url.count(host) >= 1


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", "not a url", "", "http://[::1/", "https://evil.example\\@good.example/"]
)
def test_nothing_is_highlighted_in_a_url_that_is_refused(url: str) -> None:
    assert highlighted(review_url(url)) == []


def test_a_joiner_in_a_host_is_shown() -> None:
    console, sink = recording()
    console.print(url_view(review_url("https://pay\u200dpal.com/")))
    shown = sink.getvalue()
    assert "https://pay<U+200D>pal.com/" in shown
    assert "Host: pay<U+200D>pal.com" in shown
    assert "WARNING: the host contains ß, ς or an invisible joiner" in shown
    assert "WARNING: the host is not a valid name or address: do not open it" in shown


def test_the_endpoint_is_shown_next_to_the_name_the_server_gives_itself() -> None:
    console, sink = recording()
    asker = Asker("deploy-server", "1.0", "Deploy Bot", "deploy", endpoint="https://mcp.example/mcp")
    console.print(asker_view("Form request", asker, "Deploy?"))
    assert "Server: Deploy Bot (deploy-server 1.0)\nAt:     https://mcp.example/mcp\nTool:   deploy" in sink.getvalue()


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


@pytest.mark.anyio
async def test_two_clients_sharing_the_handler_never_prompt_at_once() -> None:
    console, sink = recording()
    with create_pipe_input() as keys:
        handler = TerminalHandler(console=console, input=keys, output=DummyOutput())
        replies: list[object] = []

        async def ask(message: str) -> None:
            request = UrlRequest(ASKER, message, review_url("https://elicit.example/elicit/1"))
            replies.append(await handler.url(request))

        async with anyio.create_task_group() as group:
            group.start_soon(ask, "First question")
            group.start_soon(ask, "Second question")
            await anyio.sleep(0.3)
            keys.send_text("o")
            await anyio.sleep(0.3)
            keys.send_text("d")
    shown = sink.getvalue()
    first, second = sorted(("First question", "Second question"), key=shown.index)
    assert shown.index("Opening the page was allowed.") < shown.index(second)
    assert shown.index(first) < shown.index("Opening the page was allowed.")
    assert replies == [Consent(), Decline()]


# -- a field's rules and answers in words -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "said"),
    [
        ({"type": "integer", "minimum": 1, "maximum": 5}, "a whole number from 1 to 5"),
        ({"type": "number", "minimum": 0.5}, "a number at least 0.5"),
        ({"type": "number", "maximum": 2.0}, "a number at most 2"),
        ({"type": "number"}, "a number"),
        ({"type": "string"}, None),
        ({"type": "string", "minLength": 2, "maxLength": 4}, "2 to 4 characters"),
        ({"type": "string", "format": "email", "maxLength": 80}, "an email address, at most 80 characters"),
        ({"type": "string", "format": "date"}, "a date, YYYY-MM-DD"),
        ({"type": "boolean"}, None),
        ({"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "minItems": 1}, "choose at least 1"),
        ({"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "maxItems": 1}, "choose at most 1"),
    ],
)
def test_constraints_in_words(prop: dict[str, Any], said: str | None) -> None:
    (field,) = parse_form({"type": "object", "properties": {"f": prop}}).fields
    assert constraints(field) == said


def test_answers_are_displayed_as_a_person_reads_them() -> None:
    form = parse_form(
        {
            "type": "object",
            "properties": {
                "prio": {"type": "string", "oneOf": [{"const": "p1", "title": "Page now"}]},
                "regions": {"type": "array", "items": {"anyOf": [{"const": "eu", "title": "Europe"}]}},
                "ok": {"type": "boolean"},
                "ratio": {"type": "number"},
            },
        }
    )
    prio, regions, ok, ratio = form.fields
    assert display(prio, "p1") == "Page now"
    assert display(regions, ["eu"]) == "Europe"
    assert display(regions, []) == "(none)"
    assert display(ok, False) == "no"
    assert display(ratio, 2.0) == "2"
    assert display(ratio, 0.1) == "0.1"
    assert display(ratio, None) == "(no answer)"


@pytest.mark.anyio
@pytest.mark.parametrize("typed", ["\x03", "\x03\x03"])
async def test_each_ctrl_c_read_before_the_prompt_is_gone_reaches_the_host(typed: str) -> None:
    """A quick second Ctrl-C arrives with the first, or while the prompt goes: the host hears both, so a host
    that stops on a second press stops (the demo), and no press is lost to the prompt's exit."""
    heard: list[str] = []

    def host() -> bool:
        heard.append("ctrl-c")
        return False

    console, _ = recording()
    with create_pipe_input() as keys:
        handler = TerminalHandler(console=console, input=keys, output=DummyOutput(), on_ctrl_c=host)
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        keys.send_text(typed)
        assert await handler.form(FormRequest(ASKER, "How many?", schema)) == Cancel()
    assert heard == ["ctrl-c"] * len(typed)
