"""The error classes by meaning and the one table that maps them to HTTP (api/status.py):
every error is a refusal or a failure, each answers the status PROTOCOL §6 gives it, a refusal
is never a 5xx and a failure never a 4xx, and the CLI's usage error keeps its exit status."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import alexandria
from alexandria import errors
from alexandria.api.status import HTTP, headers_of, retry_after, status_of
from alexandria.cli import EXIT_USAGE, exit_code
from alexandria.cli.usage import UsageError
from alexandria.errors import AlexandriaError, Failed, Refused


def _every_error_class() -> set[type[AlexandriaError]]:
    for info in pkgutil.walk_packages(alexandria.__path__, "alexandria."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    seen: set[type[AlexandriaError]] = set()
    todo: list[type[AlexandriaError]] = [AlexandriaError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return seen


def test_every_error_is_a_refusal_or_a_failure() -> None:
    classes = _every_error_class()
    assert len(classes) > 60  # the walk found the package's errors, not only errors.py's
    stray = sorted(c.__qualname__ for c in classes
                   if not issubclass(c, (Refused, Failed)))
    assert stray == []
    both = sorted(c.__qualname__ for c in classes if issubclass(c, Refused)
                  and issubclass(c, Failed))
    assert both == []


#: (class, code, status, Retry-After) as PROTOCOL §6 and the routes' documentation give them
WIRE = [
    (errors.Malformed, "BAD_REQUEST", 400, None),
    (errors.NotCanonical, "NOT_JSON", 400, None),
    (errors.ClientGone, "CLIENT_DISCONNECTED", 400, None),
    (errors.NotPermitted, "FORBIDDEN", 403, None),
    (errors.NotFound, "NOT_FOUND", 404, None),
    (errors.TooSlow, "BODY_TIMEOUT", 408, None),
    (errors.Conflict, "CONFLICT", 409, None),
    (errors.ResyncRequired, "RESYNC_REQUIRED", 409, None),
    (errors.TooLarge, "PAYLOAD_TOO_LARGE", 413, None),
    (errors.WrongContentType, "UNSUPPORTED_MEDIA_TYPE", 415, None),
    (errors.Invalid, "UNPROCESSABLE", 422, None),
    (errors.UnsafeNumber, "FLOAT_NOT_ALLOWED", 422, None),
    (errors.RateLimited, "RATE_LIMITED", 429, None),
    (errors.ClientBusy, "CLIENT_BUSY", 429, None),
    (errors.HeadTooLarge, "HEAD_TOO_LARGE", 431, None),
    (errors.Failed, "SERVICE_ERROR", 503, None),
    (errors.QueryTimeout, "QUERY_TIMEOUT", 503, None),
    (errors.ServerBusy, "SERVER_BUSY", 503, None),
    (errors.StorageUnavailable, "STORAGE_UNAVAILABLE", 503, "5"),
    (errors.DiskFull, "DISK_FULL", 503, "30"),
    (errors.AdmissionTimeout, "ADMISSION_TIMEOUT", 503, "5"),
    (errors.Internal, "INTERNAL", 500, None),
]


@pytest.mark.parametrize(("cls", "code", "status", "retry"), WIRE,
                         ids=[c.__name__ for c, *_ in WIRE])
def test_each_class_answers_its_status_and_code(cls: type[AlexandriaError], code: str,
                                                status: int, retry: str | None) -> None:
    exc = cls("a sentence", limit=3)
    assert exc.code == code and status_of(exc) == status
    assert exc.to_json()["details"] == {"limit": 3}
    assert headers_of(exc) == ({} if retry is None else {"Retry-After": retry})


def test_the_table_covers_every_class_of_errors_py() -> None:
    public = {v for v in vars(errors).values()
              if isinstance(v, type) and issubclass(v, AlexandriaError)}
    assert public - {errors.Refused} <= set(HTTP) | {errors.NotCanonical, errors.ClientGone,
                                                     errors.ResyncRequired}
    assert {cls for cls, *_ in WIRE} == public - {AlexandriaError, errors.Refused}


def test_a_refusal_is_never_a_5xx_and_a_failure_never_a_4xx() -> None:
    for cls in _every_error_class():
        exc = cls.__new__(cls)
        AlexandriaError.__init__(exc, "a sentence")
        row = next((c for c in cls.__mro__ if c in HTTP), AlexandriaError)
        if issubclass(cls, Refused) and row is not AlexandriaError:
            assert 400 <= status_of(exc) < 500, cls
        if issubclass(cls, Failed):
            assert 500 <= status_of(exc) < 600, cls


def test_a_wait_the_error_states_wins_over_its_class_wait() -> None:
    assert retry_after(errors.StorageUnavailable("down", retry_after=12)) == 12
    assert headers_of(errors.ServerBusy("busy", retry_after=2)) == {"Retry-After": "2"}
    assert retry_after(errors.ServerBusy("busy", retry_after=True)) is None
    assert retry_after(errors.NotFound("gone")) is None


def test_the_cli_usage_error_is_its_own_refusal_with_exit_status_2() -> None:
    usage = UsageError("--a goes with --b")
    assert isinstance(usage, Refused) and not isinstance(usage, errors.Malformed)
    assert usage.code == "USAGE" and exit_code(usage) == EXIT_USAGE == 2
    # a usage code raised below the CLI (an option's value parsed in core/) exits the same
    assert exit_code(errors.Malformed("--witness x: expected NAME=VKEY", "USAGE")) == 2
