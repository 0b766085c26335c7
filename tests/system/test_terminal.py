"""The terminal handler driven through a real pseudo-terminal: keys in, screen text and the final reply out.

Each test spawns `terminal_driver.py` under pexpect in a fixed-size terminal, waits for what a person would
see before pressing each key (a key sent while no prompt reads the keyboard would land in the terminal's
line editor, as it would for a person typing ahead), and checks the reply the kit would send.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect  # type: ignore[import-untyped]
import pytest

from tests.helpers.cli_terminal import Terminal as PtyTerminal
from tests.helpers.cli_terminal import terminal_env

DRIVER = Path(__file__).parents[1] / "helpers" / "terminal_driver.py"
ROWS, COLS = 40, 120
TIMEOUT = 20.0
UP, DOWN = "\x1b[A", "\x1b[B"
ESC, CTRL_C, CTRL_D, CTRL_U, BACKSPACE = "\x1b", "\x03", "\x04", "\x15", "\x7f"
ASKER = {"server_name": "deploy-server", "server_version": "1.4.2", "server_title": "Deploy Bot", "tool": "deploy"}
_HOST_HIGHLIGHT = r"\x1b\[[0-9;]*43m"
"""rich's SGR for the host style (yellow background), right before the host's text."""


class Terminal(PtyTerminal):
    """One run of the handler in a pseudo-terminal; `reply` is what the kit would send."""

    def __init__(self, kind: str, request: dict[str, Any]) -> None:
        env = terminal_env(COLUMNS=str(COLS), LINES=str(ROWS))
        super().__init__(
            [str(DRIVER), kind, json.dumps({"asker": ASKER} | request)],
            env,
            command=sys.executable,
            timeout=TIMEOUT,
            dimensions=(ROWS, COLS),
        )

    def reply(self) -> dict[str, Any]:
        self.see("REPLY ")
        deadline = time.monotonic() + TIMEOUT
        while "\n" not in self.text[self._seen :]:
            if time.monotonic() > deadline or not self._read():
                break
        line = self.text[self._seen :].split("\n", 1)[0]
        self.child.expect(pexpect.EOF)
        self.child.close()
        assert self.child.exitstatus == 0, self.text
        result: dict[str, Any] = json.loads(line)
        return result


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


@pytest.fixture
def form(terminals: list[Terminal]) -> Any:
    def start(properties: dict[str, Any], required: list[str] | None = None, message: str = "Fill this in") -> Terminal:
        schema = {"type": "object", "properties": properties, "required": required or []}
        terminal = Terminal("form", {"message": message, "schema": schema})
        terminals.append(terminal)
        return terminal

    return start


@pytest.fixture
def url(terminals: list[Terminal]) -> Any:
    def start(address: str, message: str = "Connect your account") -> Terminal:
        terminal = Terminal("url", {"message": message, "url": address})
        terminals.append(terminal)
        return terminal

    return start


TEXT_PROMPT = "  > "
CHOICE = "Enter choose"
CHECKLIST = "Enter confirm"
REVIEW = "d to decline. Esc cancels."


def review(terminal: Terminal, *keys: str) -> None:
    """Type at the review prompt (waiting for the prompt itself: the instructions print before it reads keys)."""
    terminal.see(REVIEW)
    terminal.answer(TEXT_PROMPT, *keys)


def submit(terminal: Terminal) -> dict[str, Any]:
    review(terminal, "s\r")
    terminal.see("Submitted.")
    return terminal.reply()


# -- who asks, and every primitive --------------------------------------------------------------------------


def test_the_asker_message_and_field_texts_are_shown(form: Any) -> None:
    terminal = form(
        {"name": {"type": "string", "title": "Your name", "description": "As printed on your badge", "maxLength": 20}},
        ["name"],
        message="We need your name for the audit trail",
    )
    terminal.see(
        "Form request",
        "Server: Deploy Bot (deploy-server 1.4.2)",
        "Tool:   deploy",
        "We need your name for the audit trail",
        "Esc, Ctrl-C or Ctrl-D cancels the request; d at the review declines it.",
        "[1/1] Your name (required)",
        "As printed on your badge",
        "at most 20 characters",
    )
    terminal.answer(TEXT_PROMPT, "Ada Lovelace\r")
    terminal.see("Your answers", "Your name *", "Ada Lovelace")
    assert submit(terminal) == {"action": "accept", "content": {"name": "Ada Lovelace"}}


@pytest.mark.parametrize(
    ("format_", "wrong", "problem", "right", "sent"),
    [
        ("email", "ada.example.org", "must be an email address", "ada@example.org", "ada@example.org"),
        ("uri", "example.org/page", "must be a full address", "https://example.org/page", "https://example.org/page"),
        ("date", "01/12/2026", "must be a date written as YYYY-MM-DD", "2026-12-01", "2026-12-01"),
        (
            "date-time",
            "2026-12-01 09:30",
            "must be a date and time with its UTC offset",
            "2026-12-01 09:30Z",
            "2026-12-01T09:30:00Z",
        ),
    ],
)
def test_each_string_format_is_checked_then_corrected(
    form: Any, format_: str, wrong: str, problem: str, right: str, sent: str
) -> None:
    terminal = form({"value": {"type": "string", "format": format_}}, ["value"])
    terminal.answer(TEXT_PROMPT, wrong + "\r")
    terminal.see(f"! value: {problem}")
    terminal.answer(TEXT_PROMPT, CTRL_U, right + "\r")
    assert submit(terminal) == {"action": "accept", "content": {"value": sent}}


def test_string_length_and_required_are_checked(form: Any) -> None:
    terminal = form({"code": {"type": "string", "minLength": 3, "maxLength": 5}}, ["code"])
    terminal.see("3 to 5 characters")
    terminal.answer(TEXT_PROMPT, "\r")
    terminal.see("! code: required")
    terminal.answer(TEXT_PROMPT, "ab\r")
    terminal.see("! code: must be at least 3 characters long")
    terminal.answer(TEXT_PROMPT, "cdefg\r")
    terminal.see("! code: must be at most 5 characters long")
    terminal.answer(TEXT_PROMPT, CTRL_U, "abcd\r")
    assert submit(terminal) == {"action": "accept", "content": {"code": "abcd"}}


def test_integer_and_number_bounds(form: Any) -> None:
    terminal = form(
        {
            "replicas": {"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 5},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        },
        ["replicas", "ratio"],
    )
    terminal.see("a whole number from 1 to 5")
    terminal.answer(TEXT_PROMPT, "two\r")
    terminal.see("! Replicas: must be a whole number")
    terminal.answer(TEXT_PROMPT, CTRL_U, "9\r")
    terminal.see("! Replicas: must be at most 5")
    terminal.answer(TEXT_PROMPT, CTRL_U, "0\r")
    terminal.see("! Replicas: must be at least 1")
    terminal.answer(TEXT_PROMPT, CTRL_U, "3\r")
    terminal.see("a number from 0 to 1")
    terminal.answer(TEXT_PROMPT, "1.5\r")
    terminal.see("! ratio: must be at most 1")
    terminal.answer(TEXT_PROMPT, CTRL_U, "0.25\r")
    assert submit(terminal) == {"action": "accept", "content": {"replicas": 3, "ratio": 0.25}}


def test_boolean_is_a_yes_no_choice(form: Any) -> None:
    terminal = form({"approve": {"type": "boolean", "title": "Approve the deploy?"}}, ["approve"])
    terminal.see("Approve the deploy? (required)", "1. yes", "2. no")
    terminal.answer(CHOICE, DOWN, DOWN, "\r")
    terminal.see("  > no")
    assert submit(terminal) == {"action": "accept", "content": {"approve": False}}


def test_untitled_single_select(form: Any) -> None:
    terminal = form({"env": {"type": "string", "enum": ["staging", "production", "qa"]}}, ["env"])
    terminal.see("1. staging", "2. production", "3. qa")
    terminal.answer(CHOICE, DOWN, DOWN, DOWN, UP, "\r")
    terminal.see("  > production")
    assert submit(terminal) == {"action": "accept", "content": {"env": "production"}}


def test_titled_single_select_shows_titles_and_sends_the_value(form: Any) -> None:
    titled = {"oneOf": [{"const": "p1", "title": "Page now"}, {"const": "p2", "title": "Next morning"}]}
    terminal = form({"priority": {"type": "string", **titled}}, ["priority"])
    terminal.see("1. Page now", "2. Next morning")
    terminal.answer(CHOICE, "2", "\r")
    terminal.see("  > Next morning", "Your answers", "Next morning")
    assert submit(terminal) == {"action": "accept", "content": {"priority": "p2"}}


def test_legacy_enum_names_are_shown_as_titles(form: Any) -> None:
    terminal = form({"size": {"type": "string", "enum": ["s", "m", "l"], "enumNames": ["Small", "Medium", "Large"]}})
    terminal.see("1. Small", "2. Medium", "3. Large", "4. (no answer)")
    terminal.answer(CHOICE, "3", "\r")
    terminal.see("  > Large")
    assert submit(terminal) == {"action": "accept", "content": {"size": "l"}}


def test_optional_single_select_can_be_left_unanswered(form: Any) -> None:
    terminal = form({"size": {"type": "string", "enum": ["s", "m"]}})
    terminal.answer(CHOICE, "3", "\r")
    terminal.see("  > (no answer)")
    assert submit(terminal) == {"action": "accept", "content": {}}


def test_untitled_multi_select_with_item_bounds(form: Any) -> None:
    multi = {"type": "array", "items": {"type": "string", "enum": ["eu", "us", "apac"]}, "minItems": 1, "maxItems": 2}
    terminal = form({"regions": multi}, ["regions"])
    terminal.see("choose 1 to 2", "[ ] 1. eu", "[ ] 2. us", "[ ] 3. apac")
    terminal.answer(CHECKLIST, "\r")
    terminal.see("! regions: choose at least 1")
    terminal.answer(CHECKLIST, " ", DOWN, " ", DOWN, " ", "\r")
    terminal.see("! regions: choose at most 2")
    terminal.see("[x] 1. eu", "[x] 2. us", "[x] 3. apac")
    terminal.answer(CHECKLIST, "3", " ", "\r")
    terminal.see("  > eu, us")
    assert submit(terminal) == {"action": "accept", "content": {"regions": ["eu", "us"]}}


def test_titled_multi_select_shows_titles_and_sends_values(form: Any) -> None:
    items = {"anyOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]}
    terminal = form({"regions": {"type": "array", "items": items}}, ["regions"])
    terminal.see("[ ] 1. Europe", "[ ] 2. United States")
    terminal.answer(CHECKLIST, "2", " ", "\r")
    terminal.see("  > United States")
    assert submit(terminal) == {"action": "accept", "content": {"regions": ["us"]}}


def test_defaults_are_prefilled_and_accepted_with_enter(form: Any) -> None:
    terminal = form(
        {
            "name": {"type": "string", "default": "Ada"},
            "replicas": {"type": "integer", "default": 3},
            "notify": {"type": "boolean", "default": True},
            "env": {"type": "string", "enum": ["staging", "production"], "default": "production"},
            "regions": {"type": "array", "items": {"type": "string", "enum": ["eu", "us"]}, "default": ["us"]},
        },
        ["name", "replicas", "notify", "env", "regions"],
    )
    terminal.see("suggested answer filled in", "  > Ada")
    terminal.press("\r")
    terminal.answer("  > 3", "\r")
    terminal.see("(*) 1. yes")
    terminal.answer(CHOICE, "\r")
    terminal.see("(*) 2. production")
    terminal.answer(CHOICE, "\r")
    terminal.see("[x] 2. us")
    terminal.answer(CHECKLIST, "\r")
    expected = {"name": "Ada", "replicas": 3, "notify": True, "env": "production", "regions": ["us"]}
    assert submit(terminal) == {"action": "accept", "content": expected}


def test_a_default_can_be_edited(form: Any) -> None:
    terminal = form({"name": {"type": "string", "default": "Ada"}})
    terminal.answer("  > Ada", BACKSPACE * 3, "Grace\r")
    assert submit(terminal) == {"action": "accept", "content": {"name": "Grace"}}


def test_the_reason_a_previous_answer_was_refused_is_shown_first(terminals: list[Terminal]) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    asker = {"server_name": "docs-server", "prompt": "summarise"}
    terminal = Terminal("form", {"asker": asker, "message": "Who?", "schema": schema, "problem": "name: too short"})
    terminals.append(terminal)
    terminal.see(
        "Server: docs-server", "Prompt: summarise", "Who?", "Your previous answer was not accepted: name: too short"
    )
    terminal.answer(TEXT_PROMPT, "Ada\r")
    assert submit(terminal) == {"action": "accept", "content": {"name": "Ada"}}


# -- review, decline, cancel ----------------------------------------------------------------------------------


def test_review_edits_a_field_by_number_then_submits(form: Any) -> None:
    terminal = form(
        {"name": {"type": "string", "title": "Name"}, "env": {"type": "string", "enum": ["staging", "production"]}},
        ["name", "env"],
    )
    terminal.answer(TEXT_PROMPT, "Ada\r")
    terminal.answer(CHOICE, "1", "\r")
    terminal.see("1 │ Name *", "Ada", "2 │ env *", "staging", "a field number (1-2) to edit it")
    terminal.answer(TEXT_PROMPT, "7\r")
    terminal.see("! Type s to submit, d to decline, or a field number from 1 to 2.")
    terminal.answer(TEXT_PROMPT, "2\r")
    terminal.see("[2/2] env", "(*) 1. staging")
    terminal.answer(CHOICE, DOWN, "\r")
    terminal.see("Your answers", "production")
    review(terminal, "1\r")
    terminal.answer("  > Ada", BACKSPACE * 3, "Grace\r")
    terminal.see("Your answers", "Grace", "production")
    assert submit(terminal) == {"action": "accept", "content": {"name": "Grace", "env": "production"}}


def test_decline_from_the_review(form: Any) -> None:
    terminal = form({"name": {"type": "string"}}, ["name"])
    terminal.answer(TEXT_PROMPT, "Ada\r")
    review(terminal, "d\r")
    terminal.see("Declined: the server is told you refused.")
    assert terminal.reply() == {"action": "decline"}


@pytest.mark.parametrize("where", ["text", "choice", "checklist"])
def test_ctrl_d_closes_the_input_and_cancels_never_declines(form: Any, where: str) -> None:
    terminal = form(
        {
            "name": {"type": "string"},
            "env": {"type": "string", "enum": ["staging", "production"]},
            "regions": {"type": "array", "items": {"type": "string", "enum": ["eu", "us"]}},
        },
        ["name", "env", "regions"],
    )
    steps = [(TEXT_PROMPT, "Ada\r"), (CHOICE, "1\r"), (CHECKLIST, " \r")]
    stop = ["text", "choice", "checklist"].index(where)
    for prompt, keys in steps[:stop]:
        terminal.answer(prompt, keys)
    terminal.answer(steps[stop][0], CTRL_D)
    terminal.see("Cancelled: no answer was sent.")
    assert terminal.reply() == {"action": "cancel"}
    assert "Declined" not in terminal.text


def test_ctrl_d_in_a_typed_line_deletes_and_only_an_empty_line_closes(form: Any) -> None:
    terminal = form({"name": {"type": "string"}}, ["name"])
    terminal.answer(TEXT_PROMPT, "Adax", "\x1b[D", CTRL_D, "\r")
    terminal.see("Your answers", "Ada")
    assert submit(terminal) == {"action": "accept", "content": {"name": "Ada"}}


def test_enter_chooses_nothing_the_person_did_not_move_to(form: Any) -> None:
    terminal = form(
        {"env": {"type": "string", "enum": ["staging", "production"]}, "size": {"type": "string", "enum": ["s", "m"]}},
        ["env"],
    )
    terminal.see("[1/2] env (required)", "( ) 1. staging", "( ) 2. production")
    terminal.answer("↑/↓ or a number to choose · Enter choose", "\r", "\r")
    time.sleep(0.3)
    terminal.press("2", "\r")
    terminal.see("  > production", "[2/2] size (optional)", "(*) 3. (no answer)")
    terminal.answer(CHOICE, "\r")
    terminal.see("  > (no answer)")
    assert terminal.text.count("  > production") == 1
    assert submit(terminal) == {"action": "accept", "content": {"env": "production"}}


def test_alt_keys_edit_the_line_and_do_not_cancel(form: Any) -> None:
    terminal = form({"name": {"type": "string"}}, ["name"])
    terminal.answer(TEXT_PROMPT, "hello world", "\x1bb", "big ", "\r")
    terminal.see("Your answers", "hello big world")
    assert submit(terminal) == {"action": "accept", "content": {"name": "hello big world"}}


def test_a_lone_esc_still_cancels_after_the_escape_timeout(form: Any) -> None:
    terminal = form({"name": {"type": "string"}}, ["name"])
    terminal.answer(TEXT_PROMPT, "Ada", ESC)
    terminal.see("Cancelled: no answer was sent.")
    assert terminal.reply() == {"action": "cancel"}


@pytest.mark.parametrize("key", [ESC, CTRL_C], ids=["esc", "ctrl-c"])
@pytest.mark.parametrize("where", ["text", "choice", "checklist", "review"])
def test_esc_and_ctrl_c_cancel_anywhere(form: Any, key: str, where: str) -> None:
    terminal = form(
        {
            "name": {"type": "string"},
            "env": {"type": "string", "enum": ["staging", "production"]},
            "regions": {"type": "array", "items": {"type": "string", "enum": ["eu", "us"]}},
        },
        ["name", "env", "regions"],
    )
    steps = [(TEXT_PROMPT, "Ada\r"), (CHOICE, "1\r"), (CHECKLIST, " \r")]
    stop = ["text", "choice", "checklist", "review"].index(where)
    for prompt, keys in steps[:stop]:
        terminal.answer(prompt, keys)
    if where == "review":
        review(terminal, key)
    else:
        terminal.answer(steps[stop][0], key)
    terminal.see("Cancelled: no answer was sent.")
    assert terminal.reply() == {"action": "cancel"}


def test_a_form_without_fields_is_a_confirmation(form: Any) -> None:
    terminal = form({}, message="Proceed with the rollback?")
    terminal.see("Proceed with the rollback?", "This request asks for no answers.")
    assert submit(terminal) == {"action": "accept", "content": {}}


def test_an_unsupported_schema_is_cancelled_without_asking(form: Any) -> None:
    terminal = form({"code": {"type": "string", "pattern": "^[A-Z]+$"}}, ["code"])
    terminal.see("This form cannot be shown faithfully", "'pattern'", "Nothing was sent. The request is cancelled.")
    assert terminal.reply() == {"action": "cancel"}


def test_server_text_cannot_drive_the_terminal(form: Any) -> None:
    terminal = form({"ok": {"type": "boolean", "title": "Fine\x1b[2J?"}}, message="Hello\x1b[31m\u202eevil")
    terminal.see("Hello<U+001B>[31m<U+202E>evil", "Fine<U+001B>[2J?")
    assert "\x1b[2J" not in terminal.raw
    terminal.answer(CHOICE, "1", "\r")
    assert submit(terminal) == {"action": "accept", "content": {"ok": True}}


# -- URL consent -------------------------------------------------------------------------------------------


URL_PROMPT = "[o] open   [d] decline   [Esc] cancel"


def test_url_consent_is_given_with_o(url: Any) -> None:
    terminal = url("https://elicit.example/elicit/0b9d3a4e", message="Connect your GitHub account")
    terminal.see(
        "Request to open a web page",
        "Server: Deploy Bot (deploy-server 1.4.2)",
        "Tool:   deploy",
        "Connect your GitHub account",
        "URL, its host highlighted:\nhttps://elicit.example/elicit/0b9d3a4e\n",
        "Host: elicit.example",
        "Nothing has been loaded from it yet.",
    )
    assert re.search(_HOST_HIGHLIGHT + re.escape("elicit.example"), terminal.raw)
    assert "WARNING" not in terminal.text
    terminal.answer(URL_PROMPT, "\r")
    terminal.press("o")
    terminal.see("Opening the page was allowed.")
    assert terminal.reply() == {"action": "accept"}


def test_url_consent_is_refused_with_d(url: Any) -> None:
    terminal = url("https://elicit.example/elicit/0b9d3a4e")
    terminal.answer(URL_PROMPT, "d")
    terminal.see("Declined: the page will not be opened.")
    assert terminal.reply() == {"action": "decline"}


@pytest.mark.parametrize("key", [ESC, CTRL_C, CTRL_D], ids=["esc", "ctrl-c", "ctrl-d"])
def test_url_consent_is_cancelled(url: Any, key: str) -> None:
    terminal = url("https://elicit.example/elicit/0b9d3a4e")
    terminal.answer(URL_PROMPT, key)
    terminal.see("Cancelled: the page was not opened.")
    assert terminal.reply() == {"action": "cancel"}


def test_a_punycode_host_is_shown_both_ways_with_warnings(url: Any) -> None:
    terminal = url("https://xn--pple-43d.com/login?next=/billing")
    terminal.see(
        "URL, its host highlighted:\nhttps://xn--pple-43d.com/login?next=/billing\n",
        "Host: \u0430pple.com",
        "Host as the browser will look it up: xn--pple-43d.com",
        "WARNING: the host is written in punycode: it may imitate another name",
        "WARNING: the host mixes writing systems: it may imitate another name",
        URL_PROMPT,
    )
    assert re.search(_HOST_HIGHLIGHT + re.escape("xn--pple-43d.com"), terminal.raw)
    terminal.press("d")
    assert terminal.reply() == {"action": "decline"}


def test_plain_http_and_user_info_are_warned_and_the_real_host_highlighted(url: Any) -> None:
    terminal = url("http://bank.example@evil.example/connect")
    terminal.see(
        "URL, its host highlighted:\nhttp://bank.example@evil.example/connect\n",
        "Host: evil.example",
        "WARNING: not HTTPS: what you type there can be read on the way",
        "WARNING: the URL hides a name before '@': the real host is after it",
        URL_PROMPT,
    )
    assert re.search(_HOST_HIGHLIGHT + re.escape("evil.example"), terminal.raw)
    assert not re.search(_HOST_HIGHLIGHT + re.escape("bank.example"), terminal.raw)
    terminal.press(ESC)
    assert terminal.reply() == {"action": "cancel"}


@pytest.mark.parametrize("address", ["javascript:alert(document.cookie)", "file:///etc/passwd"])
def test_a_non_http_url_is_shown_but_never_offered(url: Any, address: str) -> None:
    terminal = url(address)
    terminal.see(
        f"URL, its host highlighted:\n{address}\n",
        "WARNING: not an http(s) URL: do not open it",
        "it will not be opened",
        "The request is cancelled.",
    )
    assert terminal.reply() == {"action": "cancel"}
    assert URL_PROMPT not in terminal.text


def test_a_backslash_that_moves_the_host_is_shown_but_never_offered(url: Any) -> None:
    address = "https://evil.example\\@good.example/connect"
    terminal = url(address)
    terminal.see(
        f"URL, its host highlighted:\n{address}\n",
        "WARNING: browsers read the host of this URL differently from how it is written: do not open it",
        "it will not be opened",
    )
    assert not re.search(_HOST_HIGHLIGHT + re.escape("good.example"), terminal.raw)
    assert terminal.reply() == {"action": "cancel"}
    assert URL_PROMPT not in terminal.text


def test_a_deviation_host_shows_the_name_the_browser_really_looks_up(url: Any) -> None:
    terminal = url("https://fa\u00df.de/login")
    terminal.see(
        "URL, its host highlighted:\nhttps://xn--fa-hia.de/login\n",
        "Host: fa\u00df.de",
        "Host as the browser will look it up: xn--fa-hia.de",
        "WARNING: the host contains ß, ς or an invisible joiner: it may pass for another name",
        URL_PROMPT,
    )
    assert re.search(_HOST_HIGHLIGHT + re.escape("xn--fa-hia.de"), terminal.raw)
    assert "fass.de" not in terminal.text
    terminal.press("d")
    assert terminal.reply() == {"action": "decline"}
