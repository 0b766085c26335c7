"""Several upstreams behind one gateway, each under its prefix: how names and URIs carry it, how a request finds
its upstream, and how the lists of all of them become one, with a cursor of the gateway's own.

Names are prefixed the way FastMCP's `mount(server, namespace=...)` prefixes them, so that a person who knows
one knows the other: the tool or prompt `get-sum` of the upstream with prefix `everything` is
`everything_get-sum`. `_` is among the characters the 2025-11-25 specification allows in a tool name
(`A-Z a-z 0-9 _ - .`), and so are a prefix's, so a valid name stays valid. No prefix followed by `_` may begin
another followed by `_` (`a` and `a_b`), so that a name has one upstream at most.

A resource URI carries the prefix as the first segment after its scheme, also as FastMCP does:
`note://readme` is `note://sdk/readme` (a URI without `//`, `urn:x`, is `urn:sdk/x`), and a template
likewise. A URI routes by its prefix alone, so a resource no listing showed (a template's expansion) routes
too, and nothing is remembered between requests.

The first page of a list asks every upstream that serves it, at once, and holds all their first pages, so a
client that never pages (most) sees every upstream; the gateway's cursor (base64 of a JSON object) holds,
for each upstream with more, that upstream's own cursor, and the next page asks just those. A merged list
carries the gateway's cache hints for 2026-07-28 clients (stale at once, private), not its parts'.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import anyio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ServerCapabilities
from pydantic import BaseModel

from mcp_elicit.gateway.upstream import Pool

log = logging.getLogger(__name__)

SEPARATOR: Final = "_"
PREFIX: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
PREFIX_RULE: Final = "1-64 letters, digits and _.-, starting with a letter or digit"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*:(?://)?)(.*)", re.DOTALL)

Handler = Callable[[ServerRequestContext[Any, Any], BaseModel], Awaitable[dict[str, Any]]]


class Forward(Protocol):
    """The gateway's relay of one request to one upstream (`Gateway._forward`)."""

    def __call__(
        self,
        ctx: ServerRequestContext[Any, Any],
        method: str,
        raw: Mapping[str, Any],
        what: str,
        *,
        asks: bool,
        pool: Pool | None = None,
    ) -> Awaitable[dict[str, Any]]: ...


_FAMILIES: Final = {
    "tools/list": "tools",
    "tools/call": "tools",
    "prompts/list": "prompts",
    "prompts/get": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resources",
    "resources/read": "resources",
    "completion/complete": "completions",
}
_LISTED: Final = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
}
"""Each list, the key of its items and the field of an item that carries the prefix."""


def clashing(first: str, second: str) -> bool:
    """Whether a name could belong to both prefixes: equal, or one with `_` beginning the other with `_`."""
    one, other = first + SEPARATOR, second + SEPARATOR
    return one.startswith(other) or other.startswith(one)


def _prefixed_uri(prefix: str, uri: str) -> str:
    found = _SCHEME.fullmatch(uri)
    head, rest = (found[1], found[2]) if found else ("", uri)
    return f"{head}{prefix}/{rest}"


def _split_uri(uri: str) -> tuple[str, str] | None:
    """(prefix, the upstream's URI) of a prefixed URI; None if it carries no prefix segment."""
    found = _SCHEME.fullmatch(uri)
    head, rest = (found[1], found[2]) if found else ("", uri)
    prefix, slash, tail = rest.partition("/")
    return (prefix, head + tail) if slash and prefix else None


class Routes:
    """The upstreams of a gateway, each under its prefix; a handler per request family that routes there.

    Raises `ValueError` when an upstream has no prefix, or one that is not a prefix, or clashes with another's.
    """

    def __init__(self, pools: Sequence[Pool], forward: Forward) -> None:
        self._forward = forward
        self._by_prefix: dict[str, Pool] = {}
        for pool in pools:
            upstream = pool.upstream
            if upstream.prefix is None:
                raise ValueError(f"upstream {upstream.name!r} has no prefix; several upstreams need one each")
            if not PREFIX.fullmatch(upstream.prefix):
                raise ValueError(f"upstream {upstream.name!r}: a prefix is {PREFIX_RULE}, not {upstream.prefix!r}")
            for prefix, other in self._by_prefix.items():
                if clashing(prefix, upstream.prefix):
                    raise ValueError(
                        f"upstreams {other.upstream.name!r} and {upstream.name!r} have the prefixes {prefix!r} and "
                        f"{upstream.prefix!r}: a name could belong to either"
                    )
            self._by_prefix[upstream.prefix] = pool
        self._serves: dict[str, frozenset[str]] = {}

    def serve_like(self, capabilities: Sequence[ServerCapabilities]) -> None:
        """What each upstream serves (in the order of the pools), as it said on connecting."""
        self._serves = {
            prefix: frozenset(family for family in set(_FAMILIES.values()) if getattr(declared, family) is not None)
            for prefix, declared in zip(self._by_prefix, capabilities, strict=True)
        }

    def instructions(self, given: Sequence[str | None]) -> str | None:
        """Each upstream's instructions, said to be that upstream's and under which prefix."""
        said = [
            f"Upstream {pool.upstream.name!r} (names prefixed {prefix}{SEPARATOR}): {text}"
            for (prefix, pool), text in zip(self._by_prefix.items(), given, strict=True)
            if text
        ]
        return "\n\n".join(said) or None

    def relaying(self, method: str, *, asks: bool = False, named: str | None = None) -> Handler:
        """The handler of `method`: a merged list, or the request sent to the upstream its name or URI names."""
        if method in _LISTED:
            return self._listing(method)
        if method == "resources/read":
            return self._reading(method)
        if method == "completion/complete":
            return self._completing(method)
        return self._naming(method, asks=asks)

    def _listing(self, method: str) -> Handler:
        key, field = _LISTED[method]
        family = _FAMILIES[method]

        async def listing(ctx: ServerRequestContext[Any, Any], params: BaseModel) -> dict[str, Any]:
            raw = ctx.params or {}
            serving = [prefix for prefix in self._by_prefix if family in self._serves.get(prefix, ())]
            cursor = raw.get("cursor")
            positions = dict.fromkeys(serving) if cursor is None else self._positions(method, cursor, serving)
            asked = {prefix: positions[prefix] for prefix in serving if prefix in positions}
            results = await self._each(ctx, method, raw, asked)
            items: list[Any] = []
            more: dict[str, str] = {}
            for prefix, result in results.items():
                for item in result.get(key) or ():
                    items.append(_renamed(item, field, prefix))
                if isinstance(result.get("nextCursor"), str):
                    more[prefix] = result["nextCursor"]
            merged: dict[str, Any] = {key: items}
            if any("resultType" in result for result in results.values()):
                merged["resultType"] = "complete"  # for a 2026-07-28 client; its cache hints are the gateway's
            if more:
                merged["nextCursor"] = base64.urlsafe_b64encode(json.dumps(more).encode()).decode()
            return merged

        return listing

    def _positions(self, method: str, cursor: object, serving: Sequence[str]) -> dict[str, str | None]:
        """Each upstream's own cursor in the gateway's `cursor`; -32602 for one the gateway did not give."""
        try:
            positions = json.loads(base64.urlsafe_b64decode(str(cursor).encode()))
        except (ValueError, binascii.Error):
            positions = None
        if (
            not isinstance(positions, dict)
            or not positions
            or not all(prefix in serving and isinstance(each, str) for prefix, each in positions.items())
        ):
            raise MCPError(INVALID_PARAMS, f"{method}: the cursor {cursor!r} is not one this gateway gave")
        return positions

    async def _each(
        self, ctx: ServerRequestContext[Any, Any], method: str, raw: Mapping[str, Any], cursors: dict[str, str | None]
    ) -> dict[str, dict[str, Any]]:
        """The request sent to each upstream at once (with its own cursor). One that fails it is left out, as
        FastMCP's mounts leave out a server that fails, so that the others stay usable; it is announced as
        changed when it connects again. Only when every one fails does the listing fail, with the first error."""
        results: dict[str, dict[str, Any]] = {}
        errors: list[MCPError] = []

        async def one(prefix: str) -> None:
            params = {name: value for name, value in raw.items() if name != "cursor"}
            if cursors[prefix] is not None:
                params["cursor"] = cursors[prefix]
            try:
                results[prefix] = await self._forward(
                    ctx, method, params, method, asks=False, pool=self._by_prefix[prefix]
                )
            except MCPError as error:
                errors.append(error)

        async with anyio.create_task_group() as tasks:
            for prefix in cursors:
                tasks.start_soon(one, prefix)
        if errors and not results:
            raise errors[0]
        for error in errors:
            log.warning("%s left out an upstream: %s", method, error.error.message)
        return {prefix: results[prefix] for prefix in cursors if prefix in results}

    def _naming(self, method: str, *, asks: bool) -> Handler:
        family = _FAMILIES[method]
        kind = family.removesuffix("s")

        async def named(ctx: ServerRequestContext[Any, Any], params: BaseModel) -> dict[str, Any]:
            raw = ctx.params or {}
            given = raw.get("name")
            prefix, name = self._named(str(given), family, kind)
            what = f"{method} {given!r}"
            return await self._forward(
                ctx, method, {**raw, "name": name}, what, asks=asks, pool=self._by_prefix[prefix]
            )

        return named

    def _named(self, given: str, family: str, kind: str) -> tuple[str, str]:
        """(prefix, the upstream's name) of a prefixed name; -32602 naming it when no upstream has it."""
        for prefix in self._by_prefix:
            if given.startswith(prefix + SEPARATOR) and len(given) > len(prefix) + len(SEPARATOR):
                self._serving(prefix, family, kind, given)
                return prefix, given[len(prefix) + len(SEPARATOR) :]
        known = ", ".join(prefix + SEPARATOR for prefix in self._by_prefix)
        raise MCPError(
            INVALID_PARAMS, f"unknown {kind} {given!r}: its name begins with none of this gateway's prefixes ({known})"
        )

    def _located(self, uri: str, family: str, kind: str) -> tuple[str, str]:
        """(prefix, the upstream's URI) of a prefixed URI; -32602 naming it when no upstream has it."""
        split = _split_uri(uri)
        if split is None or split[0] not in self._by_prefix:
            known = ", ".join(self._by_prefix)
            raise MCPError(
                INVALID_PARAMS,
                f"unknown {kind} {uri!r}: its URI carries none of this gateway's prefixes ({known}) as the first "
                "segment after its scheme",
            )
        self._serving(split[0], family, kind, uri)
        return split

    def _serving(self, prefix: str, family: str, kind: str, given: str) -> None:
        if family not in self._serves.get(prefix, ()):
            upstream = self._by_prefix[prefix].upstream.name
            raise MCPError(INVALID_PARAMS, f"unknown {kind} {given!r}: upstream {upstream!r} serves no {family}")

    def _reading(self, method: str) -> Handler:
        async def read(ctx: ServerRequestContext[Any, Any], params: BaseModel) -> dict[str, Any]:
            raw = ctx.params or {}
            given = str(raw.get("uri"))
            prefix, uri = self._located(given, "resources", "resource")
            what = f"{method} {given!r}"
            result = await self._forward(
                ctx, method, {**raw, "uri": uri}, what, asks=True, pool=self._by_prefix[prefix]
            )
            contents = result.get("contents")
            if isinstance(contents, list):
                result = {**result, "contents": [_renamed(item, "uri", prefix) for item in contents]}
            return result

        return read

    def _completing(self, method: str) -> Handler:
        async def complete(ctx: ServerRequestContext[Any, Any], params: BaseModel) -> dict[str, Any]:
            raw = ctx.params or {}
            ref = dict(raw.get("ref") or {})
            if ref.get("type") == "ref/prompt":
                prefix, ref["name"] = self._named(str(ref.get("name")), "prompts", "prompt")
            else:
                prefix, ref["uri"] = self._located(str(ref.get("uri")), "resources", "resource template")
            return await self._forward(
                ctx, method, {**raw, "ref": ref}, method, asks=False, pool=self._by_prefix[prefix]
            )

        return complete


def prefixed(prefix: str | None, name: str) -> str:
    """A tool's or prompt's name as the gateway's clients see it behind an upstream with `prefix` (none: as it is)."""
    return f"{prefix}{SEPARATOR}{name}" if prefix else name


def _renamed(item: Any, field: str, prefix: str) -> Any:
    """A listed item (or read content) with its name or URI prefixed; an item without one, as it is."""
    if not isinstance(item, dict) or not isinstance(item.get(field), str):
        return item
    value = item[field]
    return {**item, field: prefixed(prefix, value) if field == "name" else _prefixed_uri(prefix, value)}
