"""The log leaf (PROTOCOL §7, ``core/leaf.py``): the spliced leaf is exactly the RFC 8785 form of
``{"admitted_at", "document"}`` on a generated corpus, and every named offset that slices stored
leaves — in Python and in SQL — is what ``canonical()`` puts there."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from alexandria.core import leaf
from alexandria.core.canonical import canonical
from alexandria.core.leaf import LeafMalformed, leaf_bytes, record_of, record_sql, split_leaf
from alexandria.core.records import admission_bytes, envelope_bytes, signed_record_bytes
from alexandria.core.timestamps import format_ms
from tests.support.strategies import JSON, KEYS

LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last four-digit year
TIMES = st.one_of(st.integers(0, LAST_MS),
                  st.sampled_from([0, 999, 1_000, 1_780_272_000_000, LAST_MS])).map(format_ms)
RECORDS = st.dictionaries(KEYS, JSON, max_size=8)


def reference(value: Any) -> bytes:
    return bytes(rfc8785.dumps(value))


@settings(max_examples=300, deadline=None)
@given(TIMES, JSON)
def test_the_spliced_leaf_is_the_reference_jcs(admitted_at: str, document: Any) -> None:
    data = leaf_bytes(admitted_at, reference(document))
    assert data == reference({"admitted_at": admitted_at, "document": document})
    assert split_leaf(data) == (admitted_at, reference(document))
    assert leaf.admitted_at_of(data) == admitted_at
    assert leaf.document_of(data) == reference(document)


@settings(max_examples=300, deadline=None)
@given(TIMES, RECORDS, JSON, st.integers(1, 2**40))
def test_a_contributions_pieces_sit_where_the_named_offsets_say(
    admitted_at: str, record: dict[str, Any], signature: Any, sequence: int,
) -> None:
    document = {"record": record, "signature": signature}
    data = reference({"admitted_at": admitted_at, "document": document})
    rec = reference(record)
    assert leaf_bytes(admitted_at, reference(document)) == data
    assert record_of(data, len(rec)) == rec
    doc = leaf.document_of(data)
    assert leaf.document_record(doc, len(rec)) == rec
    assert leaf.document_signature(doc, len(rec)) == reference(signature)
    # the signed record spliced from the stored pieces is its own canonical form
    authority = reference({"certificate": {"key": "k"}, "signatures": []})
    adm = admission_bytes(sequence, admitted_at, authority)
    assert adm == reference({"admitted_at": admitted_at, "authority": json.loads(authority),
                             "sequence": sequence})
    signed = signed_record_bytes(doc, len(rec), "i" * 64, "r" * 64, adm)
    assert signed == reference({"admission": json.loads(adm), "id": "i" * 64,
                                "record": record, "root": "r" * 64, "signature": signature})


def test_the_named_offsets_are_derived_from_canonical() -> None:
    """No offset is a magic number: each is where ``canonical()`` puts its piece."""
    admitted_at = "2026-06-01T12:34:56.789Z"
    record = {"format": "alexandria.contribution/3", "title": "x"}
    signature = {"certificate": {}, "proof": "ab"}
    data = canonical({"admitted_at": admitted_at,
                      "document": {"record": record, "signature": signature}})
    assert len(admitted_at) == leaf.ADMITTED_AT_LENGTH
    assert data.index(admitted_at.encode()) == leaf.ADMITTED_AT_OFFSET
    assert data.index(b'{"record":') == leaf.DOCUMENT_OFFSET
    assert data.index(canonical(record)) == leaf.RECORD_OFFSET
    assert data.index(b',"signature":') == leaf.RECORD_OFFSET + len(canonical(record))
    assert data.endswith(canonical(signature) + leaf.CONTRIBUTION_TAIL + leaf.LEAF_TAIL)
    assert data[: leaf.ADMITTED_AT_OFFSET] == leaf.LEAF_HEAD
    # today's values, so that a change of them is a visible decision
    assert (leaf.ADMITTED_AT_OFFSET, leaf.DOCUMENT_OFFSET, leaf.RECORD_OFFSET) == (16, 53, 63)


def test_the_sql_helper_slices_what_the_python_helper_slices() -> None:
    record = {"a": "é\U0001f600", "b": [1, 2]}  # multi-byte UTF-8: substr counts bytes on blobs
    data = canonical({"admitted_at": "2026-06-01T00:00:00.000Z",
                      "document": {"record": record, "signature": {"proof": "p"}}})
    length = len(canonical(record))
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE log(leaf BLOB, record_length INTEGER)")
    conn.execute("INSERT INTO log VALUES (?, ?)", (data, length))
    by_parameter = conn.execute(f"SELECT {record_sql()} FROM log", (length,)).fetchone()[0]
    by_column = conn.execute(f"SELECT {record_sql('l.leaf', 'l.record_length')} FROM log l"
                             ).fetchone()[0]
    conn.close()
    assert bytes(by_parameter) == bytes(by_column) == record_of(data, length) == canonical(record)


@pytest.mark.parametrize("admitted_at", [
    "2026-06-01T00:00:00Z", "2026-06-01T00:00:00.000+00:00", '2026-06-01T00:00:00.00"Z',
    "2026-13-01T00:00:00.000Z", "", 1780272000000,
])
def test_an_admission_time_that_is_not_a_timestamp_is_refused(admitted_at: Any) -> None:
    with pytest.raises(LeafMalformed):
        leaf_bytes(admitted_at, b"{}")


@pytest.mark.parametrize("data", [
    b"", b"{}", b'{"admitted_at":"2026-06-01T00:00:00.000Z"}',
    b'{"admitted_at":"2026-06-01T00:00:00.000Z","document":{}]',
    b'{"admitted_at":"2026-06-01T00:00:00.000Z","documents":{}}',
    b'{"admitted_at":"2026-06-01T99:00:00.000Z","document":{}}',
    b'{"admitted":"2026-06-01T00:00:00.000Z","document":{}}',
    b'{"document":{},"admitted_at":"2026-06-01T00:00:00.000Z"}',
])
def test_a_malformed_leaf_is_refused(data: bytes) -> None:
    with pytest.raises(LeafMalformed):
        split_leaf(data)


@settings(max_examples=300, deadline=None)
@given(RECORDS, RECORDS, st.text(max_size=130))
def test_the_spliced_envelope_is_the_reference_jcs(
    record: dict[str, Any], certificate: dict[str, Any], proof: str,
) -> None:
    envelope = {"record": record, "signature": {"certificate": certificate, "proof": proof}}
    assert envelope_bytes(reference(record), reference(certificate), proof) == reference(envelope)
