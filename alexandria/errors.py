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

    def http_headers(self) -> dict[str, str]:
        """Headers the HTTP answer carries beside the body: ``Retry-After`` (seconds) when the
        error says when to try again (``details.retry_after``, a 429 or a 503), else when its
        class has a wait (``RETRY_AFTER_S``: an outage a client should wait out)."""
        retry = self.details.get("retry_after")
        if not (isinstance(retry, int) and not isinstance(retry, bool) and retry >= 0):
            retry = retry_after(self)
        return {} if retry is None else {"Retry-After": str(retry)}

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


class HeadTooLarge(AlexandriaError):
    """A request head (request line and header fields) beyond the limit the server reads."""

    default_code = "HEAD_TOO_LARGE"


class RateLimited(AlexandriaError):
    """Too many requests of one kind (enrolment requests): try again later; ``details``
    carries ``retry_after`` (seconds), also sent as the ``Retry-After`` header."""

    default_code = "RATE_LIMITED"


class ClientBusy(AlexandriaError):
    """This client already has as many costly requests running as one client may: retry
    after the ``Retry-After`` seconds."""

    default_code = "CLIENT_BUSY"


class ServerBusy(AlexandriaError):
    """The server already runs as many costly requests as it takes at once: retry after the
    ``Retry-After`` seconds."""

    default_code = "SERVER_BUSY"


class ServiceError(AlexandriaError):
    """The server could not do its part (storage unavailable, corrupted state)."""

    default_code = "SERVICE_ERROR"


class QueryTimeout(ServiceError):
    """A read ran past the server's per-query time budget and was stopped: the reader it held
    is free again; ``details.retry_after`` says when to try again (seconds)."""

    default_code = "QUERY_TIMEOUT"


class StorageUnavailable(ServiceError):
    """The database cannot be reached (PostgreSQL stopped, restarting, its connections
    killed): nothing was stored; the same request succeeds once it is back."""

    default_code = "STORAGE_UNAVAILABLE"


class DiskFull(ServiceError):
    """The file system holding the database (or the log key's published checkpoint) is full:
    nothing was stored; the same request succeeds once the operator has freed space."""

    default_code = "DISK_FULL"


class AdmissionTimeout(ServiceError):
    """The writer did not answer within the admission deadline.  The outcome is unknown: the
    admission may still be committed.  Retry the very same bytes: an exact retry of a stored
    contribution is answered 200 with it, never stored twice."""

    default_code = "ADMISSION_TIMEOUT"


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
    HeadTooLarge: 431,
    RateLimited: 429,
    ClientBusy: 429,
    QueryTimeout: 503,
    ServiceError: 503,
    ServerBusy: 503,
    AlexandriaError: 500,
}


#: seconds a client should wait before retrying (the ``Retry-After`` header of the answer)
RETRY_AFTER_S: dict[type[AlexandriaError], int] = {
    StorageUnavailable: 5,
    DiskFull: 30,
    AdmissionTimeout: 5,
}


def retry_after(exc: AlexandriaError) -> int | None:
    """The ``Retry-After`` seconds of ``exc``'s class, or None when it has none."""
    for cls in type(exc).__mro__:
        if cls in RETRY_AFTER_S:
            return RETRY_AFTER_S[cls]
    return None


def status_of(exc: AlexandriaError) -> int:
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500
