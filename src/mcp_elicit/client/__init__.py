"""The host side: what a client needs to put elicitation in front of a person safely."""

from mcp_elicit.client.capabilities import elicitation_capability
from mcp_elicit.client.config import DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, Http, SdkOptions, Stdio, Timeouts
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
