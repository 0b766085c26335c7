"""The host side: what a client needs to put elicitation in front of a person safely.

The names resolve on first use (`mcp_elicit._exports`), so a host that takes only the terminal handler or the
URL review does not load the MCP SDK, which the connection classes need.
"""

from typing import TYPE_CHECKING

from mcp_elicit._exports import lazy_exports

# Each public name and the module that defines it.
_HOMES: dict[str, str] = {
    "elicitation_capability": "mcp_elicit.client.capabilities",
    "DEFAULT_CONNECT_TIMEOUT": "mcp_elicit.client.config",
    "DEFAULT_REQUEST_TIMEOUT": "mcp_elicit.client.config",
    "Http": "mcp_elicit.client.config",
    "SdkOptions": "mcp_elicit.client.config",
    "Stdio": "mcp_elicit.client.config",
    "Timeouts": "mcp_elicit.client.config",
    "CallStopped": "mcp_elicit.client.errors",
    "ConnectionLost": "mcp_elicit.client.errors",
    "KitError": "mcp_elicit.client.errors",
    "QuestionRefused": "mcp_elicit.client.errors",
    "ServerSilent": "mcp_elicit.client.errors",
    "StillWaiting": "mcp_elicit.client.errors",
    "TooManyRounds": "mcp_elicit.client.errors",
    "UnknownResultType": "mcp_elicit.client.errors",
    "UnsupportedEra": "mcp_elicit.client.errors",
    "UrlFlowStopped": "mcp_elicit.client.errors",
    "UrlStillRequired": "mcp_elicit.client.errors",
    "Accept": "mcp_elicit.client.handler",
    "Asker": "mcp_elicit.client.handler",
    "Cancel": "mcp_elicit.client.handler",
    "Consent": "mcp_elicit.client.handler",
    "Decline": "mcp_elicit.client.handler",
    "ElicitationHandler": "mcp_elicit.client.handler",
    "FormReply": "mcp_elicit.client.handler",
    "FormRequest": "mcp_elicit.client.handler",
    "JsonValue": "mcp_elicit.client.handler",
    "Mode": "mcp_elicit.client.handler",
    "UrlReply": "mcp_elicit.client.handler",
    "UrlRequest": "mcp_elicit.client.handler",
    "NoPersonHandler": "mcp_elicit.client.handlers",
    "ScriptedHandler": "mcp_elicit.client.handlers",
    "ScriptEntry": "mcp_elicit.client.handlers",
    "ScriptError": "mcp_elicit.client.handlers",
    "load_script": "mcp_elicit.client.handlers",
    "parse_script": "mcp_elicit.client.handlers",
    "Pacing": "mcp_elicit.client.mrtr_loop",
    "UrlOpener": "mcp_elicit.client.opener",
    "system_browser": "mcp_elicit.client.opener",
    "FlowStatus": "mcp_elicit.client.pending",
    "PendingFlow": "mcp_elicit.client.pending",
    "PendingFlows": "mcp_elicit.client.pending",
    "MAX_INVALID_REPLIES": "mcp_elicit.client.replies",
    "ElicitingClient": "mcp_elicit.client.session",
    "Era": "mcp_elicit.client.session",
    "Target": "mcp_elicit.client.session",
    "kit_http_client": "mcp_elicit.client.session",
    "TerminalHandler": "mcp_elicit.client.terminal",
    "UrlReview": "mcp_elicit.client.url_review",
    "UrlWarning": "mcp_elicit.client.url_review",
    "review_url": "mcp_elicit.client.url_review",
}

if TYPE_CHECKING:
    # What type checkers see; at run time the names load on first use.
    from mcp_elicit.client.capabilities import elicitation_capability
    from mcp_elicit.client.config import (
        DEFAULT_CONNECT_TIMEOUT,
        DEFAULT_REQUEST_TIMEOUT,
        Http,
        SdkOptions,
        Stdio,
        Timeouts,
    )
    from mcp_elicit.client.errors import (
        CallStopped,
        ConnectionLost,
        KitError,
        QuestionRefused,
        ServerSilent,
        StillWaiting,
        TooManyRounds,
        UnknownResultType,
        UnsupportedEra,
        UrlFlowStopped,
        UrlStillRequired,
    )
    from mcp_elicit.client.handler import (
        Accept,
        Asker,
        Cancel,
        Consent,
        Decline,
        ElicitationHandler,
        FormReply,
        FormRequest,
        JsonValue,
        Mode,
        UrlReply,
        UrlRequest,
    )
    from mcp_elicit.client.handlers import (
        NoPersonHandler,
        ScriptedHandler,
        ScriptEntry,
        ScriptError,
        load_script,
        parse_script,
    )
    from mcp_elicit.client.mrtr_loop import Pacing
    from mcp_elicit.client.opener import UrlOpener, system_browser
    from mcp_elicit.client.pending import FlowStatus, PendingFlow, PendingFlows
    from mcp_elicit.client.replies import MAX_INVALID_REPLIES
    from mcp_elicit.client.session import ElicitingClient, Era, Target, kit_http_client
    from mcp_elicit.client.terminal import TerminalHandler
    from mcp_elicit.client.url_review import UrlReview, UrlWarning, review_url

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_INVALID_REPLIES",
    "Accept",
    "Asker",
    "CallStopped",
    "Cancel",
    "ConnectionLost",
    "Consent",
    "Decline",
    "ElicitationHandler",
    "ElicitingClient",
    "Era",
    "FlowStatus",
    "FormReply",
    "FormRequest",
    "Http",
    "JsonValue",
    "KitError",
    "Mode",
    "NoPersonHandler",
    "Pacing",
    "PendingFlow",
    "PendingFlows",
    "QuestionRefused",
    "ScriptEntry",
    "ScriptError",
    "ScriptedHandler",
    "SdkOptions",
    "ServerSilent",
    "Stdio",
    "StillWaiting",
    "Target",
    "TerminalHandler",
    "Timeouts",
    "TooManyRounds",
    "UnknownResultType",
    "UnsupportedEra",
    "UrlFlowStopped",
    "UrlOpener",
    "UrlReply",
    "UrlRequest",
    "UrlReview",
    "UrlStillRequired",
    "UrlWarning",
    "elicitation_capability",
    "kit_http_client",
    "load_script",
    "parse_script",
    "review_url",
    "system_browser",
]

# Hidden from type checkers, which would otherwise accept any misspelt name (see `mcp_elicit`).
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
