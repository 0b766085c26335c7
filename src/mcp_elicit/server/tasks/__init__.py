"""Long pauses as MCP tasks: the era-blind part (the task is the operation; its body runs in the background)."""

from mcp_elicit.server.tasks.policy import TaskPolicy, TaskSettings, TaskStart
from mcp_elicit.server.tasks.service import TaskAccepted, TaskRequest, TaskService, TaskWire
from mcp_elicit.server.tasks.state import TaskAlreadyEnded, TaskBook, TaskMeta, TaskNotFound, TaskView

__all__ = [
    "TaskAccepted",
    "TaskAlreadyEnded",
    "TaskBook",
    "TaskMeta",
    "TaskNotFound",
    "TaskPolicy",
    "TaskRequest",
    "TaskService",
    "TaskSettings",
    "TaskStart",
    "TaskView",
    "TaskWire",
]
