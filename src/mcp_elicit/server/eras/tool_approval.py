"""The tool-approval extension (experimental): a gated call whose approval others give becomes a task.

This follows a draft, not a specification: SEP-2848, "Asynchronous Approval for Tool Calls" (pull request 2848
of the MCP specification repository, opened 2026-06-03), as its text stood on 2026-06-08 (commit 8d12c29,
`seps/2848-asynchronous-approval-for-tool-calls.md`). What it asks, and what this server does:

- When a call's authorization is a denial that can still be approved (here: a gate whose approval others give,
  `Gate(approvers=...)` or `Gate(approval=...)`, applies to the call), a client that declared the tasks
  extension gets a `CreateTaskResult` (`resultType: "task"`, `status: "working"`) instead of the tool's result,
  and the tool does not run. The task stays `working` while the approval is decided out of band (people in the
  inbox, a policy function, another agent: `mcp_elicit.approvals.backends`); on approval the server evaluates
  again (the same call, the approval unexpired, the backend's `reevaluate`) and only then runs the tool once;
  `tasks/get` returns the result. Nothing of the approval crosses the wire but the task id.
- The outcome is said in the `CallToolResult` itself ("nothing ran" on every denial) and, for clients that read
  it, in the result's `_meta` under `net.openid.authzen/disposition`: `approved-executed`, `denied-not-executed`
  or `execution-error`. The `CreateTaskResult` carries `io.modelcontextprotocol/model-immediate-response`, a
  text telling the model the call has not run yet.
- An identical call while the task is open gets the same task; after it ended, a new approval and a new task.
- The task's status message is "Waiting for approval", never who approves (roles, `agent:NAME`) nor their votes.
- Re-evaluation asks about the call as it will run: the arguments the tool gets, approvers' edits applied.
- Approval-request amplification: a principal's open approval tasks are bounded (counted in the store) and
  their new ones rate-limited (a token bucket per instance), `Elicitation(tool_approval_limits=...)`; a call over
  either gets a tool error (no task) saying which limit and when to try again.
- Retention: a gate whose TTL is not shorter than the longest task TTL is refused at registration, so a task
  never expires before its approval could be given.

Where this departs from the draft, and why:

- Identifier. The draft's text names the extension `net.openid.authzen/tool-approval` ("illustrative, to be
  confirmed"); the pull request's summary, and this project's issue, `io.modelcontextprotocol/tool-approval`.
  The server advertises the latter and accepts either from a client.
- Opt-in. The draft lets a client that declared only the tasks extension receive approval tasks; here the
  client must also declare tool approval (and the server must enable it, `Elicitation(tool_approval=True)`).
  The draft's own Backward Compatibility section says turning approval gating on changes the responses existing
  integrations see; asking for both declarations keeps it additive. Any other client gets the gate's ordinary
  behaviour: the live call waits for the approvers a while, then a tool error saying it has not run and how to
  come back for the result (the draft's "degraded `CallToolResult`").
- Submission input (the draft's `input_required` before or during the approval) is not used: what the
  approvers are shown is the call itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mcp.server.extension import Extension

from mcp_elicit.model.extensions import TASKS_EXTENSION
from mcp_elicit.model.tool_approval import (
    APPROVED_EXECUTED,
    DENIED_NOT_EXECUTED,
    DISPOSITION_META,
    DRAFT_TEXT_IDENTIFIER,
    EXECUTION_ERROR,
    IMMEDIATE_RESPONSE_META,
    TOOL_APPROVAL_EXTENSION,
    TOOL_APPROVAL_IDENTIFIERS,
    TOOL_APPROVAL_VERSION,
)
from mcp_elicit.server.eras import Call

__all__ = [
    "APPROVED_EXECUTED",
    "DENIED_NOT_EXECUTED",
    "DISPOSITION_META",
    "DRAFT_TEXT_IDENTIFIER",
    "EXECUTION_ERROR",
    "IMMEDIATE_RESPONSE",
    "IMMEDIATE_RESPONSE_META",
    "TOOL_APPROVAL_EXTENSION",
    "ToolApprovalExtension",
    "declared",
]

SEP: Final = "SEP-2848"
DRAFT_DATE: Final = "2026-06-08"
"""The date of the draft text followed (the pull request's second revision)."""
IDENTIFIERS: Final = TOOL_APPROVAL_IDENTIFIERS
VERSION: Final = TOOL_APPROVAL_VERSION
ERA: Final = "2026-07-28"

IMMEDIATE_RESPONSE: Final = (
    "This call has not run: it is waiting for approval, and may still be denied. You can continue other work "
    "and check back on the task."
)


class ToolApprovalExtension(Extension):
    """Advertises the extension in the server's capabilities; the behaviour is the runtime's (see the module)."""

    identifier = TOOL_APPROVAL_EXTENSION

    def settings(self) -> dict[str, Any]:
        return {"version": VERSION}


def declared(call: Call) -> bool:
    """Whether this 2026-07-28 request declared both the tasks extension and tool approval (either identifier)."""
    if call.request.protocol_version != ERA:
        return False
    capabilities = call.request.session.client_capabilities
    extensions: Mapping[str, Any] | None = capabilities.extensions if capabilities is not None else None
    if not extensions:
        return False
    return TASKS_EXTENSION in extensions and not IDENTIFIERS.isdisjoint(extensions)
