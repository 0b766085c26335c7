"""What a tool call gave back, as tests read it: its text, its error's text, the error inside an exception group."""

from __future__ import annotations

from mcp_types import CallToolResult, TextContent


def unwrap(error: BaseException) -> BaseException:
    """The in-process client surfaces a server's JSON-RPC error inside task-group exception groups."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def text(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text
