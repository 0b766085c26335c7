"""Which protocol era a request speaks, and which elicitation modes its client declared.

Everything here reads the SDK's request context; nothing decides policy. `Modes.unknown` is kept apart
from "declared nothing": on stateless legacy HTTP the SDK has no handshake to read, and guessing either
way would be wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mcp_types import ClientCapabilities


class Era(StrEnum):
    """How a server may ask: not at all, with a server-initiated request, or by returning input_required."""

    NONE = "none"
    LEGACY = "legacy"
    MRTR = "mrtr"


ERA_BY_VERSION: dict[str, Era] = {
    "2024-11-05": Era.NONE,
    "2025-03-26": Era.NONE,
    "2025-06-18": Era.LEGACY,
    "2025-11-25": Era.LEGACY,
    "2026-07-28": Era.MRTR,
}
URL_MODE_SINCE = "2025-11-25"


def era_of(protocol_version: str | None) -> Era:
    """Unknown or missing versions cannot be asked anything: failing closed beats guessing a wire shape."""
    if protocol_version is None:
        return Era.NONE
    return ERA_BY_VERSION.get(protocol_version, Era.NONE)


@dataclass(frozen=True, slots=True)
class Modes:
    form: bool
    url: bool
    unknown: bool = False

    @classmethod
    def declared(cls, capabilities: ClientCapabilities | None, protocol_version: str | None) -> Modes:
        if capabilities is None:
            return cls(form=False, url=False, unknown=True)
        elicitation = capabilities.elicitation
        if elicitation is None:
            return cls(form=False, url=False)
        if elicitation.form is None and elicitation.url is None:
            return cls(form=True, url=False)
        url_allowed = protocol_version is not None and protocol_version >= URL_MODE_SINCE
        return cls(form=elicitation.form is not None, url=url_allowed and elicitation.url is not None)
