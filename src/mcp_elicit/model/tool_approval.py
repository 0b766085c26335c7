"""The tool-approval extension's wire names (a draft, SEP-2848 of 2026-06-08), shared by the server and the client kit.

Kept in the model layer because both sides read and write them: the server in its era code and its task state,
the client when it declares the extension and reads a task's `_meta`. Nothing here decides anything.
"""

from __future__ import annotations

from typing import Final

TOOL_APPROVAL_EXTENSION: Final = "io.modelcontextprotocol/tool-approval"
"""The identifier this project advertises (the pull request's summary names it so)."""
DRAFT_TEXT_IDENTIFIER: Final = "net.openid.authzen/tool-approval"
"""The identifier the draft's own text names ("illustrative, to be confirmed"); the server accepts it too."""
TOOL_APPROVAL_IDENTIFIERS: Final = frozenset({TOOL_APPROVAL_EXTENSION, DRAFT_TEXT_IDENTIFIER})
TOOL_APPROVAL_VERSION: Final = "0.1"

DISPOSITION_META: Final = "net.openid.authzen/disposition"
"""In an approval task's `CallToolResult._meta`: whether the tool ran."""
APPROVED_EXECUTED: Final = "approved-executed"
DENIED_NOT_EXECUTED: Final = "denied-not-executed"
EXECUTION_ERROR: Final = "execution-error"
IMMEDIATE_RESPONSE_META: Final = "io.modelcontextprotocol/model-immediate-response"
"""In a `CreateTaskResult._meta`: the text the model reads at once (the call has not run yet)."""
