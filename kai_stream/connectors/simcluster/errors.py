"""Kubernetes API errors and the `Status` objects that carry them over the wire."""

from __future__ import annotations

from typing import Any

_REASONS: dict[int, str] = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
}


def status_body(
    code: int, reason: str, message: str, *, success: bool = False, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A `v1 Status` object as the apiserver writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if success else "Failure",
        "code": code,
    }
    if not success:
        body["message"] = message
        body["reason"] = reason
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """An error that the HTTP layer turns into a `Status` body with the same code."""

    def __init__(self, code: int, message: str, *, reason: str | None = None, name: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.message = message
        self.name = name
        self.kind = kind

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.kind:
            details["kind"] = self.kind
        return status_body(self.code, self.reason, self.message, details=details or None)


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(404, f'{qualified} "{name}" not found', name=name, kind=plural)


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(409, f'{qualified} "{name}" already exists', reason="AlreadyExists", name=name, kind=plural)


def conflict(plural: str, name: str, why: str, group: str = "") -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(409, f'Operation cannot be fulfilled on {qualified} "{name}": {why}', name=name, kind=plural)
