"""The one table from error classes to HTTP: the status code of each class (PROTOCOL §6) and
the ``Retry-After`` seconds of the failures a client should wait out.  A class answers as its
nearest ancestor in the table; a refusal of no more specific class answers as the root, 500
(such errors are not meant to reach HTTP)."""

from __future__ import annotations

from typing import NamedTuple

from alexandria.errors import (
    AdmissionTimeout,
    AlexandriaError,
    ClientBusy,
    Conflict,
    DiskFull,
    Failed,
    HeadTooLarge,
    Internal,
    Invalid,
    Malformed,
    NotFound,
    NotPermitted,
    QueryTimeout,
    RateLimited,
    ServerBusy,
    StorageUnavailable,
    TooLarge,
    TooSlow,
    UnsafeNumber,
    WrongContentType,
)


class Answer(NamedTuple):
    status: int
    #: seconds a client should wait before retrying, unless ``details.retry_after`` says
    retry_after: int | None = None


HTTP: dict[type[AlexandriaError], Answer] = {
    # refused: the input, the caller or the ledger's state says no
    Malformed: Answer(400),
    NotPermitted: Answer(403),
    NotFound: Answer(404),
    TooSlow: Answer(408),
    Conflict: Answer(409),
    TooLarge: Answer(413),
    WrongContentType: Answer(415),
    Invalid: Answer(422),
    UnsafeNumber: Answer(422),
    HeadTooLarge: Answer(431),
    RateLimited: Answer(429),
    ClientBusy: Answer(429),
    # failed: the service could not do its part
    Failed: Answer(503),
    QueryTimeout: Answer(503),
    ServerBusy: Answer(503),
    StorageUnavailable: Answer(503, retry_after=5),
    DiskFull: Answer(503, retry_after=30),
    AdmissionTimeout: Answer(503, retry_after=5),
    Internal: Answer(500),
    AlexandriaError: Answer(500),
}


def answer_of(exc: AlexandriaError) -> Answer:
    """The row of ``exc``'s nearest class in ``HTTP``."""
    for cls in type(exc).__mro__:
        row = HTTP.get(cls)
        if row is not None:
            return row
    return HTTP[AlexandriaError]


def status_of(exc: AlexandriaError) -> int:
    return answer_of(exc).status


def retry_after(exc: AlexandriaError) -> int | None:
    """The ``Retry-After`` seconds of ``exc``: ``details.retry_after`` when the error says when
    to try again (a 429 or a 503), else its class's wait, else None."""
    retry = exc.details.get("retry_after")
    if isinstance(retry, int) and not isinstance(retry, bool) and retry >= 0:
        return retry
    return answer_of(exc).retry_after


def headers_of(exc: AlexandriaError) -> dict[str, str]:
    """Headers the HTTP answer of ``exc`` carries beside its body (``Retry-After``)."""
    retry = retry_after(exc)
    return {} if retry is None else {"Retry-After": str(retry)}
