"""Printing a tool's result for a person: its text, then its structured content when that adds anything.

Everything in a result comes from the server, so text goes through the kit's `printable` (control and
invisible characters made visible) and is never read as rich markup: a result cannot rewrite the screen.
"""

from __future__ import annotations

import json

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
