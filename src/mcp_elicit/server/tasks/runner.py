"""Running task bodies in the background, and taking over the tasks of an instance that died.

The index of open tasks is a claim per task on one operation owned by the library's own principal
(`TASKS`): `task/<operation id>`, held by the instance that runs the body and renewed by its lease
keeper. The claim is taken in the transaction that creates the task, so no open task is ever missing
from the index, and released in the transaction after the task ended. Every instance sharing the store
looks at the index every half lease: a claim whose lease lapsed (its instance died, or stopped) is taken
over with the store's own claim, which lets exactly one instance in, audited, and that instance runs the
body again from the start. The body's journal makes that safe: a step whose result is journaled is
replayed, an answered question is not asked again.

Guarantees: a task whose instance dies is resumed by another live instance sharing the store within
`1.5 x lease` of the dead instance's last renewal (its lease, then at most half a lease until the next
look); on SQLite, a restarted process resumes the tasks of the one before it within the same bound. A
task's body is stopped at its TTL, when the task is ended elsewhere (`tasks/cancel` on another
instance, an operator's cancel), and at once for a cancel served here.

Does not guarantee that a body runs on one instance only when an instance's event loop stalls for a
whole lease: its claim lapses and another instance takes over, as with every lease.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import anyio
from anyio.abc import TaskGroup

from mcp_elicit.model import Operation, OperationStatus, Operator, Principal, new_operation, request_digest
from mcp_elicit.server.leases import Leases
from mcp_elicit.server.tasks.state import TaskBook, TaskMeta, TaskNotFound
from mcp_elicit.server.waiting import Wakeups
from mcp_elicit.store import StoreError, StoreUnavailable
from mcp_elicit.store.aio import AsyncStore

log = logging.getLogger(__name__)

TASKS = Principal("mcp-elicit/tasks", "mcp-elicit")
"""The owner of the task index; no token maps to it (a principal id from a token names its issuer)."""
INDEX_METHOD = "mcp-elicit/tasks"
INDEX_TARGET = "index"
INDEX_TTL = timedelta(days=365 * 100)
_RUNNER = Operator("task-runner")

Body = Callable[[Operation, Principal, TaskMeta], Awaitable[None]]


def index_claim(operation_id: str) -> str:
    return f"task/{operation_id}"


class TaskRunner:
    def __init__(
        self,
        store: AsyncStore,
        leases: Leases,
        lease: timedelta,
        clock: Callable[[], datetime],
        book: TaskBook,
        wakeups: Wakeups,
    ) -> None:
        self._store = store
        self._wakeups = wakeups
        self._leases = leases
        self._lease = lease
        self._clock = clock
        self._book = book
        self.holder = f"tasks:{uuid.uuid4().hex}"
        self.body: Body | None = None
        self._index: str | None = None
        self._group: TaskGroup | None = None
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._active: set[str] = set()

    @property
    def running(self) -> bool:
        return self._group is not None

    @property
    def active(self) -> frozenset[str]:
        """The tasks whose bodies run in this process now."""
        return frozenset(self._active)

    async def index(self) -> str:
        """The index operation's id, created by the first instance that needs it (the others attach)."""
        if self._index is None:
            candidate = new_operation(
                TASKS,
                method=INDEX_METHOD,
                target=INDEX_TARGET,
                request_digest=request_digest(INDEX_METHOD, {"name": INDEX_TARGET}),
                now=self._clock(),
                ttl=INDEX_TTL,
            )
            start = await self._store.begin_operation(candidate)
            self._index = start.operation.operation_id
        return self._index

    async def enlist(self, index: str, operation_id: str) -> None:
        """Put a new task in the index, held by this instance; made inside the transaction creating the task."""
        lease_until = self._clock() + self._lease
        name = index_claim(operation_id)
        await self._store.claim(index, name, holder=self.holder, lease_until=lease_until, caller=TASKS)

    async def run(self) -> None:
        """Host the bodies and look for orphaned tasks, until cancelled; one task at a time (`background.Shared`)."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                while True:
                    try:
                        await self._adopt_orphans()
                    except StoreError as error:
                        log.warning("cannot look for tasks to take over: %s", error)
                    pause = self._lease.total_seconds() / 2
                    await anyio.sleep(pause * random.uniform(0.8, 1.0))  # noqa: S311 (spreading, not secrecy)
        finally:
            self._group = None
            self._active.clear()

    def spawn(self, operation_id: str, principal: Principal) -> None:
        if self._group is None:
            raise RuntimeError("tasks run in the background of a served app: serve it with its lifespan")
        if operation_id in self._active:
            return
        self._active.add(operation_id)
        self._group.start_soon(self._drive, operation_id, principal)

    def stop(self, operation_id: str) -> None:
        """Stop the body now if it runs here (the task ended)."""
        scope = self._scopes.get(operation_id)
        if scope is not None:
            scope.cancel()

    async def _adopt_orphans(self) -> None:
        index = await self.index()
        now = self._clock()
        for claim in await self._store.claims(index, caller=TASKS):
            operation_id = claim.name.removeprefix("task/")
            if operation_id in self._active:
                continue
            if not claim.held_by(self.holder) and claim.lease_until > now:
                continue
            taken = await self._store.claim(
                index, claim.name, holder=self.holder, lease_until=now + self._lease, caller=TASKS
            )
            if not taken.held_by(self.holder):
                continue
            try:
                operation = await self._store.get_operation(operation_id, _RUNNER)
            except StoreError as error:
                log.warning("task %s in the index cannot be read (%s); dropping it", operation_id, error)
                await self._store.release_claim(index, claim.name, caller=TASKS, holder=self.holder)
                continue
            if claim.holder != self.holder:
                log.warning("task %s: its instance stopped renewing; resuming it here", operation_id)
            self.spawn(operation_id, operation.principal)

    async def _drive(self, operation_id: str, principal: Principal) -> None:
        index = await self.index()
        name = index_claim(operation_id)
        kept = self._leases.keep(index, name, self.holder, TASKS)
        ended = False
        try:
            operation, meta = await self._book.found(principal, operation_id)
            if operation.status is OperationStatus.OPEN:
                await self._supervised(operation, principal, meta)
            current, _ = await self._book.found(principal, operation_id)
            ended = current.status is not OperationStatus.OPEN
        except TaskNotFound:
            ended = True
        except Exception as error:
            down = _store_unavailable(error)
            if down is None:
                log.exception("task %s: its body failed outside the tool; taken up again after its lease", operation_id)
            else:  # a store that cannot be written: a line, not a traceback per task
                log.warning("task %s stopped, taken up again after its lease: %s", operation_id, down.for_log())
        finally:
            kept.drop()
            self._active.discard(operation_id)
            with anyio.CancelScope(shield=True):
                await self._let_go(index, name, ended)

    async def _let_go(self, index: str, name: str, ended: bool) -> None:
        """Take an ended task out of the index; leave an open one's claim to lapse now, for anyone to take."""
        try:
            if ended:
                await self._store.release_claim(index, name, caller=TASKS, holder=self.holder)
            else:
                await self._store.renew_claim(index, name, holder=self.holder, lease_until=self._clock(), caller=TASKS)
        except StoreError as error:
            log.warning("cannot let go of %s (its lease lapses on its own): %s", name, error)

    async def _supervised(self, operation: Operation, principal: Principal, meta: TaskMeta) -> None:
        """Run the body until it ends, the task's TTL passes, or the task is ended elsewhere."""
        if self.body is None:
            raise RuntimeError("no task body runner installed")
        if self._clock() >= operation.expires_at:
            # Overdue before its body runs again (a restart, a takeover): no step may act after the TTL.
            log.info("task %s: its TTL elapsed before it could resume; ending it", operation.operation_id)
            await self._book.expire(operation, principal)
            return
        with anyio.CancelScope() as scope:
            self._scopes[operation.operation_id] = scope
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._watch, operation, principal, meta, scope)
                    await self.body(operation, principal, meta)
                    group.cancel_scope.cancel()
            finally:
                self._scopes.pop(operation.operation_id, None)
        if self._clock() >= operation.expires_at:
            current = await self._store.get_operation(operation.operation_id, principal)
            if current.status is OperationStatus.OPEN:
                await self._book.expire(current, principal)

    async def _watch(
        self, operation: Operation, principal: Principal, meta: TaskMeta, scope: anyio.CancelScope
    ) -> None:
        poll = meta.poll_interval_ms / 1000
        while True:
            remaining = (operation.expires_at - self._clock()).total_seconds()
            if remaining <= 0:
                log.info("task %s: its TTL elapsed; ending it", operation.operation_id)
                scope.cancel()
                return
            # Woken as soon as the task's operation moves, here or (PostgreSQL) on another instance.
            await self._wakeups.wait([operation.operation_id], min(poll, remaining))
            try:
                current = await self._store.get_operation(operation.operation_id, principal)
            except StoreError as error:
                log.warning("task %s: cannot check its status: %s", operation.operation_id, error)
                continue
            if current.status is not OperationStatus.OPEN:
                log.info("task %s ended as %s elsewhere; stopping its body", operation.operation_id, current.status)
                scope.cancel()
                return


def _store_unavailable(error: BaseException) -> StoreUnavailable | None:
    """The store's refusal that ended a task's run, also from inside the task groups it ran in."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error if isinstance(error, StoreUnavailable) else None
