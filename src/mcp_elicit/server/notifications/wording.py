"""What a notification made for people (a Slack message, an e-mail) says of an event, before any format escapes it.

It says which tool asks, what its call is about (`Delivery.about`, the redacted summary the pages show), until when,
and where the decision's page is; never the question's message or an answer, which only the signed-in person sees
on the page. Text from a tool (its name, the summary) is made printable and bounded here; each format escapes it for
its own syntax.
"""

from __future__ import annotations

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
    """One line: what happened, naming the tool."""
    if delivery.event is NotificationEvent.DECISION_WAITING:
        return f"{tool(delivery)} is waiting for a decision"
    if delivery.event is NotificationEvent.TASK_INPUT_REQUIRED:
        return f"A task of {tool(delivery)} needs input"
    return f"The decision {tool(delivery)} waited for ended: {delivery.status.value}"


def waiting(delivery: Delivery) -> bool:
    """Whether the event asks someone to act (and so carries the link), rather than saying a decision ended."""
    return delivery.event is not NotificationEvent.DECISION_ENDED


def when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def single_line(text: str) -> str:
    """`text` with every line break (CR, LF and the Unicode ones) made a space: what may go into a mail header."""
    return " ".join(text.splitlines())


def _bounded(text: str, limit: int) -> str:
    shown = printable(single_line(text))
    return shown if len(shown) <= limit else shown[: limit - len(_MORE)] + _MORE
