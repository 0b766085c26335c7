"""Printing a tool's result for a person: its text, then its structured content when that adds anything.

Everything in a result comes from the server, so text goes through the kit's `printable` (control and
invisible characters made visible) and is never read as rich markup: a result cannot rewrite the screen.
A result an mcp-elicit server replayed from an identical earlier call says so (`replay_note`): otherwise a
person re-running a command would take the old result for a new run of the tool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from mcp_types import (
    AudioContent,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from rich.console import Console
from rich.text import Text

from mcp_elicit.client.terminal_views import printable
from mcp_elicit.server import REPLAYED_META_KEY


def result_text(result: CallToolResult) -> str:
    """The result's content as one text: text blocks as they are, other blocks as a one-line description."""
    return "\n".join(_block(block) for block in result.content)


def print_result(console: Console, result: CallToolResult) -> None:
    shown = result_text(result)
    if shown:
        console.print(Text(printable(shown, multiline=True), style="red" if result.is_error else ""))
    structured = result.structured_content
    if structured is not None and structured != {"result": shown}:
        console.print(Text("structured content:", style="dim"))
        console.print_json(json.dumps(structured, ensure_ascii=False))
    if not shown and structured is None:
        console.print(Text("(the tool returned no content)", style="dim"))


def replay_note(result: CallToolResult, now: datetime) -> str | None:
    """What to tell the person about a result the server handed over from an identical call, if it did."""
    replayed = (result.meta or {}).get(REPLAYED_META_KEY)
    if not isinstance(replayed, Mapping):
        return None
    when = "earlier"
    recorded = replayed.get("recordedAt")
    if isinstance(recorded, str):
        try:
            at = datetime.fromisoformat(recorded)
        except ValueError:
            at = None
        if at is not None:
            when = _ago((now - (at if at.tzinfo is not None else at.replace(tzinfo=UTC))).total_seconds())
    operation = replayed.get("operationId")
    of = f" (operation {printable(operation)})" if isinstance(operation, str) and operation else ""
    return f"replayed the result recorded {when} by an identical call{of}; the tool did not run again"


def _ago(seconds: float) -> str:
    if seconds < 1:
        return "just now"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


def _block(block: ContentBlock) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind}, {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, ResourceLink):
        return f"[link to {block.uri}]"
    if isinstance(block, EmbeddedResource):
        contents = block.resource
        if isinstance(contents, TextResourceContents):
            return f"[resource {contents.uri}]\n{contents.text}"
        return f"[resource {contents.uri}, binary]"
    return f"[{type(block).__name__}]"
