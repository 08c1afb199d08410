"""Domain errors. They become HTTP statuses in exactly one place for the API
(apps.api.errors) and one for the web (apps.web.errors)."""

from __future__ import annotations


class DomainError(Exception):
    """Base: a message that is safe to show to the person who caused it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(DomainError):
    """Missing, or belongs to another organisation: the two look the same."""

    def __init__(self, message: str = "Not found.") -> None:
        super().__init__(message)


class PermissionDenied(DomainError):
    """The caller is known but their role does not allow this."""


class Conflict(DomainError):
    """The request collides with the current state (already decided, name taken, ...)."""


class ValidationFailed(DomainError):
    """Input was wrong; `errors` maps field names to messages."""

    def __init__(self, message: str, errors: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or {}
