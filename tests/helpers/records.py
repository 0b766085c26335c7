"""Valid store records built in one line, the principals the store tests use, and a decision's status read back."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from mcp_elicit.model import (
    ApproverRule,
    Decision,
    DecisionOrigin,
    DecisionStatus,
    JSONObject,
    Operation,
    Operator,
    Principal,
    new_form_decision,
    new_operation,
    new_url_decision,
)
from mcp_elicit.store import Store, open_store

ALICE = Principal("alice", "client-a")
BOB = Principal("bob", "client-a")
ALICE_OTHER_CLIENT = Principal("alice", "client-b")
FORM_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approve"],
}


class Records:
    """Builds valid records in a store, so each test states only what matters to it."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    def operation(self, principal: Principal = ALICE, *, ttl: timedelta = timedelta(hours=1)) -> Operation:
        return self.store.create_operation(
            new_operation(
                principal,
                method="tools/call",
                target="deploy",
                request_digest="sha256:" + uuid.uuid4().hex,
                now=self.clock(),
                ttl=ttl,
            )
        )

    def _origin(
        self, operation: Operation, key: str, sensitive: tuple[str, ...], approvers: ApproverRule | None = None
    ) -> DecisionOrigin:
        return DecisionOrigin(
            operation_id=operation.operation_id,
            key=key,
            principal=operation.principal,
            origin_method=operation.method,
            origin_request_digest=operation.request_digest,
            sensitive_fields=sensitive,
            about=f'{operation.target}(service="api", note="ünïcode ✓")',
            approvers=approvers,
        )

    def form(
        self,
        operation: Operation | None = None,
        *,
        ttl: timedelta = timedelta(minutes=10),
        key: str = "approve",
        sensitive: tuple[str, ...] = (),
        approvers: ApproverRule | None = None,
    ) -> Decision:
        operation = operation or self.operation()
        decision = new_form_decision(
            self._origin(operation, key, sensitive, approvers),
            message="Deploy to production?",
            requested_schema=FORM_SCHEMA,
            now=self.clock(),
            ttl=ttl,
        )
        return self.store.create_decision(decision)

    def url(
        self,
        operation: Operation | None = None,
        *,
        ttl: timedelta = timedelta(minutes=10),
        url: str = "https://elicit.example/elicit/abc",
        key: str = "connect",
    ) -> Decision:
        operation = operation or self.operation()
        decision = new_url_decision(
            self._origin(operation, key, ()), message="Connect your account", url=url, now=self.clock(), ttl=ttl
        )
        return self.store.create_decision(decision)


def decision_status(store_url: str) -> DecisionStatus:
    """The status of the one decision in the store at `store_url`, as another process left it."""
    store = open_store(store_url)
    try:
        [decision] = store.list_decisions(Operator())
    finally:
        store.close()
    return decision.status
