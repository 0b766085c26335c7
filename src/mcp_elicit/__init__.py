"""mcp-elicit: MCP elicitation as a durable, bound and audited protocol capability.

The top level is the short face users write against: the tool author's `Elicitation`, `Flow`, the outcome
types and the policies, the approval `Gate`; the host's `ElicitingClient`, the handler interface, its replies
and the ready-made handlers; what it takes to open a store; and the settings read from the environment.
Everything else (records, transition tables, digests, redaction, store errors beyond the basic ones) stays in
its subpackage: `mcp_elicit.model`, `mcp_elicit.store`, `mcp_elicit.server`, `mcp_elicit.client`,
`mcp_elicit.approvals`.

The names resolve lazily, on first access (PEP 562), so `import mcp_elicit` stays cheap for the CLI and for
hosts: it imports neither the MCP SDK, the client kit's terminal stack nor a database driver until a name
that needs one is used. Only `__version__` is defined eagerly.
"""

from typing import TYPE_CHECKING

from mcp_elicit._exports import lazy_exports

__version__ = "0.1.0"

# Each public name and the subpackage it lives in (and is documented in).
_HOMES: dict[str, str] = {
    # Writing a tool.
    "Elicitation": "mcp_elicit.server",
    "Flow": "mcp_elicit.server",
    "Answer": "mcp_elicit.server",
    "UrlAnswer": "mcp_elicit.server",
    "Accepted": "mcp_elicit.server",
    "Declined": "mcp_elicit.server",
    "Cancelled": "mcp_elicit.server",
    "Expired": "mcp_elicit.server",
    "Completed": "mcp_elicit.server",
    "Consented": "mcp_elicit.server",
    "Failed": "mcp_elicit.server",
    "ClientRefused": "mcp_elicit.server",
    "IdempotencyKeyConflict": "mcp_elicit.server",
    "SwallowedSignal": "mcp_elicit.server",
    "OutcomeUnknown": "mcp_elicit.server",
    "Fallback": "mcp_elicit.server",
    "IdentityPolicy": "mcp_elicit.server",
    "RequestState": "mcp_elicit.server",
    "Timing": "mcp_elicit.server",
    "TaskPolicy": "mcp_elicit.server",
    "ResumePolicy": "mcp_elicit.model",
    # Gating a tool on a person's approval.
    "ApproverRule": "mcp_elicit.approvals",
    "Gate": "mcp_elicit.approvals",
    "GateRefused": "mcp_elicit.approvals",
    "Grants": "mcp_elicit.approvals",
    # Hosting a client.
    "ElicitingClient": "mcp_elicit.client",
    "Http": "mcp_elicit.client",
    "Stdio": "mcp_elicit.client",
    "Timeouts": "mcp_elicit.client",
    "SdkOptions": "mcp_elicit.client",
    "ElicitationHandler": "mcp_elicit.client",
    "FormRequest": "mcp_elicit.client",
    "UrlRequest": "mcp_elicit.client",
    "FormReply": "mcp_elicit.client",
    "UrlReply": "mcp_elicit.client",
    "Accept": "mcp_elicit.client",
    "Decline": "mcp_elicit.client",
    "Cancel": "mcp_elicit.client",
    "Consent": "mcp_elicit.client",
    "TerminalHandler": "mcp_elicit.client",
    "ScriptedHandler": "mcp_elicit.client",
    "NoPersonHandler": "mcp_elicit.client",
    "load_script": "mcp_elicit.client",
    "ScriptError": "mcp_elicit.client",
    # Opening a store.
    "open_store": "mcp_elicit.store",
    "Store": "mcp_elicit.store",
    "StoreError": "mcp_elicit.store",
    "StoreUnavailable": "mcp_elicit.store",
    # Configuration from the environment.
    "Settings": "mcp_elicit.settings",
    "SettingsError": "mcp_elicit.settings",
}

if TYPE_CHECKING:
    # What type checkers see; at run time `__getattr__` below imports these on first use.
    from mcp_elicit.approvals import ApproverRule, Gate, GateRefused, Grants
    from mcp_elicit.client import (
        Accept,
        Cancel,
        Consent,
        Decline,
        ElicitationHandler,
        ElicitingClient,
        FormReply,
        FormRequest,
        Http,
        NoPersonHandler,
        ScriptedHandler,
        ScriptError,
        SdkOptions,
        Stdio,
        TerminalHandler,
        Timeouts,
        UrlReply,
        UrlRequest,
        load_script,
    )
    from mcp_elicit.model import ResumePolicy
    from mcp_elicit.server import (
        Accepted,
        Answer,
        Cancelled,
        ClientRefused,
        Completed,
        Consented,
        Declined,
        Elicitation,
        Expired,
        Failed,
        Fallback,
        Flow,
        IdempotencyKeyConflict,
        IdentityPolicy,
        OutcomeUnknown,
        RequestState,
        SwallowedSignal,
        TaskPolicy,
        Timing,
        UrlAnswer,
    )
    from mcp_elicit.settings import Settings, SettingsError
    from mcp_elicit.store import Store, StoreError, StoreUnavailable, open_store

__all__ = [
    "Accept",
    "Accepted",
    "Answer",
    "ApproverRule",
    "Cancel",
    "Cancelled",
    "ClientRefused",
    "Completed",
    "Consent",
    "Consented",
    "Decline",
    "Declined",
    "Elicitation",
    "ElicitationHandler",
    "ElicitingClient",
    "Expired",
    "Failed",
    "Fallback",
    "Flow",
    "FormReply",
    "FormRequest",
    "Gate",
    "GateRefused",
    "Grants",
    "Http",
    "IdempotencyKeyConflict",
    "IdentityPolicy",
    "NoPersonHandler",
    "OutcomeUnknown",
    "RequestState",
    "ResumePolicy",
    "ScriptError",
    "ScriptedHandler",
    "SdkOptions",
    "Settings",
    "SettingsError",
    "Stdio",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "SwallowedSignal",
    "TaskPolicy",
    "TerminalHandler",
    "Timeouts",
    "Timing",
    "UrlAnswer",
    "UrlReply",
    "UrlRequest",
    "__version__",
    "load_script",
    "open_store",
]

# Hidden from type checkers: a module-level `__getattr__` would make them accept any name imported from
# `mcp_elicit` (typed as its return type), so a misspelt import would no longer be an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
