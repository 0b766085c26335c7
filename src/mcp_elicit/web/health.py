"""`/healthz` and `/readyz` for HTTP deployments: unauthenticated, cheap, and saying nothing secret.

`/healthz` says the process answers HTTP and touches nothing else, so an orchestrator restarts a process
only when the process itself is stuck, never because the database is. `/readyz` says whether this instance
can do its work now: the store answers (SQLite: the file it opened is still at its path and opens afresh;
PostgreSQL: through the pool), its schema is the one this code speaks (another instance may have migrated
it since), the requestState key ring seals and opens, and, for an app that seals its audit trail, its
sealer has not refused to sign (`audit`: `refused` once the trail was edited by hand). A ready instance
answers 200 with the checks; one that is not answers 503 naming each failing check with a fixed word. The
reason itself may name a host or a path, so it goes to the log (once per change of state) and never to the
caller.

A store that has to be reached over the network is checked in a worker thread, one check at a time (calls
arriving meanwhile share its answer) and for at most `timeout` seconds: a database that stopped answering
makes the instance not ready in that time, without stalling the event loop or piling up threads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp_elicit.server.runtime import Elicitation
from mcp_elicit.store import (
    MigrationPending,
    SchemaTooNew,
    Store,
    StoreCorrupt,
    StoreError,
    StoreFileReplaced,
    StoreReadOnly,
    StoreUnavailable,
)
from mcp_elicit.web.routes import RouteHost, add_routes

__all__ = ["HEALTH_PATH", "READY_PATH", "Health"]

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
OK = "ok"
_NO_STORE = "no-store"
_PROBE = b"mcp-elicit readiness"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _StoreState:
    store: str
    schema: str
    reason: str | None = None


class Health:
    """The health routes of an app serving `elicitation`; `add_routes(server)` puts them on its `MCPServer` or
    FastMCP."""

    def __init__(self, elicitation: Elicitation, *, timeout: float = 2.0) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        self._store = elicitation.store
        self._sealer = elicitation.audit_sealer
        self._codec = elicitation.request_state_security.codec
        self._timeout = timeout
        self._probe = _SingleProbe(lambda: _check_store(self._store))
        self._inline = self._store.runs_inline
        self._reported: dict[str, str] | None = None

    def routes(self) -> list[Route]:
        return [
            Route(HEALTH_PATH, self._healthz, methods=["GET"], name="elicit-healthz"),
            Route(READY_PATH, self._readyz, methods=["GET"], name="elicit-readyz"),
        ]

    def add_routes(self, server: RouteHost) -> None:
        """Register `routes()` as custom routes of `server`, which serves them without authorization."""
        add_routes(server, self.routes())

    async def readiness(self) -> dict[str, str]:
        """Each check by name: `ok`, or a fixed word saying how it fails."""
        if self._inline:
            state = _check_store(self._store)
        else:
            state = await self._probe.answer(self._timeout) or _StoreState(
                "timeout", "unknown", f"{self._store.display_url} gave no answer within {self._timeout:g} s"
            )
        keys, keys_reason = self._check_keys()
        checks = {"store": state.store, "schema": state.schema, "keys": keys}
        audit_reason = None
        if self._sealer is not None:
            audit_reason = self._sealer.refused
            checks["audit"] = OK if audit_reason is None else "refused"
        self._report(checks, [reason for reason in (state.reason, keys_reason, audit_reason) if reason])
        return checks

    async def _healthz(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": OK}, headers={"Cache-Control": _NO_STORE})

    async def _readyz(self, request: Request) -> JSONResponse:
        checks = await self.readiness()
        ready = all(value == OK for value in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": checks},
            status_code=200 if ready else 503,
            headers={"Cache-Control": _NO_STORE},
        )

    def _check_keys(self) -> tuple[str, str | None]:
        try:
            opened = self._codec.unseal(self._codec.seal(_PROBE))
        except Exception as error:  # whatever breaks the ring is the finding; the reason goes to the log
            return "failing", f"the requestState key ring cannot seal and open: {type(error).__name__}: {error}"
        return (OK, None) if opened == _PROBE else ("failing", "the requestState key ring opened another value")

    def _report(self, checks: dict[str, str], reasons: list[str]) -> None:
        """Log each change of state, with the reasons the response leaves out."""
        if checks == self._reported or (self._reported is None and not reasons):
            self._reported = checks
            return
        self._reported = checks
        if reasons:
            log.warning("not ready: %s", "; ".join(reasons))
        else:
            log.info("ready again")


def _check_store(store: Store) -> _StoreState:
    try:
        store.verify_schema()
    except SchemaTooNew as error:
        return _StoreState(OK, "too_new", str(error))
    except MigrationPending as error:
        return _StoreState(OK, "migration_pending", str(error))
    except StoreFileReplaced as error:
        return _StoreState("replaced", "unknown", str(error))
    except StoreReadOnly as error:
        return _StoreState("read_only", "unknown", str(error))
    except StoreUnavailable as error:
        return _StoreState("unreachable", "unknown", str(error))
    except StoreCorrupt as error:
        return _StoreState("corrupt", "unknown", str(error))
    except StoreError as error:
        return _StoreState("error", "unknown", str(error))
    except Exception as error:  # a check must answer: an unforeseen failure is a failing store, logged
        return _StoreState("error", "unknown", f"{type(error).__name__}: {error}")
    return _StoreState(OK, OK)


class _SingleProbe:
    """Runs `check` in a worker thread, one run at a time: callers arriving during a run wait for its answer.

    A caller that gives up leaves the run going; its answer still ends the run, so the next caller starts a new
    one rather than a second thread joining a database that does not answer.
    """

    def __init__(self, check: Callable[[], _StoreState]) -> None:
        self._check = check
        self._running: anyio.Event | None = None
        self._answer: _StoreState | None = None

    async def answer(self, timeout: float) -> _StoreState | None:
        """The run's answer, or None when none came within `timeout` seconds."""
        with anyio.move_on_after(timeout):
            done = self._running
            if done is None:
                done = self._running = anyio.Event()
                await anyio.to_thread.run_sync(self._run, done, abandon_on_cancel=True)
            await done.wait()
            return self._answer
        return None

    def _run(self, done: anyio.Event) -> None:
        answer = self._check()
        with contextlib.suppress(RuntimeError):  # the event loop ended while the check ran: nobody waits for it
            anyio.from_thread.run_sync(self._finish, done, answer)

    def _finish(self, done: anyio.Event, answer: _StoreState) -> None:
        self._answer = answer
        self._running = None
        done.set()
