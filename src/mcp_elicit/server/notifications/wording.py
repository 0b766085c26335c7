"""What a notification made for people (a Slack message, an e-mail) says of an event, before any format escapes it.

It says which tool asks, what its call is about (`Delivery.about`, the redacted summary the pages show), until when,
whose approval it waits for (a decision with approvers: the roles eligible at the event's moment, and to whom an
escalation now also goes), and where the decision's page is; never the question's message or an answer, which only
the signed-in person sees on the page. Text from a tool (its name, the summary) is made printable and bounded here;
each format escapes it for its own syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from mcp_elicit.printable import printable
from mcp_elicit.store.protocol import Delivery, NotificationEvent

MAX_TOOL = 120
MAX_ABOUT = 300
_MORE = "…"


def tool(delivery: Delivery) -> str:
    return _bounded(delivery.target, MAX_TOOL) or "a tool"


def about(delivery: Delivery) -> str:
    return _bounded(delivery.about, MAX_ABOUT)


def headline(delivery: Delivery) -> str:
    """One line: what happened, naming the tool (and, for a decision with approvers, whose approval it waits for)."""
    rule = delivery.approvers
    if delivery.event is NotificationEvent.DECISION_ESCALATED:
        if rule is None or not rule.escalate_to:
            return f"{tool(delivery)} is still waiting for approval"
        return f"{tool(delivery)} is still waiting for approval: it now also goes to {_listed(rule.escalate_to)}"
    if delivery.event is NotificationEvent.DECISION_WAITING:
        if rule is not None:
            return (
                f"{tool(delivery)} is waiting for approval by {rule.waiting_on(_asked(delivery), delivery.occurred_at)}"
            )
        return f"{tool(delivery)} is waiting for a decision"
    if delivery.event is NotificationEvent.TASK_INPUT_REQUIRED:
        return f"A task of {tool(delivery)} needs input"
    return f"The decision {tool(delivery)} waited for ended: {delivery.status.value}"


def roles(delivery: Delivery) -> tuple[str, ...]:
    """The roles whose members may approve at the event's moment (an escalation's included); () without approvers."""
    rule = delivery.approvers
    return () if rule is None else rule.eligible_roles(_asked(delivery), delivery.occurred_at)


_ASKING = frozenset(
    {
        NotificationEvent.DECISION_WAITING,
        NotificationEvent.DECISION_ESCALATED,
        NotificationEvent.TASK_INPUT_REQUIRED,
    }
)


def waiting(delivery: Delivery) -> bool:
    """Whether the event asks someone to act (and so carries the link), rather than saying a decision ended."""
    return delivery.event in _ASKING


def when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def single_line(text: str) -> str:
    """`text` with every line break (CR, LF and the Unicode ones) made a space: what may go into a mail header."""
    return " ".join(text.splitlines())


def _asked(delivery: Delivery) -> datetime:
    return delivery.occurred_at if delivery.asked_at is None else delivery.asked_at


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def _bounded(text: str, limit: int) -> str:
    shown = printable(single_line(text))
    return shown if len(shown) <= limit else shown[: limit - len(_MORE)] + _MORE
