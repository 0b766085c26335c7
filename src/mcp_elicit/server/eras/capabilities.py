"""Which protocol era a request speaks, and what its client declared it can be asked.

Everything here reads the SDK's request context; nothing decides policy. `Declared.unknown` is kept apart
from "declared nothing": on stateless legacy HTTP the SDK has no handshake to read, and guessing either
way would be wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ClientCapabilities,
    ElicitationCapability,
    FormElicitationCapability,
    MissingRequiredClientCapabilityErrorData,
    RootsCapability,
    SamplingCapability,
    UrlElicitationCapability,
)


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


class Need(StrEnum):
    """A client capability that asking something needs."""

    FORM = "elicitation.form"
    URL = "elicitation.url"
    SAMPLING = "sampling"
    ROOTS = "roots"


@dataclass(frozen=True, slots=True)
class Declared:
    """The elicitation modes, sampling and roots a client declared; never inferred from anything else."""

    form: bool
    url: bool
    sampling: bool = False
    roots: bool = False
    unknown: bool = False

    def allows(self, need: Need) -> bool:
        return {Need.FORM: self.form, Need.URL: self.url, Need.SAMPLING: self.sampling, Need.ROOTS: self.roots}[need]

    @classmethod
    def of(cls, capabilities: ClientCapabilities | None, protocol_version: str | None) -> Declared:
        if capabilities is None:
            return cls(form=False, url=False, unknown=True)
        sampling, roots = capabilities.sampling is not None, capabilities.roots is not None
        elicitation = capabilities.elicitation
        if elicitation is None:
            return cls(form=False, url=False, sampling=sampling, roots=roots)
        if elicitation.form is None and elicitation.url is None:
            return cls(form=True, url=False, sampling=sampling, roots=roots)
        url_allowed = protocol_version is not None and protocol_version >= URL_MODE_SINCE
        return cls(
            form=elicitation.form is not None,
            url=url_allowed and elicitation.url is not None,
            sampling=sampling,
            roots=roots,
        )


DESCRIBED = {
    Need.FORM: "form elicitation",
    Need.URL: "url elicitation",
    Need.SAMPLING: "sampling",
    Need.ROOTS: "roots",
}


def described(needs: frozenset[Need]) -> str:
    return " and ".join(DESCRIBED[need] for need in Need if need in needs)


def missing_capability(needs: frozenset[Need], kind: str) -> MCPError:
    """-32021 with `data.requiredCapabilities` naming exactly what asking needed."""
    elicitation = None
    if Need.FORM in needs or Need.URL in needs:
        elicitation = ElicitationCapability(
            form=FormElicitationCapability() if Need.FORM in needs else None,
            url=UrlElicitationCapability() if Need.URL in needs else None,
        )
    required = ClientCapabilities(
        elicitation=elicitation,
        sampling=SamplingCapability() if Need.SAMPLING in needs else None,
        roots=RootsCapability() if Need.ROOTS in needs else None,
    )
    data = MissingRequiredClientCapabilityErrorData(required_capabilities=required).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    plural = "capabilities" if len(needs) > 1 else "capability"
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"This {kind} needs the client's {described(needs)} {plural}",
        data=data,
    )


def legacy_missing_capability(needs: frozenset[Need], *, tool: bool) -> Exception:
    """A tool error the model can read for tools (the legacy eras have no -32021); -32021 for prompts."""
    if not tool:
        return missing_capability(needs, "prompt")
    what = described(needs)
    return ToolError(
        f"This tool needs to ask something ({what}), but this client cannot receive "
        f"{what} requests on this connection. Use a client that supports them."
    )
