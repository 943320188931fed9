"""One exception root, two branches by meaning, and the typed errors under them.

Every error carries a stable UPPER_SNAKE ``code``, a sentence and ``details`` that tell a client
how to recover (the failing JSON pointer, the allowed values, the current head, the limit
exceeded): PROTOCOL §6.  The classes say what happened, not how HTTP spells it; the one table
that maps them to status codes (and ``Retry-After``) is ``alexandria.api.status.HTTP``, at the
HTTP edge.

``Refused``: the input, the caller or the ledger's state says no.  Nothing was stored; the same
request gets the same answer until the input or the state changes, so retrying it as it is is
pointless.

- ``Malformed``: not in the expected form (not JSON, not an envelope or document shape, a
  malformed parameter, revision or cursor).  ``NotCanonical``: bytes that are not strict JSON
  or a value with no canonical form.  ``ClientGone``: the client hung up mid-request.
- ``Invalid``: well-formed but breaking a rule: record shape or format, content schema, a state
  rule, a timestamp rule.  ``UnsafeNumber``: a float or an integer beyond ±(2^53-1) in signed
  data.
- ``NotPermitted``: a certificate, authority, revocation, validity window, proof or scope
  does not allow it.
- ``NotFound``: no such revision, log or resource.
- ``Conflict``: conflicts with the current state: a compare-and-set lost (previous is not the
  head, second vote, stale base).  ``ResyncRequired``: a changes cursor that cannot be honoured.
- ``TooLarge``: over a size limit; ``WrongContentType``: a body of a type the route does not
  take; ``TooSlow``: the body did not arrive in time.
- ``RateLimited``: too many requests of one kind from this client; ``ClientBusy``: this client
  already runs as many costly requests as one client may.

``Failed``: the service could not do its part; the input is not at fault and the same request
may succeed later.

- ``StorageUnavailable``, ``DiskFull``: the database cannot be reached, or its disk is full.
- ``QueryTimeout``, ``AdmissionTimeout``: a read or an admission ran past its deadline.
- ``ServerBusy``: the server already runs as many costly requests as it takes at once.
- ``Internal``: an unexpected error, logged; the answer says no more.

The writer and the replay tell a refusal (the job's own answer) from a failure (which aborts the
batch) by these two branches alone.
"""

from __future__ import annotations

from typing import Any, ClassVar


class AlexandriaError(Exception):
    """Root of every error this package raises on purpose; every error is a ``Refused`` or a
    ``Failed``."""

    default_code: ClassVar[str] = "ERROR"

    def __init__(self, message: str, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details: dict[str, Any] = details

    def to_json(self) -> dict[str, Any]:
        return {"error": self.message, "code": self.code, "details": self.details}


# --- refused: the input, the caller or the ledger's state says no ----------------------------


class Refused(AlexandriaError):
    """The input, the caller or the ledger's state says no; nothing was stored."""

    default_code = "REFUSED"


class Malformed(Refused):
    """The request is not JSON, not an envelope or document, or a parameter is malformed."""

    default_code = "BAD_REQUEST"


class NotCanonical(Malformed):
    """Bytes that are not strict JSON, or a value with no canonical form."""

    default_code = "NOT_JSON"


class ClientGone(Malformed):
    """The client hung up mid-request: the answer goes nowhere, only the log hears of it."""

    default_code = "CLIENT_DISCONNECTED"


class Invalid(Refused):
    """Well-formed but breaking a rule: record shape or format, content schema, a state rule or
    a timestamp rule."""

    default_code = "UNPROCESSABLE"


class UnsafeNumber(Refused):
    """A float or an integer beyond ±(2^53-1) in signed data."""

    default_code = "FLOAT_NOT_ALLOWED"


class NotPermitted(Refused):
    """Certificate, authority, revocation, validity window, proof or scope failure."""

    default_code = "FORBIDDEN"


class NotFound(Refused):
    """No such revision, log or resource."""

    default_code = "NOT_FOUND"


class Conflict(Refused):
    """A compare-and-set lost: previous is not the current head, second vote, stale base."""

    default_code = "CONFLICT"


class ResyncRequired(Conflict):
    """A changes cursor that cannot be honoured; the client must start over."""

    default_code = "RESYNC_REQUIRED"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["resync_required"] = True
        return out


class TooLarge(Refused):
    """A request body, a line or a batch over its size limit."""

    default_code = "PAYLOAD_TOO_LARGE"


class WrongContentType(Refused):
    """A request body of a content type the route does not take."""

    default_code = "UNSUPPORTED_MEDIA_TYPE"


class TooSlow(Refused):
    """The request body did not arrive in time: a slow client holds no server resource long."""

    default_code = "BODY_TIMEOUT"


class HeadTooLarge(Refused):
    """A request head (request line and header fields) beyond the limit the server reads."""

    default_code = "HEAD_TOO_LARGE"


class RateLimited(Refused):
    """Too many requests of one kind (enrolment requests): try again later; ``details``
    carries ``retry_after`` (seconds)."""

    default_code = "RATE_LIMITED"


class ClientBusy(Refused):
    """This client already has as many costly requests running as one client may: retry
    after ``details.retry_after`` seconds."""

    default_code = "CLIENT_BUSY"


# --- failed: the service could not do its part -----------------------------------------------


class Failed(AlexandriaError):
    """The server could not do its part (storage unavailable, corrupted state)."""

    default_code = "SERVICE_ERROR"


class QueryTimeout(Failed):
    """A read ran past the server's per-query time budget and was stopped: the reader it held
    is free again; ``details.retry_after`` says when to try again (seconds)."""

    default_code = "QUERY_TIMEOUT"


class StorageUnavailable(Failed):
    """The database cannot be reached (PostgreSQL stopped, restarting, its connections
    killed): nothing was stored; the same request succeeds once it is back."""

    default_code = "STORAGE_UNAVAILABLE"


class DiskFull(Failed):
    """The file system holding the database (or the log key's published checkpoint) is full:
    nothing was stored; the same request succeeds once the operator has freed space."""

    default_code = "DISK_FULL"


class AdmissionTimeout(Failed):
    """The writer did not answer within the admission deadline.  The outcome is unknown: the
    admission may still be committed.  Retry the very same bytes: an exact retry of a stored
    contribution is answered 200 with it, never stored twice."""

    default_code = "ADMISSION_TIMEOUT"


class ServerBusy(Failed):
    """The server already runs as many costly requests as it takes at once: retry after
    ``details.retry_after`` seconds."""

    default_code = "SERVER_BUSY"


class Internal(Failed):
    """An unexpected error: logged where it happened; the answer says no more."""

    default_code = "INTERNAL"
