"""What the terminal handler prints with rich: who asks, each field's heading, the review table, the URL.

Every text here comes from a server, so none is trusted: it is never parsed as rich markup (only `Text`
objects are printed), and `printable` shows control and invisible formatting characters by code point (`<U+202E>`)
instead of passing them to the terminal, where an escape sequence could rewrite the screen (a fake
"approved" line, a hidden URL) and a right-to-left override could reverse what a person reads. URLs are
printed as plain text, never as terminal hyperlinks: the spec keeps every URL but a URL request's own one
from being clickable, and that one is opened only after consent. The URL shown is the review's rebuilt one,
the very text the kit opens, with the host highlighted where the review found it (never re-parsed here,
where another parser could find another host); a host is shown with its joiners made visible too.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from mcp_elicit.client.handler import Asker
from mcp_elicit.client.schema_form import Answer, Field, Form
from mcp_elicit.client.url_review import UrlReview

__all__ = [
    "HOST_STYLE",
    "asker_view",
    "field_heading",
    "printable",
    "problem_line",
    "review_table",
    "url_view",
]

HOST_STYLE = "bold black on yellow"
WARNING_STYLE = "bold red"
_KEEP_FORMAT = frozenset({"\u200d"})
"""The zero-width joiner stays: emoji sequences need it and it cannot reorder or hide text."""


def printable(text: str, *, multiline: bool = False, joiners: bool = False) -> str:
    """The text with every character that could act on the terminal, or hide or reorder text, made visible.

    `joiners`: show the zero-width joiner too, as in a host name, where it only ever disguises a name.
    """
    shown = []
    for character in text:
        if character == "\n" and multiline:
            shown.append(character)
        elif character == "\t":
            shown.append("    " if multiline else " ")
        elif _hidden(character) or (joiners and character in _KEEP_FORMAT):
            shown.append(f"<U+{ord(character):04X}>")
        else:
            shown.append(character)
    return "".join(shown)


def _hidden(character: str) -> bool:
    category = unicodedata.category(character)
    return category in ("Cc", "Cs", "Co", "Zl", "Zp") or (category == "Cf" and character not in _KEEP_FORMAT)


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


def field_heading(number: int, count: int, field: Field) -> RenderableType:
    """A field's label, whether it is required, its description and rules, before the person answers it."""
    heading = Text.assemble((f"[{number}/{count}] ", "dim"), (printable(field.label), "bold"))
    heading.append(" (required)" if field.required else " (optional)", style="cyan" if field.required else "dim")
    lines: list[RenderableType] = [heading]
    if field.description:
        lines.append(Text("      " + printable(field.description, multiline=True)))
    rules = field.constraints()
    if rules:
        lines.append(Text("      " + rules, style="dim"))
    if field.kind == "text" and field.default is not None:
        lines.append(Text("      suggested answer filled in: edit it or press Enter", style="dim"))
    return Group(*lines)


def problem_line(field: Field | None, problem: str) -> Text:
    label = printable(field.label) if field is not None else "The answer"
    return Text(f"  ! {label}: {problem}", style=WARNING_STYLE)


def review_table(form: Form, answers: Mapping[str, Answer]) -> Table:
    """Every answer as it will be sent (choice titles shown), numbered so the person can pick one to edit."""
    table = Table(title="Your answers", title_justify="left", show_lines=False, expand=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("Field")
    table.add_column("Answer", overflow="fold")
    for number, field in enumerate(form.fields, start=1):
        label = Text(printable(field.label))
        if field.required:
            label.append(" *", style="cyan")
        value = answers.get(field.name)
        shown = Text(printable(field.display(value)), style="dim" if value is None else "")
        table.add_row(str(number), label, shown)
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
