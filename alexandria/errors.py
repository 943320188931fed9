"""One exception root and its typed subclasses; ``HTTP_STATUS`` is the one table that maps them
to status codes (PROTOCOL §6).  Every error carries a stable UPPER_SNAKE ``code`` and ``details``
that tell a client how to recover (the failing JSON pointer, the allowed values, the current head,
the limit exceeded).
"""

from __future__ import annotations

from typing import Any, ClassVar


class AlexandriaError(Exception):
    """Root of every error this package raises on purpose."""

    default_code: ClassVar[str] = "ERROR"

    def __init__(self, message: str, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details: dict[str, Any] = details

    def to_json(self) -> dict[str, Any]:
        return {"error": self.message, "code": self.code, "details": self.details}

    @property
    def status(self) -> int:
        return status_of(self)


class BadRequest(AlexandriaError):
    """The request is not JSON, not an envelope or document, or a parameter is malformed."""

    default_code = "BAD_REQUEST"


class NotCanonical(BadRequest):
    """Bytes that are not strict JSON, or a value with no canonical form."""

    default_code = "NOT_JSON"


class UnsafeNumber(AlexandriaError):
    """A float or an integer beyond ±(2^53-1) in signed data."""

    default_code = "FLOAT_NOT_ALLOWED"


class Forbidden(AlexandriaError):
    """Certificate, authority, revocation, validity window, proof or scope failure."""

    default_code = "FORBIDDEN"


class NotFound(AlexandriaError):
    default_code = "NOT_FOUND"


class Conflict(AlexandriaError):
    """A compare-and-set lost: previous is not the current head, second vote, stale base."""

    default_code = "CONFLICT"


class ResyncRequired(Conflict):
    """A changes cursor that cannot be honoured; the client must start over."""

    default_code = "RESYNC_REQUIRED"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["resync_required"] = True
        return out


class PayloadTooLarge(AlexandriaError):
    default_code = "PAYLOAD_TOO_LARGE"


class UnsupportedMediaType(AlexandriaError):
    """A request body of a content type the route does not take."""

    default_code = "UNSUPPORTED_MEDIA_TYPE"


class ClientGone(BadRequest):
    """The client hung up mid-request: the answer goes nowhere, only the log hears of it."""

    default_code = "CLIENT_DISCONNECTED"


class RequestTimeout(AlexandriaError):
    """The request body did not arrive in time: a slow client holds no server resource long."""

    default_code = "BODY_TIMEOUT"


class Unprocessable(AlexandriaError):
    """Record shape or format, content schema, state rule or timestamp rule."""

    default_code = "UNPROCESSABLE"


class RateLimited(AlexandriaError):
    """Too many requests of one kind (enrolment requests): try again later."""

    default_code = "RATE_LIMITED"


class ServiceError(AlexandriaError):
    """The server could not do its part (storage unavailable, corrupted state)."""

    default_code = "SERVICE_ERROR"


HTTP_STATUS: dict[type[AlexandriaError], int] = {
    BadRequest: 400,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    PayloadTooLarge: 413,
    UnsupportedMediaType: 415,
    RequestTimeout: 408,
    Unprocessable: 422,
    UnsafeNumber: 422,
    RateLimited: 429,
    ServiceError: 503,
    AlexandriaError: 500,
}


def status_of(exc: AlexandriaError) -> int:
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500
