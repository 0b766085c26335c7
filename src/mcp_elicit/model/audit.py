"""One row of the transition log."""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from mcp_elicit.model.json import JSONObject


class SubjectKind(StrEnum):
    DECISION = "decision"
    OPERATION = "operation"
    VAULT = "vault"
    GRANT = "grant"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """A transition as it happened: written in the same transaction as the change it records.

    `from_status` is None for the creation row. `details` has already passed through redaction.
    """

    seq: int
    subject_kind: SubjectKind
    subject_id: str
    from_status: str | None
    to_status: str
    actor: str
    reason: str
    details: JSONObject
    at: datetime
