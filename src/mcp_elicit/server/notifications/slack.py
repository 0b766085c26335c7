"""The Slack-style format of a webhook (`Webhook(..., format="slack")`): a message for an incoming webhook.

The body is `{"text": ..., "blocks": [...]}`: `text` is the one-line fallback a notification shows, and the blocks
say which tool asks, what its call is about (`Delivery.about`), until when (in the reader's own time zone, with UTC
as the fallback), and carry a button to the decision's page when the app signs links (`Notifications.links`).
A `decision.ended` event says how the decision ended, without a button.

Guarantees: text from a tool (its name, the call's summary) is escaped for Slack's mrkdwn (`&`, `<`, `>`), so it
cannot become a link, a mention (`<!channel>`) or a date; a backtick in the summary, shown as an apostrophe, cannot
close its code span. The message carries no question, no answer and no argument beyond the redacted summary the
pages show.

Does not guarantee: a signature. Slack checks none: an incoming webhook's URL is its secret, so such a webhook
takes no `secret` and its deliveries carry `webhook-id` (for an intermediary that deduplicates) but neither
`webhook-timestamp` nor `webhook-signature`.
"""

from __future__ import annotations

import json

from mcp_elicit.model import JSONObject, JSONValue
from mcp_elicit.server.notifications import wording
from mcp_elicit.store.protocol import Delivery

BUTTON = "Open the decision"


def slack_payload(delivery: Delivery, *, link: str | None = None) -> bytes:
    """The message of one delivery; `link` is the decision's signed page, for an event that asks someone to act."""
    tool, about, until = escape(wording.tool(delivery)), wording.about(delivery), wording.when(delivery.deadline)
    headline = escape(wording.headline(delivery))
    stamp = int(delivery.deadline.timestamp())
    deadline = f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{until}>"
    fields: list[JSONValue] = [{"type": "mrkdwn", "text": f"*Tool*\n{tool}"}]
    if about:
        quoted = escape(about.replace("`", "'"))
        fields.append({"type": "mrkdwn", "text": f"*Call*\n`{quoted}`"})
    if wording.waiting(delivery):
        fields.append({"type": "mrkdwn", "text": f"*Until*\n{deadline}"})
        text = f"{headline} (until {escape(until)})"
    else:
        fields.append({"type": "mrkdwn", "text": f"*Status*\n{escape(delivery.status.value)}"})
        text = headline
    blocks: list[JSONObject] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*"}},
        {"type": "section", "fields": fields},
    ]
    if link is not None and wording.waiting(delivery):
        text += f": <{link}|{BUTTON}>"
        button: JSONObject = {
            "type": "button",
            "text": {"type": "plain_text", "text": BUTTON},
            "url": link,
            "style": "primary",
        }
        blocks.append({"type": "actions", "elements": [button]})
    blocks.append(
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": f"Decision `{escape(delivery.elicitation_id)}` · {delivery.event.value}"}
            ],
        }
    )
    return json.dumps({"text": text, "blocks": blocks}, ensure_ascii=False, separators=(",", ":")).encode()


def escape(text: str) -> str:
    """`text` as Slack's mrkdwn shows it literally: its three control characters as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
