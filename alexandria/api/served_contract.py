"""The agent read contract as this server enforces it (``GET /api/contract``).

``contracts/alexandria-contract.json`` is the user's document as given.  A server serves it with its
own ``origin`` (where the reader reached it) and the ``limits`` it enforces, read from the code
and the compiled write contract rather than copied, so the document cannot drift from the
behaviour.  Every other section is served as given.
"""

from __future__ import annotations

import copy
from typing import Any

from alexandria.core.contract import contract as read_contract
from alexandria.core.records import (
    MAX_BATCH_BYTES,
    MAX_BATCH_LINES,
    MAX_BODY_CHARACTERS,
    MAX_ENVELOPE_BYTES,
)
from alexandria.core.schema import content_schema
from alexandria.reads import catalogue, changes


def _branch(kind: str) -> dict[str, Any]:
    for rule in content_schema()["allOf"]:
        if rule["if"]["properties"]["kind"].get("const") == kind:
            body: dict[str, Any] = rule["then"]["properties"]["body"]
            return body
    raise LookupError(f"the content schema has no branch for {kind}")


def enforced_limits(changes_limits: changes.Limits = changes.DEFAULT_LIMITS) -> dict[str, int]:
    evidence = _branch("evidence")["properties"]
    sources = evidence["sources"]
    source = sources["items"]["properties"]
    repro = evidence["reproducibility"]["properties"]
    return {
        "page_size": catalogue.PAGE_SIZE,
        "changes_item_bytes": changes_limits.page_bytes,
        "source_count": sources["maxItems"],
        "source_label_characters": source["label"]["maxLength"],
        "source_url_characters": source["url"]["maxLength"],
        "source_excerpt_characters": source["excerpt"]["maxLength"],
        "source_locator_characters": source["locator"]["maxLength"],
        "source_retrieved_at_characters": source["retrieved_at"]["maxLength"],
        "reproducibility_text_characters": max(
            repro[name]["maxLength"] for name in ("environment", "inputs", "outputs")
        ),
        "reproducibility_artifacts": repro["artifacts"]["maxItems"],
        # enforced as well, beyond the contract's list
        "changes_scan_revisions": changes_limits.scan,
        "envelope_bytes": MAX_ENVELOPE_BYTES,
        "body_characters": MAX_BODY_CHARACTERS,
        "query_characters": catalogue.MAX_QUERY_CHARACTERS,
        "query_words": catalogue.MAX_QUERY_WORDS,
        # POST /api/entries/batch (PROTOCOL §4.1); each line at most envelope_bytes
        "batch_lines": MAX_BATCH_LINES,
        "batch_bytes": MAX_BATCH_BYTES,
    }


def served_contract(
    origin: str, changes_limits: changes.Limits = changes.DEFAULT_LIMITS
) -> dict[str, Any]:
    doc = copy.deepcopy(read_contract())
    doc["origin"] = origin
    doc["limits"] = enforced_limits(changes_limits)
    return doc
