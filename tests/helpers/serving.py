"""A small server of tools written against `Flow`, and scripted clients, for the server tests.

Tools count their side effects in a workspace file, so a test can prove a step ran exactly once.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client import ClientRequestContext
from mcp_types import ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, ErrorData
from pydantic import BaseModel, Field

from mcp_elicit.model import ResumePolicy
from mcp_elicit.server import (
    Accepted,
    Cancelled,
    Completed,
    Declined,
    Elicitation,
    Expired,
    Failed,
    Fallback,
    Flow,
)
from mcp_elicit.store import Store


class Approval(BaseModel):
    approve: bool = Field(description="Approve the production deploy")
    note: str | None = Field(default=None, description="Anything the team should know")


class Seats(BaseModel):
    seats: int = Field(ge=1, le=9, description="How many seats")


class Name(BaseModel):
    name: str = Field(min_length=1, description="Your name")


class Counter:
    """Counts side effects in a file, the way a real external system would keep them.

    Steps of parallel calls run in threads and server processes at once, so a count is bumped under an
    exclusive lock and written whole (rename), never read half-written.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def bump(self, what: str) -> int:
        with self.path.with_suffix(".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            counts = self.read()
            counts[what] = counts.get(what, 0) + 1
            written = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}")
            written.write_text(json.dumps(counts))
            os.replace(written, self.path)
            return counts[what]

    def read(self) -> dict[str, int]:
        if not self.path.exists():
            return {}
        loaded: dict[str, int] = json.loads(self.path.read_text())
        return loaded


async def book_with_fallback(flow: Flow, city: str) -> str:
    """Falls back to call arguments when the client cannot show forms."""
    seats = await flow.ask(f"How many seats to {city}?", Seats)
    return f"booked {seats.data.seats} to {city}" if isinstance(seats, Accepted) else "not booked"


async def connect_later(flow: Flow) -> str:
    """A URL decision that does not block a legacy call: -32042, then the client retries."""
    outcome = await flow.ask_url("Connect your account", key="connect_account", resume=ResumePolicy.NOTIFICATION)
    return "connected" if isinstance(outcome, Completed) else type(outcome).__name__.lower()


def build_tools(elicitation: Elicitation, counter: Counter) -> None:
    """The server tests' tools on `elicitation`; `book_with_fallback` and `connect_later` are FastMCP's too."""

    @elicitation.tool()
    async def approve(flow: Flow, scope: str) -> str:
        """Ask for approval of a scope, then apply it once."""
        planned = await flow.step("plan", lambda: counter.bump("plan") and f"plan for {scope}")
        answer = await flow.ask(f"Apply {planned}?", Approval, key="approve_scope")
        match answer:
            case Accepted(data=approval) if approval.approve:
                await flow.step("apply", lambda: counter.bump("apply"))
                return f"applied {scope}" + (f" ({approval.note})" if approval.note else "")
            case Accepted():
                return "not approved"
            case Declined():
                return "declined"
            case Cancelled():
                return "cancelled"
            case Expired():
                return "expired"

    @elicitation.tool()
    async def greet_and_book(flow: Flow) -> str:
        """Two questions in sequence; the second depends on the first."""
        name = await flow.ask("Who is travelling?", Name)
        if not isinstance(name, Accepted):
            return "no name"
        seats = await flow.ask(f"How many seats for {name.data.name}?", Seats)
        if not isinstance(seats, Accepted):
            return f"no seats for {name.data.name}"
        return f"{seats.data.seats} seats for {name.data.name}"

    elicitation.tool(fallback=Fallback.ARGUMENTS)(book_with_fallback)
    elicitation.tool()(connect_later)

    @elicitation.tool()
    async def connect(flow: Flow) -> str:
        """A URL decision completed out of band."""
        outcome = await flow.ask_url("Connect your account", key="connect_account")
        match outcome:
            case Completed():
                return "connected"
            case Failed():
                return "failed"
            case Declined():
                return "declined"
            case Cancelled():
                return "cancelled"
            case Expired():
                return "expired"


Callback = Callable[
    [ClientRequestContext, ElicitRequestFormParams | ElicitRequestURLParams], Awaitable[ElicitResult | ErrorData]
]


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


def store_of(elicitation: Elicitation) -> Store:
    return elicitation.store
