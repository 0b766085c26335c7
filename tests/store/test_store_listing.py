"""Listing decisions a page at a time (`decision_page`, `count_decisions`) on both stores.

Keyset pages: every page walk below is checked against the one-query listing, row for row, including
decisions created at the same instant (the fake clock stands still between them), rows written while a
walk is under way, and rows whose stored values cannot be read.
"""

from __future__ import annotations

import base64
from datetime import timedelta

import psycopg
import pytest

from mcp_elicit.model import BrowserUser, Decision, DecisionStatus, Operator
from mcp_elicit.store import DecisionFilter, DecisionPage, Store
from mcp_elicit.store.sqlite import SQLiteStore
from tests.helpers.clock import FakeClock
from tests.helpers.corrupt_rows import corrupt
from tests.helpers.records import ALICE, BOB, Records

EVERYONE = Operator("listing-test")


def walk(
    store: Store, limit: int, where: DecisionFilter | None = None, caller: Operator | BrowserUser = EVERYONE
) -> list[DecisionPage]:
    pages = [store.decision_page(caller, where, limit=limit)]
    while pages[-1].after is not None:
        pages.append(store.decision_page(caller, where, after=pages[-1].after, limit=limit))
        assert len(pages) < 100, "the walk does not end"
    return pages


def ids(pages: list[DecisionPage]) -> list[str]:
    return [decision.elicitation_id for page in pages for decision in page.decisions]


def made(records: Records, clock: FakeClock, count: int, *, per_instant: int = 3) -> list[Decision]:
    """`count` decisions, `per_instant` of them at each instant, so ties are broken by id."""
    decisions = []
    for number in range(count):
        if number % per_instant == 0:
            clock.advance(timedelta(seconds=1))
        decisions.append(records.form(records.operation(ALICE if number % 2 else BOB)))
    return decisions


def test_pages_walk_the_whole_listing_in_its_order(store: Store, records: Records, clock: FakeClock) -> None:
    created = made(records, clock, 23)
    whole = [d.elicitation_id for d in store.list_decisions(EVERYONE, limit=1000)]
    assert sorted(whole) == sorted(d.elicitation_id for d in created)
    for limit in (1, 3, 5, 23, 24):
        pages = walk(store, limit)
        assert ids(pages) == whole, limit
        assert [page.rows for page in pages[:-1]] == [limit] * (len(pages) - 1)
        assert 0 < pages[-1].rows <= limit and pages[-1].after is None
    assert store.count_decisions(EVERYONE) == 23


def test_a_walk_neither_repeats_nor_skips_while_the_store_is_written(
    store: Store, records: Records, clock: FakeClock
) -> None:
    made(records, clock, 9)
    before = [d.elicitation_id for d in store.list_decisions(EVERYONE, limit=1000)]
    first = store.decision_page(EVERYONE, limit=4)
    moved = store.get_decision(before[5], EVERYONE)
    store.transition(moved, DecisionStatus.CANCELLED, caller=EVERYONE)  # status is no part of the order
    newer = made(records, clock, 4)  # newer than the cursor: the walk has passed their place
    rest = walk_from(store, first, limit=2)
    assert ids([first, *rest]) == before
    assert not {d.elicitation_id for d in newer} & set(ids(rest))
    assert store.count_decisions(EVERYONE, after=first.after) == len(before) - 4


def walk_from(store: Store, page: DecisionPage, *, limit: int) -> list[DecisionPage]:
    pages: list[DecisionPage] = []
    after = page.after
    while after is not None:
        pages.append(store.decision_page(EVERYONE, after=after, limit=limit))
        after = pages[-1].after
    return pages


def test_counts_and_pages_follow_the_filter_and_the_caller(store: Store, records: Records, clock: FakeClock) -> None:
    created = made(records, clock, 10)
    declined = store.transition(created[0], DecisionStatus.DECLINED, caller=created[0].principal)
    alices = [d.elicitation_id for d in store.list_decisions(EVERYONE, principal_id="alice")]
    assert sorted(alices) == sorted(d.elicitation_id for d in created if d.principal_id == ALICE.principal_id)
    assert ids(walk(store, 2, caller=BrowserUser("alice"))) == alices
    assert ids(walk(store, 2, DecisionFilter(principal_id="alice"))) == alices
    assert store.count_decisions(BrowserUser("alice")) == len(alices) == 5
    assert store.count_decisions(BrowserUser("nobody")) == 0
    assert ids(walk(store, 2, DecisionFilter(status=DecisionStatus.DECLINED))) == [declined.elicitation_id]
    assert store.count_decisions(EVERYONE, DecisionFilter(status=DecisionStatus.REQUESTED)) == 9
    only = DecisionFilter(operation_id=created[3].operation_id)
    assert ids(walk(store, 1, only)) == [created[3].elicitation_id] and store.count_decisions(EVERYONE, only) == 1
    prefix = DecisionFilter(id_prefix=created[4].elicitation_id[:18])
    assert ids(walk(store, 5, prefix)) == [created[4].elicitation_id]
    assert store.count_decisions(EVERYONE, DecisionFilter(id_prefix="%")) == 0
    assert store.decision_page(EVERYONE, DecisionFilter(id_prefix="not hex"), limit=5) == DecisionPage([], [], None)
    soon = DecisionFilter(expiring_before=clock() + timedelta(hours=1))
    assert store.count_decisions(EVERYONE, soon) == 9  # the declined one waits no more
    first = store.decision_page(EVERYONE, soon, limit=4)
    assert store.count_decisions(EVERYONE, soon, after=first.after) == 5


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage",
        "12.",
        ".abc",
        "1_000.abc",
        "12.has space",
        "~",
        "~not base64 json",
        "~" + base64.urlsafe_b64encode(b'{"a": 1}').decode(),
        "~" + base64.urlsafe_b64encode(b"[1, 2, 3]").decode(),
        "~" + base64.urlsafe_b64encode(b'[true, "id"]').decode(),
        "~" + base64.urlsafe_b64encode(b'[{"raw": [1]}, "id"]').decode(),
        "~" + base64.urlsafe_b64encode(b'[1, {"blob": "xyz"}]').decode(),
        "99999999999999999999.abc",
    ],
)
def test_a_text_that_is_no_cursor_is_refused(store: Store, token: str) -> None:
    with pytest.raises(ValueError, match="is not a cursor of a decision listing"):
        store.decision_page(EVERYONE, after=token)
    with pytest.raises(ValueError, match="is not a cursor of a decision listing"):
        store.count_decisions(EVERYONE, after=token)


@pytest.mark.engines("sqlite", "postgres")
def test_a_cursor_past_a_stored_value_of_the_wrong_kind_resumes_only_on_sqlite(store_url: str, store: Store) -> None:
    """Only SQLite keeps a time that is no time (a corrupt row), so only there may a cursor carry one; on
    PostgreSQL such a cursor was made elsewhere, or by hand, and is refused."""
    token = "~" + base64.urlsafe_b64encode(b'[{"raw": "soon"}, "id"]').decode()
    if store_url.startswith("sqlite:"):
        assert store.decision_page(EVERYONE, after=token) == DecisionPage([], [], None)
        return
    with pytest.raises(ValueError, match="is not a cursor of a decision listing"):
        store.decision_page(EVERYONE, after=token)


def test_a_limit_below_one_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="limit must be at least 1"):
        store.decision_page(EVERYONE, limit=0)


def test_unreadable_rows_at_page_ends_never_stall_a_walk(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    created = made(records, clock, 6, per_instant=2)
    if store_url.startswith("sqlite:"):
        # Values no healthy row holds: they sort apart (blob > text > numbers), and a cursor must hold them.
        for value, decision in (("created_at = 'soon'", created[1]), ("created_at = x'00ff'", created[2]),
                                ("elicitation_id = x'07'", created[4])):  # fmt: skip
            corrupt(
                store_url, f"UPDATE elicit_decisions SET {value} WHERE elicitation_id = '{decision.elicitation_id}'"
            )
        unreadable = {created[1].elicitation_id, created[2].elicitation_id, None}  # a blob id reads as none
    else:
        corrupt(store_url, "ALTER TABLE elicit_decisions ALTER COLUMN created_at TYPE timestamp")
        unreadable = {d.elicitation_id for d in created}
    for limit in (1, 2, 4):
        pages = walk(store, limit)
        skipped = [row.row_id for page in pages for row in page.unreadable]
        assert sorted(map(str, skipped)) == sorted(map(str, unreadable)), limit
        readable = ids(pages)
        assert len(readable) + len(skipped) == 6 and len(set(readable)) == len(readable)
        assert sum(page.rows for page in pages) == store.count_decisions(EVERYONE) == 6
        assert store.count_decisions(EVERYONE, after=pages[0].after) == 6 - pages[0].rows


def test_the_listing_order_has_an_index_of_its_own(store_url: str, store: Store, records: Records) -> None:
    """A page reads its own rows from the index, never sorting the table: on SQLite, read from the plan of the
    very statements a first and a later page run; on PostgreSQL, from the index the plan may use."""
    made(records, FakeClock(), 3)
    if not store_url.startswith("sqlite:"):
        with psycopg.connect(store_url) as connection:
            [(definition,)] = connection.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'elicit_decisions_newest'"
                " AND schemaname = current_schema()"
            ).fetchall()
        assert definition.endswith("(created_at DESC, elicitation_id)")
        return
    statements: list[str] = []
    assert isinstance(store, SQLiteStore)
    lite = store.connection()
    lite.set_trace_callback(statements.append)
    try:
        first = store.decision_page(EVERYONE, limit=1)
        store.decision_page(EVERYONE, after=first.after, limit=1)
    finally:
        lite.set_trace_callback(None)
    listing = [sql for sql in statements if sql.startswith("SELECT") and "ORDER BY created_at DESC" in sql]
    assert len(listing) == 2
    for sql in listing:
        plan = " ".join(row[3] for row in lite.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())
        assert "elicit_decisions_newest" in plan and "TEMP B-TREE" not in plan, plan


def test_the_page_cursor_is_short_for_a_healthy_row(store: Store, records: Records, clock: FakeClock) -> None:
    made(records, clock, 2)
    after = store.decision_page(EVERYONE, limit=1).after
    assert after is not None and len(after) <= 60 and after.replace(".", "").replace("-", "").isalnum()
