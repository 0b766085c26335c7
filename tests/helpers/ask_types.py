"""Answer types the one-line asks are tested with, in process and on the web pages."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated

from pydantic import Field


class Region(enum.StrEnum):
    EU = "eu"
    US = "us"


@dataclasses.dataclass(frozen=True)
class Trip:
    city: str
    seats: Annotated[int, Field(ge=1, le=9, description="How many seats")] = 1
    region: Region | None = None
