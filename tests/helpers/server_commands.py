"""The test server (`server.py`) as a stdio command line, for a client under test to start as it starts any server."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers.server import PAGES

TEST_SERVER = Path(__file__).with_name("server.py")
PENDING_COMMAND = [sys.executable, str(TEST_SERVER), "serve", "--tools", "pending", "--public-base-url", PAGES,
                   "--long-poll", "0.2", "--no-lifespan"]  # fmt: skip
"""A stdio server whose URL flow never announces its completion (no lifespan sends the notice); its store
comes from MCP_ELICIT_STORE."""
ROUNDS_COMMAND = [sys.executable, str(TEST_SERVER), "serve", "--tools", "waiting", "--long-poll", "0.05",
                  "--reask-after", "600", "--no-lifespan"]  # fmt: skip
"""A stdio server of one question, on which identical calls wait; a round of a waiting call is held only
briefly before "still waiting", so rounds are the client's pace. Each round is logged to $ROUNDS_LOG. The
question stays with the call that carries it for 10 minutes (`--reask-after`): a waiting call slow to start
on a loaded machine is never put the question itself."""
