"""gcu-upgrade-manager's envelope: every answer is `{"operation", "result", ...}`, a failure carries `"error"`."""

from __future__ import annotations

from typing import Any, Optional

SUCCESS = "Success"
FAILED = "Failed"


class GumError(Exception):
    """A request answered `result: Failed` with an HTTP status and a message naming what was wrong."""

    def __init__(self, status: int, message: str, operation: Optional[str] = None, **extra: Any):
        super().__init__(message)
        self.status = status
        self.message = message
        self.operation = operation
        self.extra = extra


def envelope(operation: str, content: Any = None, **extra: Any) -> dict:
    body = {"operation": operation, "result": SUCCESS}
    if content is not None:
        body["content"] = content
    body.update(extra)
    return body


def failure(operation: str, error: str, **extra: Any) -> dict:
    return {"operation": operation, "result": FAILED, "error": error, **extra}


def operation_of(method: str, path: str) -> str:
    """The envelope's `operation` for a request, also when it fails before reaching its route."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["gum", "v1"] and parts[2:3] == ["gr"]:
        rest = parts[3:]
        if method == "PUT":
            return "Upgrade"
        if method == "DELETE":
            return "Delete"
        if method == "POST" and rest[-1:] == ["preview"]:
            return "Preview"
        if rest[-1:] == ["history"]:
            return "History"
        return "List" if not rest else "Get"
    if parts[:3] == ["gum", "v1", "operations"]:
        return "Operation"
    return "Request"
