"""OpenTelemetry spans and metrics of mcp-elicit, through the API package only.

Without an SDK installed and configured by the application, every span and instrument is the API's
no-op: nothing is recorded, nothing is exported. With one, the tracer and meter are named `mcp_elicit`:

spans
    `mcp_elicit.call` (a `tools/call`, `prompts/get` or `resources/read` served through the runtime),
    `mcp_elicit.ask` (a question put to the person, form or URL), `mcp_elicit.step` (a journaled step),
    `mcp_elicit.store.create_decision`, `mcp_elicit.store.transition`, `mcp_elicit.store.finish_operation`
    and `mcp_elicit.store.sweep` (the store's transitions).
metrics
    `mcp_elicit.decisions.pending` (up-down counter), `mcp_elicit.decision.duration` (histogram, seconds
    from a decision's creation to the terminal state a transition gave it), `mcp_elicit.decisions.outcomes`
    (counter by mode and outcome), `mcp_elicit.conflicts` (lost compare-and-sets) and
    `mcp_elicit.expirations` (decisions and operations the clock ended).

Guarantees: attributes carry ids, names chosen by the server's author (tool, step and question keys),
eras, modes, statuses and outcomes, never content: no message, answer, argument, URL or exception text.
A metric counts a store change only once its transaction committed. Does not guarantee: that the SDK's
own spans (the `mcp-python-sdk` tracer) follow the same rule; an error's status carries its text there.
"""

from mcp_elicit.telemetry.context import current_ids

__all__ = ["current_ids"]
