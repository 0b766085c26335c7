"""What a host implements to put an elicitation in front of a person, whatever the protocol era.

The kit calls the handler with what the person must see (which server asks, during which call, the message,
the form schema or the reviewed URL) and maps the reply onto the wire for the negotiated era. Decline and
cancel stay distinct end to end: `Decline` is the person's explicit "no", `Cancel` means nobody decided (the
dialog was closed, no person is there). A handler never invents a decision: a host that cannot ask anyone
returns `Cancel`, or better declares no elicitation mode at all (`modes` empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from mcp_elicit.client.url_review import UrlReview

Mode: TypeAlias = Literal["form", "url"]
JsonValue: TypeAlias = str | int | float | bool | list[str]
"""A form answer's value: what the restricted form schema can ask for. A field left unanswered is left out."""


@dataclass(frozen=True, slots=True)
class Asker:
    """Who is asking: the server as it named itself at connection time, and the tool call it asks for.

    A server's name, version and title are whatever the server says about itself, so `endpoint` adds what
    the host knows for sure: the URL it connected to, or the command it started (None when the host gave a
    ready transport and no label). A person compares the two.

    `tool` (or `prompt` for a `prompts/get`, `resource` for a `resources/read`) is None when the kit cannot
    tell which call a question belongs to: on 2025-era connections a question arrives on its own, and with
    several calls in flight at once nothing on the wire says which one it is for.
    """

    server_name: str
    server_version: str | None = None
    server_title: str | None = None
    tool: str | None = None
    prompt: str | None = None
    endpoint: str | None = None
    resource: str | None = None


@dataclass(frozen=True, slots=True)
class FormRequest:
    asker: Asker
    message: str
    requested_schema: Mapping[str, Any]
    problem: str | None = None
    """Why the handler's previous answer to this very question was refused (the kit asks again)."""


@dataclass(frozen=True, slots=True)
class UrlRequest:
    asker: Asker
    message: str
    review: UrlReview
    elicitation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Accept:
    """Accept a form with its content (validated against the requested schema by the kit before sending).

    The content is sent as given: the kit adds nothing, not even a schema's defaults, since only the person
    (through the form, which may pre-fill them) can choose an answer.
    """

    content: Mapping[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Consent:
    """Consent to a URL: the kit then opens it in the system browser (never before) and tracks the flow."""


@dataclass(frozen=True, slots=True)
class Decline:
    """The person explicitly refused."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """Nobody decided: dialog dismissed, Esc/Ctrl-C, or no person available."""


FormReply: TypeAlias = Accept | Decline | Cancel
UrlReply: TypeAlias = Consent | Decline | Cancel


class ElicitationHandler(Protocol):
    """The one interface a host implements. `modes` is what gets declared to servers, on every era."""

    @property
    def modes(self) -> frozenset[Mode]: ...

    async def form(self, request: FormRequest) -> FormReply: ...

    async def url(self, request: UrlRequest) -> UrlReply: ...
