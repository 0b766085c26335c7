"""Resource reads with a `Flow`: what `@elicitation.resource(uri_template)` needs beyond a tool's registration.

The spec lets a server elicit while it handles `resources/read`: on 2025-06-18 and 2025-11-25 with an
`elicitation/create` request related to the read, on 2026-07-28 by answering the read with an
`InputRequiredResult`, which the client retries with `inputResponses` and the echoed `requestState`
(`resources/read` is one of the three methods that may answer so). The runtime runs a read exactly as a
tool call: an operation (method `resources/read`, target the URI template, digest of the template's
variables) bound to the caller, a journal, single flight, a replayed result. This module holds what is
particular to resources: the template must have variables (the SDK hands a static resource no request
context, so it could not ask), and a `bytes` body result is recorded as base64 so that a replay gives the
same bytes back.
"""

from __future__ import annotations

from typing import Any

from mcp.shared.uri_template import UriTemplate
from pydantic import Base64Bytes

__all__ = ["RESOURCES_READ", "checked_template", "recorded_type"]

RESOURCES_READ = "resources/read"


def checked_template(uri_template: str) -> UriTemplate:
    """The parsed template, refused unless it has variables: only a template read carries the request context."""
    if not isinstance(uri_template, str) or not uri_template:
        raise TypeError("elicitation.resource takes the resource's URI template, e.g. 'notes://{note_id}'")
    parsed = UriTemplate.parse(uri_template)
    if not parsed.variable_names:
        raise ValueError(
            f"resource {uri_template!r} has no URI template variables: a read that asks needs the request, and the "
            "SDK gives it only to template resources; add a variable (e.g. 'notes://{note_id}') or register a "
            "static resource with the server's own @server.resource"
        )
    return parsed


def recorded_type(returned: Any) -> Any:
    """The type a read's result is recorded and replayed as: `bytes` travels through the store as base64."""
    return Base64Bytes if returned is bytes else returned
