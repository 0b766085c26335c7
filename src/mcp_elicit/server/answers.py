"""What `ask` and `ask_url` give back to a tool body: one small type per outcome.

A tool body matches on these types; it never sees protocol eras, JSON-RPC errors or store records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Accepted(Generic[T]):
    """The person answered the form; `data` is the validated model."""

    data: T


@dataclass(frozen=True, slots=True)
class Declined:
    """The person explicitly said no."""


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The person dismissed the question without choosing, or an operator cancelled it."""


@dataclass(frozen=True, slots=True)
class Expired:
    """Nobody answered within the decision's TTL; the next call starts a new question."""


@dataclass(frozen=True, slots=True)
class Completed:
    """The out-of-band flow behind a URL decision finished successfully."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The out-of-band flow behind a URL decision ended in failure (for example, refused at the provider)."""


@dataclass(frozen=True, slots=True)
class Consented:
    """The person agreed to open a URL whose flow another server runs (a relayed question): consent, which is not
    completion; only that server learns how the flow ends. `elicitation_id` names the decision."""

    elicitation_id: str


Answer = Accepted[T] | Declined | Cancelled | Expired
UrlAnswer = Completed | Failed | Declined | Cancelled | Expired
RelayedUrlAnswer = Consented | Declined | Cancelled | Expired
