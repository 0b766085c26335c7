"""Turning a handler's reply into what goes on the wire, and refusing to send what the server did not ask for.

A form answer is checked before it leaves the client, by the same judge the terminal form, the web page
and the server's own check use (`mcp_elicit.model.form_schema.Form.problems`): against the server's
`requestedSchema` (formats included) and against its property list (a key the server did not ask for is
never sent, so a handler cannot leak extra data). The answer is sent exactly as the handler gave it: the
kit fills in nothing, not even a schema's `default` (SEP-1034 has the client pre-fill defaults in the form
it shows; a person who cleared one chose no answer, and only the form knows that).

An invalid answer is a handler bug, not a decision. The kit then asks the handler again with the
problem in `FormRequest.problem`, at most `MAX_INVALID_REPLIES` times in all, and if no valid answer comes
answers `cancel` (nobody validly decided) and logs an error; invalid content is never sent and no answer is
made up.
"""

from __future__ import annotations

from collections.abc import Mapping

from mcp_types import ElicitResult

from mcp_elicit.client.handler import Accept, Cancel, Consent, Decline, FormReply, JsonValue, UrlReply
from mcp_elicit.model.form_schema import Form, problem_lines

MAX_INVALID_REPLIES = 3


def answer_problems(form: Form, content: Mapping[str, JsonValue]) -> list[str]:
    """Everything wrong with `content` as an answer to `form`, one `name: problem` each; empty if valid."""
    return problem_lines(form.problems(content))


def form_result(reply: FormReply) -> ElicitResult:
    """The wire answer to a form (an `Accept`'s content already checked)."""
    match reply:
        case Accept():
            return ElicitResult(action="accept", content=dict(reply.content))
        case Decline():
            return ElicitResult(action="decline")
        case Cancel():
            return ElicitResult(action="cancel")
    raise TypeError(f"a form handler must return Accept, Decline or Cancel, not {type(reply).__name__}")


def url_result(reply: UrlReply) -> ElicitResult:
    """The wire answer to a URL elicitation: consent is `accept` without content (it is not completion)."""
    match reply:
        case Consent():
            return ElicitResult(action="accept")
        case Decline():
            return ElicitResult(action="decline")
        case Cancel():
            return ElicitResult(action="cancel")
    raise TypeError(f"a URL handler must return Consent, Decline or Cancel, not {type(reply).__name__}")
