"""What an `Elicitation` is built from besides its store: its requestState keys, and how long things last.

Each checks itself when built, so a wrong value fails where it was written, with the setting it is about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from mcp_elicit.server.eras.mrtr import DEFAULT_LONG_POLL, DEFAULT_REASK_AFTER
from mcp_elicit.server.execution import DEFAULT_APPROVER_WAIT, DEFAULT_LEASE
from mcp_elicit.server.sweeper import DEFAULT_SWEEP_INTERVAL

DEFAULT_STATE_TTL = timedelta(minutes=10)
DEFAULT_REPLAY_WINDOW = timedelta(minutes=2)
DEFAULT_OPERATION_TTL = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class RequestState:
    """The 2026-07-28 `requestState` a server seals into each round, and which answers it takes without one.

    `keys`: the key ring every instance of the server shares (newest first, 32+ bytes each), so a round put
    out by one instance is read by any other. `single_process=True` instead: a key made at start that dies
    with the process, for a server that runs as one process (a stdio server, a test). `ttl`: how long a
    round's state is accepted.

    `answers_without_state` (on by default): a client may send `inputResponses` without any round's
    `requestState`, keyed like the questions, as a stateless server would expect (the spec asks servers to
    use what they recognize). Such an answer counts for a form question the request asks, validated like
    any answer, applied once, audited as given without a round. Turn it off to have every answer come
    through the round that asked for it.
    """

    keys: Sequence[bytes | str] | None = field(default=None, repr=False)
    single_process: bool = False
    ttl: timedelta = DEFAULT_STATE_TTL
    answers_without_state: bool = True

    def __post_init__(self) -> None:
        if self.keys is None and not self.single_process:
            raise ValueError(
                "pass keys=[...] (the requestState key ring every instance shares), or single_process=True "
                "to use a key that dies with this process"
            )
        if self.keys is not None and self.single_process:
            raise ValueError("pass keys=[...] or single_process=True, not both")
        if self.keys is not None and (isinstance(self.keys, str | bytes) or not self.keys):
            raise ValueError("keys is a list of keys, newest first, with at least one")
        if self.ttl <= timedelta(0):
            raise ValueError(f"the requestState ttl must be positive, got {self.ttl}")


@dataclass(frozen=True, slots=True)
class Timing:
    """How long the runtime's records and waits last.

    `replay_window`: a completed operation hands its recorded result to an identical call this long (zero:
    never). `operation_ttl`: how long an operation stays open. `lease`: how long a call's claim on running an
    operation's steps lasts unrenewed; a call that died is taken over after it.

    `long_poll` (2026-07-28): how long one still-waiting round is held. `reask_after`: a question stays with
    the round that last put it out for this long; an identical call still waiting after that puts the same
    decision out again in its own round (at most once per `reask_after`), so a lost round never leaves a
    call stuck. The first answer recorded wins; a person slower than this may see the question twice. On
    the legacy eras a call carrying a question pings its client this often.

    `approver_wait`: how long a call whose question is with approvers waits on its live request (2025-06-18,
    2025-11-25) before it ends, naming the pending approval (the identical call made later attaches to it); a
    task waits as long as the decision is open, and a 2026-07-28 call gets still-waiting rounds.

    `sweep_interval` (jittered by a fifth): how often a served app expires overdue decisions and operations
    itself; None leaves that to late signals and `mcp-elicit decisions sweep`. A call waiting on a decision
    does not wait for the sweep: it gets `Expired` at the deadline.
    """

    replay_window: timedelta = DEFAULT_REPLAY_WINDOW
    operation_ttl: timedelta = DEFAULT_OPERATION_TTL
    lease: timedelta = DEFAULT_LEASE
    long_poll: timedelta = DEFAULT_LONG_POLL
    reask_after: timedelta = DEFAULT_REASK_AFTER
    sweep_interval: timedelta | None = DEFAULT_SWEEP_INTERVAL
    approver_wait: timedelta = DEFAULT_APPROVER_WAIT

    def __post_init__(self) -> None:
        if self.replay_window < timedelta(0):
            raise ValueError(f"replay_window must be zero or more, got {self.replay_window}")
        positive = {
            "operation_ttl": self.operation_ttl,
            "lease": self.lease,
            "long_poll": self.long_poll,
            "reask_after": self.reask_after,
            "approver_wait": self.approver_wait,
            "sweep_interval": self.sweep_interval,
        }
        for name, duration in positive.items():
            if duration is not None and duration <= timedelta(0):
                raise ValueError(f"{name} must be positive, got {duration}")
