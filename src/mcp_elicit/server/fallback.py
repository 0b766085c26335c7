"""What a tool does when the client cannot be asked the way a decision needs.

Chosen per tool by its author. `ERROR` answers with a clear error naming the missing capability
(`-32021` with `data.requiredCapabilities` on 2026-07-28, a tool error before that). `ARGUMENTS` lets a
client without elicitation finish anyway: the call fails with the question and its schema, and the same
call resent with `elicit_answers={key: {...}}` answers it. That path is weaker by nature (whatever drives
the client, possibly a model, supplies the answer), so a tool must opt into it. `WEB` sends the person to
the decision's own page on this server (`/elicit/{id}`, `Elicitation(public_base_url=...)` required): the
call ends with a tool error on every era naming the question and its page, the person signs in there and
answers, and the same call made again attaches to the operation and continues with that answer.
"""

from __future__ import annotations

from enum import StrEnum


class Fallback(StrEnum):
    ERROR = "error"
    ARGUMENTS = "arguments"
    WEB = "web"


ANSWERS_ARGUMENT = "elicit_answers"
