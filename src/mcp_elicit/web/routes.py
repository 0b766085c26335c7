"""Routes on an MCP server's own HTTP app: the SDK's `MCPServer` and FastMCP's `FastMCP` alike.

Both frameworks serve custom routes beside `/mcp` through the same decorator, `custom_route(path, methods,
name=...)`, and serve them without bearer authorization (a browser carries no MCP token). The pages, the
sign-in and the health routes are added through `add_routes`, so one implementation serves either server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["RouteHost", "add_routes"]


class RouteHost(Protocol):
    """A server that serves custom HTTP routes on its app: `MCPServer`, or FastMCP's `FastMCP`."""

    @property
    def name(self) -> str: ...

    def custom_route(
        self, path: str, methods: list[str], name: str | None = None, include_in_schema: bool = True
    ) -> Callable[[Callable[[Request], Awaitable[Response]]], Any]: ...


def add_routes(server: RouteHost, routes: Sequence[Route]) -> None:
    """Serve each route as a custom route of `server`, with its path, methods and name."""
    for route in routes:
        server.custom_route(route.path, methods=sorted(route.methods or ()), name=route.name)(_endpoint(route))


def _endpoint(route: Route) -> Callable[[Request], Awaitable[Response]]:
    endpoint = route.endpoint

    async def call(request: Request) -> Response:
        response: Response = await endpoint(request)
        return response

    return call
