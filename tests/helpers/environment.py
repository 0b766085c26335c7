"""Where the tests find the machine's PostgreSQL, and whether it is mandatory (CI=true)."""

from __future__ import annotations

import os

PG_URL = os.environ.get("MCP_ELICIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"


def with_search_path(url: str, schema: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"
