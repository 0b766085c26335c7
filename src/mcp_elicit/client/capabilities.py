"""Declaring exactly the elicitation modes the handler supports, on every protocol era.

The SDK declares form and URL whenever an elicitation callback exists, and has no setting for anything
else. A server then may send a URL elicitation to a client that can only show forms, and the person never
sees it. The kit therefore rewrites what leaves the client: the `initialize` capabilities (2025-06-18,
2025-11-25) and the per-request `_meta` client capabilities (2026-07-28, where the spec says servers must
not infer capabilities from earlier requests). A handler with no mode declares no elicitation at all, so a
server falls back instead of asking nobody. A revision without URL mode (2025-06-18) is offered form mode
only: declaring what the revision cannot carry would tell its server nothing true.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.version import is_version_at_least

from mcp_elicit.client.handler import Mode

MODE_ORDER: tuple[Mode, ...] = ("form", "url")
URL_MODE_SINCE = "2025-11-25"
"""The first revision with URL mode: 2025-06-18 has form mode only."""


def has_url_mode(version: str) -> bool:
    """Whether protocol `version` has URL-mode elicitation (unknown versions: no)."""
    return is_version_at_least(version, URL_MODE_SINCE)


def modes_on(version: str | None, modes: frozenset[Mode]) -> frozenset[Mode]:
    """The part of `modes` that protocol `version` can carry (all of them while the version is not known)."""
    if version is None or has_url_mode(version):
        return modes
    return modes - {"url"}


def elicitation_capability(modes: frozenset[Mode]) -> dict[str, Any] | None:
    """`{"form": {}}`, `{"url": {}}`, both, or None (no capability): never the bare `{}`, which means form."""
    if not modes:
        return None
    return {mode: {} for mode in MODE_ORDER if mode in modes}


def with_capabilities(capabilities: Mapping[str, Any], modes: frozenset[Mode]) -> dict[str, Any]:
    """A copy of a capabilities object whose `elicitation` entry says exactly `modes`."""
    rewritten = {key: value for key, value in capabilities.items() if key != "elicitation"}
    declared = elicitation_capability(modes)
    if declared is not None:
        rewritten["elicitation"] = declared
    return rewritten


def declare_modes(method: str, params: Mapping[str, Any] | None, modes: frozenset[Mode]) -> dict[str, Any] | None:
    """The params of an outgoing message with the elicitation capability set to `modes`, or None if untouched.

    Only copies what it changes: the SDK stamps one shared capabilities object into every request.
    """
    if params is None:
        return None
    rewritten: dict[str, Any] | None = None
    capabilities = params.get("capabilities")
    if method == "initialize" and isinstance(capabilities, Mapping):
        rewritten = dict(params)
        rewritten["capabilities"] = with_capabilities(capabilities, modes)
    meta = params.get("_meta")
    if isinstance(meta, Mapping) and isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), Mapping):
        rewritten = dict(rewritten if rewritten is not None else params)
        new_meta = dict(meta)
        new_meta[CLIENT_CAPABILITIES_META_KEY] = with_capabilities(meta[CLIENT_CAPABILITIES_META_KEY], modes)
        rewritten["_meta"] = new_meta
    return rewritten
