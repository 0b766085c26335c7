"""A scripted person behind an SDK client's elicitation callback, for tests that drive a server directly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.client import ClientRequestContext
from mcp_types import ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, ErrorData


@dataclass
class Person:
    """Answers elicitations from a script, and remembers what it was asked."""

    answers: list[ElicitResult | Callable[[ElicitRequestFormParams | ElicitRequestURLParams], ElicitResult]] = field(
        default_factory=list
    )
    asked: list[ElicitRequestFormParams | ElicitRequestURLParams] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
    ) -> ElicitResult | ErrorData:
        self.asked.append(params)
        if not self.answers:
            return ElicitResult(action="cancel")
        answer = self.answers.pop(0)
        return answer(params) if callable(answer) else answer


def accept(**content: Any) -> ElicitResult:
    return ElicitResult(action="accept", content=content)
