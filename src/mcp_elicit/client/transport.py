"""The kit's seam on the wire: a transport wrapper around whatever the SDK's `Client` talks through.

Everything the kit must change about the SDK client's behaviour happens here, on the JSON-RPC messages,
never by patching the SDK:

- outgoing: the elicitation capability is set to the handler's modes (`capabilities.declare_modes`), less
  those the offered revision does not have (`initialize` offering 2025-06-18 declares form mode only), and
  `initialize` offers `offer_version` when one is pinned (the SDK always offers its newest handshake
  version; a host pinned to 2025-06-18 offers that one, and the server answers with it);
- incoming, for `tools/call`, `prompts/get` and `resources/read` on 2026-07-28: a result without
  `resultType` is a complete result (the spec's rule for legacy servers; the SDK would reject it), and a
  `resultType` this client does not know becomes an error response the kit raises as `UnknownResultType`
  (the SDK would accept it as a complete result when it happens to carry `content`);
- on a handshake connection whose host follows tasks, a `tools/call` of a tool the server runs as a task
  (`task_tools`) asks for one (`params.task`), and the `CreateTaskResult` that comes back, which the SDK
  would reject as a malformed `CallToolResult`, becomes an error response carrying the task
  (`legacy_task`), which the kit then follows (`tasks`);
- every incoming message counts as a sign of life for the call watch (`watch.SilenceWatch`).

The wrapper forwards the SDK's own stream objects' context (`last_context`) and backpressure unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    PROTOCOL_VERSION_META_KEY,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)
from mcp_types.methods import INPUT_REQUIRED_METHODS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_elicit.client.capabilities import declare_modes, modes_on
from mcp_elicit.client.handler import Mode

if TYPE_CHECKING:
    from mcp.client import Transport
    from mcp.client._transport import ReadStream, TransportStreams, WriteStream

UNKNOWN_RESULT_TYPE = "io.github.mcp-elicit/unknownResultType"
"""The `data` key of the error the kit substitutes for a result with an unknown `resultType`."""
KNOWN_RESULT_TYPES = frozenset({"complete", "input_required"})
LEGACY_TASK = "io.github.mcp-elicit/createdTask"
"""The `data` key of the error the kit substitutes for a 2025-11-25 `CreateTaskResult`: the task."""


def legacy_task(error: MCPError) -> dict[str, Any] | None:
    """The task a 2025-11-25 server created for a call, behind an error the wrapper substituted."""
    data = error.error.data
    task = data.get(LEGACY_TASK) if isinstance(data, Mapping) else None
    return dict(task) if isinstance(task, Mapping) else None


def unknown_result_type(error: MCPError) -> str | None:
    """The unknown `resultType` behind an error the wrapper substituted, or None for a real server error."""
    data = error.error.data
    if isinstance(data, Mapping) and isinstance(data.get(UNKNOWN_RESULT_TYPE), str):
        return str(data[UNKNOWN_RESULT_TYPE])
    return None


class KitTransport:
    """Wraps a transport (streamable HTTP, stdio, in-process) with the kit's message rewriting."""

    def __init__(
        self,
        inner: Transport | AbstractAsyncContextManager[TransportStreams],
        modes: frozenset[Mode],
        on_inbound: Callable[[], None] | None = None,
        offer_version: str | None = None,
        task_results: bool = False,
        task_tools: Callable[[str], bool] | None = None,
    ) -> None:
        self._inner = inner
        self.modes = modes
        self._on_inbound = on_inbound
        self._offer_version = offer_version
        self._task_results = task_results
        """Whether the client declared the tasks extension: a `tools/call` may then answer `resultType: "task"`."""
        self._task_tools = task_tools
        self._task_calls: set[RequestId] = set()
        self._awaiting_result: dict[RequestId, str] = {}

    async def __aenter__(self) -> TransportStreams:
        read, write = await self._inner.__aenter__()
        return _Incoming(read, self), _Outgoing(write, self)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)

    def outgoing(self, item: SessionMessage) -> SessionMessage:
        message = item.message
        if not isinstance(message, JSONRPCRequest | JSONRPCNotification):
            return item
        modes = self.modes
        if message.method == "initialize" and message.params is not None:
            offered = self._offer_version or message.params.get("protocolVersion")
            modes = modes_on(offered if isinstance(offered, str) else None, modes)
        params = declare_modes(message.method, message.params, modes)
        if message.method == "initialize" and self._offer_version is not None and message.params is not None:
            params = {**(params if params is not None else message.params), "protocolVersion": self._offer_version}
        if isinstance(message, JSONRPCRequest) and _is_modern_input_method(message):
            self._awaiting_result[message.id] = message.method
        elif isinstance(message, JSONRPCRequest) and self._asks_legacy_task(message):
            self._task_calls.add(message.id)
            params = {**(params if params is not None else message.params or {}), "task": {}}
        elif message.method == "notifications/cancelled" and message.params is not None:
            self._awaiting_result.pop(message.params.get("requestId"), None)  # type: ignore[arg-type]
        if params is None:
            return item
        rewritten = message.model_copy(update={"params": params})
        return SessionMessage(message=rewritten, metadata=item.metadata)

    def incoming(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if self._on_inbound is not None:
            self._on_inbound()
        if not isinstance(item, SessionMessage):
            return item
        message = item.message
        if isinstance(message, JSONRPCError) and message.id is not None:
            self._awaiting_result.pop(message.id, None)
            self._task_calls.discard(message.id)
            return item
        if isinstance(message, JSONRPCResponse) and message.id in self._task_calls:
            self._task_calls.discard(message.id)
            task = message.result.get("task")
            if isinstance(task, Mapping) and "content" not in message.result:
                created = JSONRPCError(
                    jsonrpc="2.0",
                    id=message.id,
                    error=ErrorData(code=INTERNAL_ERROR, message="the call runs as a task", data={LEGACY_TASK: task}),
                )
                return SessionMessage(message=created, metadata=item.metadata)
            return item
        if not isinstance(message, JSONRPCResponse) or (method := self._awaiting_result.pop(message.id, None)) is None:
            return item
        result_type = message.result.get("resultType")
        if result_type == "task" and self._task_results and method == "tools/call":
            return item
        if result_type is None:
            completed = message.model_copy(update={"result": {**message.result, "resultType": "complete"}})
            return SessionMessage(message=completed, metadata=item.metadata)
        if result_type in KNOWN_RESULT_TYPES:
            return item
        refused = JSONRPCError(
            jsonrpc="2.0",
            id=message.id,
            error=ErrorData(
                code=INTERNAL_ERROR,
                message=f"the server answered with resultType {result_type!r}, which this client does not know",
                data={UNKNOWN_RESULT_TYPE: str(result_type)},
            ),
        )
        return SessionMessage(message=refused, metadata=item.metadata)

    def _asks_legacy_task(self, message: JSONRPCRequest) -> bool:
        """A handshake-era `tools/call` of a tool that runs as a task, from a host that follows tasks."""
        if self._task_tools is None or message.method != "tools/call" or message.params is None:
            return False
        meta = message.params.get("_meta")
        if isinstance(meta, Mapping) and meta.get(PROTOCOL_VERSION_META_KEY) in MODERN_PROTOCOL_VERSIONS:
            return False
        name = message.params.get("name")
        return isinstance(name, str) and self._task_tools(name)


def _is_modern_input_method(message: JSONRPCRequest) -> bool:
    if message.method not in INPUT_REQUIRED_METHODS or message.params is None:
        return False
    meta = message.params.get("_meta")
    return isinstance(meta, Mapping) and meta.get(PROTOCOL_VERSION_META_KEY) in MODERN_PROTOCOL_VERSIONS


class _Outgoing:
    def __init__(self, inner: WriteStream[SessionMessage], kit: KitTransport) -> None:
        self._inner = inner
        self._kit = kit

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(self._kit.outgoing(item))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Outgoing:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)


class _Incoming:
    def __init__(self, inner: ReadStream[SessionMessage | Exception], kit: KitTransport) -> None:
        self._inner = inner
        self._kit = kit

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return self._kit.incoming(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Incoming:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._kit.incoming(await self._inner.__anext__())

    async def __aenter__(self) -> _Incoming:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)
