"""What the terminal handler prints with rich: who asks, each field's heading, the review table, the URL.

Every text here comes from a server, so none is trusted: it is never parsed as rich markup (only `Text`
objects are printed), and `printable` shows control and invisible formatting characters by code point (`<U+202E>`)
instead of passing them to the terminal, where an escape sequence could rewrite the screen (a fake
"approved" line, a hidden URL) and a right-to-left override could reverse what a person reads. URLs are
printed as plain text, never as terminal hyperlinks: the spec keeps every URL but a URL request's own one
from being clickable, and that one is opened only after consent. The URL shown is the review's rebuilt one,
the very text the kit opens, with the host highlighted where the review found it (never re-parsed here,
where another parser could find another host); a host is shown with its joiners made visible too.

A wait is plain text, since the live status line draws it with prompt_toolkit and a script run prints it
with rich: what is awaited and for whom (`wait_title`), how long it has been and the deadline as a time of
day with the time left (`wait_times`), so a person knows whether to keep going in the browser.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from mcp_elicit.client.handler import Asker
from mcp_elicit.client.pending import Wait
from mcp_elicit.client.url_review import UrlReview
from mcp_elicit.model.form_schema import Answer, Field, Form, number_text
from mcp_elicit.printable import printable

__all__ = [
    "HOST_STYLE",
    "asker_view",
    "constraints",
    "display",
    "field_heading",
    "label",
    "printable",
    "problem_line",
    "review_table",
    "url_view",
    "wait_summary",
    "wait_times",
    "wait_title",
]

HOST_STYLE = "bold black on yellow"
WARNING_STYLE = "bold red"
WAIT_MESSAGE_CHARS = 60
"""How much of a server's message a status line shows: it must stay one line."""


def asker_view(kind: str, asker: Asker, message: str) -> RenderableType:
    """Which server asks (as it names itself, and where the host reached it), during which call, and why:
    the first thing a person must see."""
    server = printable(asker.server_name)
    if asker.server_version:
        server += f" {printable(asker.server_version)}"
    if asker.server_title:
        server = f"{printable(asker.server_title)} ({server})"
    lines = [Text.assemble(("Server: ", "bold"), server)]
    if asker.endpoint:
        lines.append(Text.assemble(("At:     ", "bold"), printable(asker.endpoint)))
    if asker.tool:
        lines.append(Text.assemble(("Tool:   ", "bold"), printable(asker.tool)))
    if asker.prompt:
        lines.append(Text.assemble(("Prompt: ", "bold"), printable(asker.prompt)))
    if asker.resource:
        lines.append(Text.assemble(("Resource: ", "bold"), printable(asker.resource)))
    lines.append(Text(""))
    lines.append(Text(printable(message, multiline=True)))
    lines.append(Text(""))
    return Group(Rule(Text(kind, style="bold")), *lines)


def label(field: Field) -> str:
    return field.title or field.name


def constraints(field: Field) -> str | None:
    """The rules a person should know before typing, in words (None when there are none worth saying)."""
    if field.kind in ("integer", "number"):
        what = "a whole number" if field.kind == "integer" else "a number"
        return _range(what, field.minimum, field.maximum, "from {} to {}", "at least {}", "at most {}")
    if field.kind == "text":
        shape = {
            "email": "an email address",
            "uri": "a full address (https://...)",
            "date": "a date, YYYY-MM-DD",
            "date-time": "a date and time with UTC offset, YYYY-MM-DDTHH:MM:SSZ",
        }.get(field.format or "")
        size = _range(
            "",
            field.min_length,
            field.max_length,
            "{} to {} characters",
            "at least {} characters",
            "at most {} characters",
        )
        return ", ".join(part for part in (shape, size) if part) or None
    if field.kind == "choices":
        return _range(
            "", field.min_length, field.max_length, "choose {} to {}", "choose at least {}", "choose at most {}"
        )
    return None


def _range(what: str, low: float | None, high: float | None, both: str, at_least: str, at_most: str) -> str | None:
    prefix = f"{what} " if what else ""
    if low is not None and high is not None:
        return prefix + both.format(number_text(low), number_text(high))
    if low is not None:
        return prefix + at_least.format(number_text(low))
    if high is not None:
        return prefix + at_most.format(number_text(high))
    return what or None


def display(field: Field, value: Answer | None) -> str:
    """An answer as a person reads it back: choice titles, yes/no, or the text itself."""
    if value is None:
        return "(no answer)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(field.title_of(item) for item in value) if value else "(none)"
    if field.kind == "choice" and isinstance(value, str):
        return field.title_of(value)
    return value if isinstance(value, str) else number_text(value)


def field_heading(number: int, count: int, field: Field) -> RenderableType:
    """A field's label, whether it is required, its description and rules, before the person answers it."""
    heading = Text.assemble((f"[{number}/{count}] ", "dim"), (printable(label(field)), "bold"))
    heading.append(" (required)" if field.required else " (optional)", style="cyan" if field.required else "dim")
    lines: list[RenderableType] = [heading]
    if field.description:
        lines.append(Text("      " + printable(field.description, multiline=True)))
    rules = constraints(field)
    if rules:
        lines.append(Text("      " + rules, style="dim"))
    if field.kind == "text" and field.default is not None:
        lines.append(Text("      suggested answer filled in: edit it or press Enter", style="dim"))
    return Group(*lines)


def problem_line(field: Field | None, problem: str) -> Text:
    named = printable(label(field)) if field is not None else "The answer"
    return Text(f"  ! {named}: {problem}", style=WARNING_STYLE)


def review_table(form: Form, answers: Mapping[str, Answer]) -> Table:
    """Every answer as it will be sent (choice titles shown), numbered so the person can pick one to edit."""
    table = Table(title="Your answers", title_justify="left", show_lines=False, expand=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("Field")
    table.add_column("Answer", overflow="fold")
    for number, field in enumerate(form.fields, start=1):
        named = Text(printable(label(field)))
        if field.required:
            named.append(" *", style="cyan")
        value = answers.get(field.name)
        shown = Text(printable(display(field, value)), style="dim" if value is None else "")
        table.add_row(str(number), named, shown)
    return table


def url_view(review: UrlReview) -> RenderableType:
    """The full URL with its host highlighted, the host alone (and its ASCII form), then every warning."""
    url = Text(overflow="fold")
    span = review.host_span
    if span is None:
        url.append(printable(review.url, joiners=True))
    else:
        start, end = span
        url.append(printable(review.url[:start], joiners=True))
        url.append(printable(review.url[start:end], joiners=True), style=HOST_STYLE)
        url.append(printable(review.url[end:], joiners=True))
    lines: list[RenderableType] = [Text("URL, its host highlighted:", style="bold"), url]
    if review.host:
        lines.append(Text.assemble(("Host: ", "bold"), (printable(review.host, joiners=True), HOST_STYLE)))
    if review.host_ascii and review.host_ascii != review.host:
        looked_up = printable(review.host_ascii, joiners=True)
        lines.append(Text.assemble(("Host as the browser will look it up: ", "bold"), (looked_up, HOST_STYLE)))
    lines.extend(Text(f"WARNING: {warning.value}", style=WARNING_STYLE) for warning in review.warnings)
    return Group(*lines, Text(""))


def wait_summary(wait: Wait, now: float, wall: float | None = None) -> str:
    """One wait in one line: `now` on the kit's clock (that of `wait`), `wall` the time of day (default now)."""
    return f"{wait_title(wait)} · {wait_times(wait, now, wall)}"


def wait_title(wait: Wait) -> str:
    """What is awaited, and for which server."""
    message = printable(" ".join(wait.message.split()))
    if len(message) > WAIT_MESSAGE_CHARS:
        message = message[: WAIT_MESSAGE_CHARS - 1] + "…"
    if wait.kind == "server":
        what = "Waiting for approval" if wait.approval else "Waiting for the server"
    elif wait.done:
        what = "Done in the browser, the server still asks for"
    else:
        what = "Waiting for the browser"
    return f"{what}: {message} ({printable(wait.server)})"


def wait_times(wait: Wait, now: float, wall: float | None = None) -> str:
    """How long it has been, and the deadline as a time of day with the time left."""
    elapsed = f"{_duration(now - wait.since)} elapsed"
    if wait.deadline is None:
        return f"{elapsed} · no deadline"
    left = wait.deadline - now
    at = time.strftime("%H:%M:%S", time.localtime((time.time() if wall is None else wall) + left))
    return f"{elapsed} · deadline {at} " + (f"({_duration(left)} left)" if left > 0 else "(passed)")


def _duration(seconds: float) -> str:
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
