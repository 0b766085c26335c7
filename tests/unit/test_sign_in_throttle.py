"""The sign-in back-off's arithmetic, its memory of failures and its bound, on a clock the test moves.

Its behaviour on the sign-in page (HTTP 429, per account and per address, parallel attempts, the log) is
tested over real HTTP in `test_authserver`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcp_elicit.web import SignInBackoff
from mcp_elicit.web.throttle import HeldBack, Kind, SignInThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def fail(throttle: SignInThrottle, account: str, address: str = "192.0.2.1") -> dict[Kind, int]:
    with throttle.attempt(account, address) as attempt:
        pass
    return attempt.held_back


def held_back(throttle: SignInThrottle, account: str, address: str = "192.0.2.1") -> HeldBack | None:
    try:
        with throttle.attempt(account, address) as attempt:
            attempt.succeeded = True
    except HeldBack as held:
        return held
    return None


def test_delays_double_from_the_first_up_to_the_ceiling() -> None:
    backoff = SignInBackoff()
    assert [backoff.delay(n) for n in range(7)] == [30, 60, 120, 240, 480, 900, 900]
    assert backoff.delay(10_000) == 900


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"account_failures": 0}, "at least one failure"),
        ({"first": timedelta(0)}, "positive"),
        ({"first": timedelta(minutes=20)}, "ceiling at least the first"),
        ({"window": timedelta(minutes=10)}, "longer than the longest delay"),
    ],
)
def test_bad_back_off_settings_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SignInBackoff(**settings)  # type: ignore[arg-type]


def test_failures_are_forgotten_a_window_after_the_last() -> None:
    clock = Clock()
    throttle = SignInThrottle(SignInBackoff(), clock)
    for _ in range(4):
        assert fail(throttle, "alice") == {}
    clock.now += 3600 + 1
    for _ in range(4):
        assert fail(throttle, "alice") == {}  # counted from one again
    assert fail(throttle, "alice") == {"account": 30}
    held = held_back(throttle, "alice", "198.51.100.9")
    assert held is not None and (held.seconds, held.kinds) == (30, ("account",))


def test_an_error_inside_the_attempt_counts_as_a_failure() -> None:
    throttle = SignInThrottle(SignInBackoff(account_failures=1), Clock())
    with pytest.raises(RuntimeError), throttle.attempt("alice", "192.0.2.1"):
        raise RuntimeError("the check never finished")
    assert held_back(throttle, "alice") is not None


def test_past_its_bound_the_throttle_drops_counts_that_hold_nothing_back_first() -> None:
    clock = Clock()
    throttle = SignInThrottle(SignInBackoff(address_failures=100), clock, tracked=4)
    for _ in range(5):
        fail(throttle, "alice")
    for n in range(50):  # a flood of other names, each from its own address
        fail(throttle, f"user{n}", f"203.0.113.{n}")
    held = held_back(throttle, "alice", "198.51.100.9")
    assert held is not None and held.kinds == ("account",)
    assert throttle.tracked_now <= 4


def test_a_held_back_address_adds_no_count_whatever_names_it_tries() -> None:
    """Refused attempts cost no memory: an address held back cannot fill the table with new account names."""
    clock = Clock()
    throttle = SignInThrottle(SignInBackoff(address_failures=3), clock)
    for n in range(3):
        fail(throttle, f"user{n}", "203.0.113.7")
    tracked = throttle.tracked_now
    for n in range(1000):
        with pytest.raises(HeldBack), throttle.attempt(f"x{n}", "203.0.113.7"):
            raise AssertionError("a held-back attempt must not run")
    assert throttle.tracked_now == tracked
