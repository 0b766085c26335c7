"""The reference server: real scenarios, written once with `Flow`, doing real work in a workspace."""

from mcp_elicit.reference.app import build_reference_server
from mcp_elicit.reference.workspace import Workspace

__all__ = ["Workspace", "build_reference_server"]
