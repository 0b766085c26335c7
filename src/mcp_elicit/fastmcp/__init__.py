"""FastMCP 4 integration (`pip install "mcp-elicit[fastmcp]"`): flow tools on a `FastMCP` server, and its sign-in.

The only part of mcp-elicit that imports FastMCP. `FastMCPFlows` builds the server and registers tools whose
body takes a `Flow`, run by the same runtime as on the SDK's `MCPServer`; `LocalOAuth` puts the local
authorization server behind FastMCP's `auth=`, so the sign-in and the URL-mode pages (`mount_web`) mount on
the same app; `in_process` is the SDK `Server` the testing `Harness` and the client kit call in process.
"""

from importlib.util import find_spec

if find_spec("fastmcp") is None:
    raise ImportError('mcp_elicit.fastmcp needs the fastmcp extra: pip install "mcp-elicit[fastmcp]"', name="fastmcp")

from mcp_elicit.fastmcp.auth import LocalOAuth
from mcp_elicit.fastmcp.tools import FastMCPFlows, in_process

__all__ = ["FastMCPFlows", "LocalOAuth", "in_process"]
