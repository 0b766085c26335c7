"""Log formats for a served app: the usual text lines, or one JSON object per line for a log pipeline.

`JsonFormatter` adds to each record the ids of the call it was logged in (`operation_id`, `decision_id`,
`method`, `target`; see `mcp_elicit.telemetry.current_ids`), or those a record names itself through
`extra=`, and the fields of the line that ends each served call (`era`, `outcome`, `duration_ms`, and what
says more of the outcome: `error_type`, `error_code`, `task_id`, `needs`, `signal`). It adds no
content: what a record says is its message, which the library writes without
answers, arguments or secrets, and the exception's traceback where a record has one, as the text format
prints it. The ids come from the logging context, so a handler must format records where they are made
(not in a queue's listener thread) for the call's ids to be seen.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from mcp_elicit.telemetry.context import current_ids

LOG_FORMAT_ENV = "MCP_ELICIT_LOG_FORMAT"
IDS = ("operation_id", "decision_id", "method", "target")
FIELDS = (*IDS, "era", "outcome", "duration_ms", "error_type", "error_code", "task_id", "needs", "signal")
"""What a record may name through `extra=` and the JSON format writes as fields of its own: the ids, and how a
served call ended (`mcp_elicit.telemetry.calls.ended`)."""
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...ids}` on one line, keys in that order."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(current_ids())
        for name in FIELDS:
            value = record.__dict__.get(name)
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(log_format: LogFormat, level: int = logging.INFO) -> None:
    """Send the root logger's records to stderr in `log_format`, replacing its handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format is LogFormat.JSON else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
