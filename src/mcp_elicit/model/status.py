"""The vocabularies of the records: modes, statuses and resume policies."""

from enum import StrEnum


class Mode(StrEnum):
    FORM = "form"
    URL = "url"


class DecisionStatus(StrEnum):
    REQUESTED = "requested"
    ACCEPTED = "accepted"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    ACCEPTED_URL = "accepted_url"
    EXTERNAL_PENDING = "external_pending"
    EXTERNAL_COMPLETED = "external_completed"
    EXTERNAL_FAILED = "external_failed"


class ResumePolicy(StrEnum):
    """How a waiting operation learns that its decision moved on."""

    AUTO = "auto"
    MANUAL = "manual"
    NOTIFICATION = "notification"
    MANUAL_OR_NOTIFICATION = "manual_or_notification"


class OperationStatus(StrEnum):
    OPEN = "open"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
