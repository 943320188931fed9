"""The OpenAPI 3.1 description of every route, written by hand as one table.

``tests/api/test_openapi.py`` checks it against the routes ``create_app`` mounts, both ways, and
that every documented parameter is one the handler accepts.  The wire shapes follow
docs/protocol.md and the contract; docs/read-api.md explains the read routes' decisions.
"""

from __future__ import annotations

from typing import Any

from alexandria import __version__
from alexandria.core.canonical import MAX_JSON_DEPTH
from alexandria.core.records import (
    MAX_BATCH_BYTES,
    MAX_BATCH_LINES,
    MAX_ENVELOPE_BYTES,
    NDJSON,
    PERSONAL_KINDS,
    PUBLIC_KINDS,
)
from alexandria.core.trust import SCOPES
from alexandria.reads.catalogue import (
    MAX_QUERY_WORDS,
    METHODS,
    PAGE_SIZE,
    PROJECTIONS,
    SORTS,
    VERDICTS,
    VIEWS,
)
from alexandria.reads.changes import CURSOR_CHARS
from alexandria.store.search_index import LISTED_KINDS

HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
OFFSET = {"type": "integer", "minimum": 0, "maximum": 2**53 - 1, "default": 0}
NEXT_OFFSET = {"type": ["integer", "null"], "minimum": 0}
PERSONAL_STATE = {
    "type": "object", "required": ["state"],
    "properties": {"state": {"oneOf": [{"$ref": "#/components/schemas/SignedRecord"},
                                       {"type": "null"}]}},
}


# PROTOCOL §1: UTC, milliseconds, "Z" (the one form canonical signed data may carry)
TIMESTAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _q(name: str, schema: dict[str, Any], description: str, required: bool = False
       ) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema,
            "description": description}


REVISION = {
    "name": "revision", "in": "path", "required": True, "schema": HEX64,
    "description": "an exact revision id (64 lowercase hex); malformed → 400, unknown → 404",
}
ERROR_RESPONSES = {
    "400": {"$ref": "#/components/responses/BadRequest"},
    "503": {"$ref": "#/components/responses/Unavailable"},
}
NOT_FOUND = {"404": {"$ref": "#/components/responses/NotFound"}}
CODE = {"type": "string", "pattern": "^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$"}
ENROLMENT_CODE = {
    "name": "code", "in": "path", "required": True,
    "schema": {"type": "string", "pattern": "^[ -]*(?:[0-9A-TV-Za-tv-z][ -]*){8}$"},
    "description": "the one-time code, e.g. K7QF-2XMB (any case; O reads as 0, I and L as 1)",
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


AUTHORITY_HEADER = {
    "name": "x-alexandria-authority", "in": "header", "required": True,
    "schema": {"type": "string"},
    "description": "KEY AT SIGNATURE: a certified native-application authority key, a time"
                   " within 5 minutes of the server's, and the key's signature of"
                   " JCS({purpose: 'alexandria.enrolment-list/1', genesis, key, at})",
}
RETRY_AFTER = {"Retry-After": {"description": "seconds until the request may succeed (also"
                                              " details.retry_after)",
                               "schema": {"type": "integer", "minimum": 0}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


AUTHORITY_REFUSED = _error("no, a stale or a bad signature, or not a certified, unrevoked"
                           " authority (AUTHORITY_REQUIRED, BAD_AUTHORITY_HEADER,"
                           " STALE_SIGNATURE, PROOF_INVALID, AUTHORITY_UNKNOWN)")
RATE_LIMITED_ENROLMENT = {
    **_error("RATE_LIMITED: 10 requests per client address (the one the reverse proxy"
             " forwarded with `serve --trust-proxy-headers`; an IPv6 client by its /64) or 5"
             " per worker key in 10 minutes (details.per: address or key); ENROLMENTS_FULL:"
             " 10,000 requests are open (retry once the oldest expires); ENROLMENTS_BUSY: the"
             " server keeps at most 10 requests a second (bursts of 100) per process, retry"
             " in a second.  Decided before the writer is involved"),
    "headers": RETRY_AFTER,
}


def _with_retry_after(response: dict[str, Any]) -> dict[str, Any]:
    return {**response, "headers": RETRY_AFTER}


AUTHORITY_LIMITED = {
    **_error("RATE_LIMITED: this client address was refused 20 times in 10 minutes what only"
             " an authority may ask (details.per: address); answered before any signature is"
             " checked"),
    "headers": RETRY_AFTER,
}


WRITE_ERRORS = {
    "400": _error("body not JSON (NOT_JSON; JSON_TOO_DEEP: nested over"
                  f" {MAX_JSON_DEPTH} levels) or not an envelope/document shape; bad query"
                  " parameter"),
    "408": _error("the body did not arrive in time (BODY_TIMEOUT)"),
    "403": _error("certificate, authority, revocation, validity window, proof or scope"
                  " failure; READ_ONLY_MIRROR: this server is a mirror, details.origin takes"
                  " writes"),
    "409": _error("previous is not the current head, second vote, stale proposal base, or a"
                  " personal-state compare-and-set conflict; details name the current head"),
    "413": _error("request body over 65,536 bytes"),
    "422": _error("record shape, content schema, state rule or timestamp rule"),
    "503": {**_error(
        "an uncertain outcome: the contribution may have been stored, so retry the very same"
        " bytes (after Retry-After, when given): a stored one is answered 200 with its signed"
        " record, never stored twice (docs/admission.md). ADMISSION_TIMEOUT: the writer did"
        " not answer within the admission deadline; WRITER_UNAVAILABLE: the writer process is"
        " gone; STORAGE_UNAVAILABLE: the database cannot be reached; DISK_FULL: its file"
        " system is full; STORAGE_BUSY, STORAGE_FAILED: any other storage failure;"
        " CATCH_UP_REQUIRED: the database was restored behind the checkpoint this library"
        " published and takes writes once `alexandria restore --catch-up` replayed the"
        " missing tail; LOG_FORKED: the database is not the history of that checkpoint"
        " (restore a backup of it, docs/operations.md); DATABASE_REPLACED: the database file"
        " was replaced under the server (restart it)"), "headers": RETRY_AFTER},
}


def _envelope(kinds: tuple[str, ...]) -> dict[str, Any]:
    """A request's envelope: its record's kind is one this route admits."""
    return {"allOf": [_ref("Envelope"), {"properties": {"record": {
        "properties": {"kind": {"enum": list(kinds)}}}}}]}


def _get(summary: str, params: list[dict[str, Any]], ok: dict[str, Any],
         errors: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": params,
            "responses": {"200": ok, **ERROR_RESPONSES, **(errors or {})},
        }
    }


SCHEMAS: dict[str, Any] = {
    "Health": {
        "type": "object",
        "required": ["live", "ready", "reasons", "log_size", "checkpoint_size"],
        "properties": {
            "live": {"type": "boolean"}, "ready": {"type": "boolean"},
            "reasons": {"type": "array", "items": {"type": "string"}},
            "log_size": {"type": "integer"}, "checkpoint_size": {"type": "integer"},
            "origin": {"type": "string", "description": "a mirror's origin"},
            "origin_size": {"type": "integer", "description": "on a mirror: the largest"
                            " size its origin signed, as last seen"},
            "lag": {"type": "integer", "description": "on a mirror: origin_size minus"
                    " log_size (0 when it holds them all)"},
            "origin_silent_s": {"type": "number", "description": "on a mirror: seconds since"
                                " its origin last answered"},
        },
    },
    "EnrolmentRequest": {
        "type": "object",
        "required": ["code", "name", "worker", "scopes", "requested_at", "expires_at"],
        "properties": {"code": CODE, "name": {"type": "string"}, "worker": HEX64,
                       "scopes": {"type": "array", "items": {"type": "string"}},
                       "requested_at": {"type": "string", "format": "date-time"},
                       "expires_at": {"type": "string", "format": "date-time"}},
    },
    "Error": {
        "type": "object",
        "required": ["error", "code", "details"],
        "properties": {
            "error": {"type": "string", "description": "a human sentence"},
            "code": {"type": "string", "pattern": "^[A-Z][A-Z0-9_]*$"},
            "details": {"type": "object"},
            "resync_required": {"const": True},
        },
    },
    "Signature": {
        "type": "object", "required": ["key", "signature"],
        "properties": {"key": HEX64,
                       "signature": {"type": "string", "pattern": "^[0-9a-f]{128}$"}},
        "additionalProperties": False,
    },
    "SignedDocument": {
        "type": "object",
        "description": "{NAME: PAYLOAD, signatures: [...]} (PROTOCOL §2): exactly one payload"
                       " and at least one signature",
        "required": ["signatures"],
        "minProperties": 2, "maxProperties": 2,
        "properties": {"signatures": {"type": "array", "items": _ref("Signature"),
                                      "minItems": 1}},
    },
    "AuthorityDocument": {
        "type": "object",
        "description": "an authority certificate or a revocation: exactly one payload, named"
                       " certificate or revocation, and at least one signature",
        "required": ["signatures"],
        "minProperties": 2, "maxProperties": 2,
        "properties": {
            "certificate": {"type": "object"}, "revocation": {"type": "object"},
            "signatures": {"type": "array", "items": _ref("Signature"), "minItems": 1},
        },
        "additionalProperties": False,
    },
    "Record": {
        "type": "object",
        "required": ["format", "genesis", "author", "authored_at", "kind", "title", "body",
                     "links", "previous"],
        "properties": {
            "format": {"const": "alexandria.contribution/3"},
            "genesis": HEX64, "author": HEX64,
            "authored_at": {"type": "string", "pattern": TIMESTAMP},
            "kind": {"enum": [*PUBLIC_KINDS, *PERSONAL_KINDS]}, "title": {"type": "string"},
            "body": {"type": "string", "maxLength": 48000},
            "links": {"type": "array", "items": {
                "type": "object", "required": ["relation", "target"],
                "properties": {"relation": {"type": "string"}, "target": HEX64},
                "additionalProperties": False}},
            "previous": {"type": "string"},
        },
        "additionalProperties": False,
    },
    "Envelope": {
        "type": "object", "required": ["record", "signature"],
        "properties": {
            "record": _ref("Record"),
            "signature": {"type": "object", "required": ["certificate", "proof"],
                          "properties": {"certificate": _ref("SignedDocument"),
                                         "proof": {"type": "string"}},
                          "additionalProperties": False},
        },
        "additionalProperties": False,
    },
    "SignedRecord": {
        "type": "object",
        "description": "a signed record served from its stored canonical bytes",
        "required": ["id", "root", "record", "signature", "admission"],
        "properties": {
            "id": HEX64, "root": HEX64, "record": _ref("Record"),
            "signature": {"type": "object"},
            "admission": {"type": "object", "required": ["sequence", "admitted_at", "authority"],
                          "properties": {"sequence": {"type": "integer", "minimum": 1},
                                         "admitted_at": {"type": "string"},
                                         "authority": _ref("SignedDocument")}},
        },
    },
    "Summary": {
        "type": "object",
        "description": "unsigned discovery hint: fetch the exact entry before verifying",
        "required": ["id", "root", "title", "kind", "author", "authored_at", "snippet"],
        "properties": {
            "id": HEX64, "root": HEX64, "title": {"type": "string"},
            "kind": {"enum": list(LISTED_KINDS)}, "author": HEX64,
            "authored_at": {"type": "string"},
            "snippet": {"type": "string", "maxLength": 280},
        },
        "additionalProperties": False,
    },
    "Catalogue": {
        "type": "object", "required": ["items", "library", "total", "next_offset"],
        "properties": {
            "items": {"type": "array", "maxItems": PAGE_SIZE,
                      "items": {"oneOf": [_ref("SignedRecord"), _ref("Summary")]}},
            "library": {"type": "string", "description": "the genesis library namespace"},
            "total": {"type": "integer", "minimum": 0},
            "next_offset": NEXT_OFFSET,
        },
    },
    "Scores": {
        "type": "object",
        "required": ["author", "received", "votes", "votes_total", "next_offset"],
        "properties": {
            "author": HEX64,
            "received": {"type": "object", "required": ["score", "up", "down", "neutral"],
                         "properties": {k: {"type": "integer"}
                                        for k in ("score", "up", "down", "neutral")}},
            "votes": {"type": "array", "maxItems": PAGE_SIZE, "items": {
                "type": "object",
                "required": ["target", "value", "vote", "vote_root", "target_score"],
                "properties": {"target": HEX64, "value": {"enum": [-1, 0, 1]}, "vote": HEX64,
                               "vote_root": HEX64, "target_score": {"type": "integer"}}}},
            "votes_total": {"type": "integer", "minimum": 0},
            "next_offset": NEXT_OFFSET,
        },
    },
    "ObjectView": {
        "type": "object",
        "required": ["item", "head", "original", "ancestors", "items", "revisions",
                     "next_offset"],
        "properties": {
            "item": _ref("SignedRecord"), "head": HEX64, "original": _ref("SignedRecord"),
            "ancestors": {"type": "array", "items": _ref("SignedRecord"),
                          "description": "signed containing spaces, root first"},
            "items": {"type": "array", "maxItems": PAGE_SIZE, "items": _ref("SignedRecord")},
            "revisions": {"type": "integer", "minimum": 1},
            "next_offset": NEXT_OFFSET,
        },
    },
    "Connections": {
        "type": "object",
        "required": ["outgoing", "incoming", "history", "history_total", "next_offset"],
        "properties": {
            "outgoing": {"type": "array", "items": {"type": "object"}},
            "incoming": {"type": "array", "items": {
                "type": "object", "required": ["source", "relation", "title"],
                "properties": {"source": HEX64, "relation": {"type": "string"},
                               "title": {"type": "string"}}}},
            "history": {"type": "array", "items": HEX64},
            "history_total": {"type": "integer", "minimum": 1},
            "next_offset": NEXT_OFFSET,
        },
    },
    "RecordPage": {
        "type": "object", "required": ["items", "total", "next_offset"],
        "properties": {"items": {"type": "array", "maxItems": PAGE_SIZE,
                                 "items": _ref("SignedRecord")},
                       "total": {"type": "integer", "minimum": 0}, "next_offset": NEXT_OFFSET},
    },
    "Changes": {
        "type": "object", "required": ["items", "cursor", "has_more", "snapshot"],
        "properties": {
            "items": {"type": "array", "maxItems": 50, "items": _ref("SignedRecord")},
            "cursor": {"type": "string", "description": "opaque resume cursor"},
            "has_more": {"type": "boolean"},
            "snapshot": {"type": "integer", "minimum": 0,
                         "description": "the log size this page's snapshot is bounded by"},
        },
    },
    "AuthorityAdmission": {
        "type": "object", "required": ["sequence", "admitted_at", "document"],
        "properties": {"sequence": {"type": "integer", "minimum": 1},
                       "admitted_at": {"type": "string"}, "document": _ref("SignedDocument")},
    },
}

PATHS: dict[str, Any] = {
    "/api/entries": {
        "post": {
            "summary": "Admit a signed contribution envelope",
            "parameters": [_q("dry_run", {"enum": ["true", "false"], "default": "false"},
                              "run every check against the current state and store nothing")],
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": _envelope(PUBLIC_KINDS)}}},
            "responses": {
                "200": _json({"oneOf": [_ref("SignedRecord"), {
                    "type": "object", "required": ["dry_run", "id", "root", "already_admitted"],
                    "properties": {"dry_run": {"const": True}, "id": HEX64, "root": HEX64,
                                   "already_admitted": {"type": "boolean"}}}]},
                    "an exact retry (the stored signed record), or a dry run's verdict"),
                "201": _json(_ref("SignedRecord"), "admitted: the signed record"),
                **WRITE_ERRORS,
            },
        }
    },
    "/api/entries/batch": {
        "post": {
            "summary": "Admit many signed envelopes, one per NDJSON line (PROTOCOL §4.1)",
            "description": (
                "Each line is admitted exactly as `POST /api/entries` of that line alone would"
                " be (the same checks, order, statuses, codes, details and exact-retry 200), in"
                " line order: a later line may name an earlier line's revision as `previous` or"
                " as a link target. Lines are independent: a refused line (a blank line, a"
                " line that is not JSON or not UTF-8 included: 400 as on the single route) never"
                " fails, delays or changes another. The answer is sent once every admitted line"
                " is durable: one NDJSON line per request line, in order,"
                " `{\"status\": S, \"body\": B}` with the single route's status and body."
                f" At most {MAX_BATCH_LINES} lines, {MAX_BATCH_BYTES} bytes in all and"
                f" {MAX_ENVELOPE_BYTES} bytes a line (the newline not counted); a final newline"
                " is optional; an empty body is an empty answer."),
            "parameters": [_q("dry_run", {"enum": ["true", "false"], "default": "false"},
                              "every line as the single route's dry run: checked against the"
                              " current state, nothing stored (a later line cannot build on an"
                              " earlier one)")],
            "requestBody": {"required": True, "content": {NDJSON: {
                "schema": {"type": "string", "maxLength": MAX_BATCH_BYTES},
                "description": "one envelope (as POST /api/entries takes) per line"}}},
            "responses": {
                "200": {"description": "one result line per request line, in order",
                        "content": {NDJSON: {"schema": {
                            "type": "object", "required": ["status", "body"],
                            "additionalProperties": False,
                            "properties": {
                                "status": {"enum": [200, 201, 400, 403, 409, 422, 500, 503]},
                                "body": {"oneOf": [_ref("SignedRecord"), _ref("Error"), {
                                    "type": "object",
                                    "required": ["dry_run", "id", "root", "already_admitted"],
                                    "properties": {"dry_run": {"const": True}, "id": HEX64,
                                                   "root": HEX64,
                                                   "already_admitted": {"type": "boolean"}}}]},
                            }}}}},
                "400": _error("bad query parameter"),
                "408": _error("the body did not arrive in time (BODY_TIMEOUT)"),
                "413": _error(f"the whole request, before any line is admitted: over"
                              f" {MAX_BATCH_BYTES} bytes (BODY_TOO_LARGE), over {MAX_BATCH_LINES}"
                              f" lines (TOO_MANY_LINES), or a line over {MAX_ENVELOPE_BYTES}"
                              " bytes (LINE_TOO_LARGE, details.line)"),
                "415": _error(f"a body that is not {NDJSON} (UNSUPPORTED_MEDIA_TYPE)"),
                "429": _with_retry_after(_error(
                    "CLIENT_BUSY: this client's batches in progress on this server process"
                    " already hold as many bytes as one client's may (details.limit); nothing"
                    " was admitted, retry after Retry-After")),
                "503": _with_retry_after(_error(
                    "BATCH_BUDGET: too many batch bytes in progress on this server process"
                    " (details.limit); nothing was admitted, retry after Retry-After")),
            },
        }
    },
    "/api/entries/{revision}": _get(
        "One exact revision", [REVISION], _json(_ref("SignedRecord"), "the signed record"),
        NOT_FOUND),
    "/api/entries/{revision}/head": _get(
        "The operator's current head of the revision's object", [REVISION],
        _json(_ref("SignedRecord"), "the current head's signed record"), NOT_FOUND),
    "/api/entries/{revision}/connections": _get(
        "Outgoing links, incoming links and the revision history of an object",
        [REVISION, _q("offset", OFFSET, "pages incoming and history together")],
        _json(_ref("Connections"), "connections"), NOT_FOUND),
    "/api/entries/{revision}/discussion": _get(
        "The thread under a discussion or reply (replies and branches), or the debates about a"
        " claim or space",
        [REVISION, _q("sort", {"enum": ["old", "new", "top"], "default": "old"}, "order"),
         _q("offset", OFFSET, "page offset")],
        _json(_ref("RecordPage"), "a page of signed records"), NOT_FOUND),
    "/api/objects/{revision}": _get(
        "An object in context: head, original, ancestors and one section",
        [REVISION,
         _q("section", {"enum": ["all", "children", "related", "history", "graph",
                                 "discussions", "knowledge"], "default": "all"}, "section"),
         _q("offset", OFFSET, "section offset"),
         _q("exact", {"enum": ["true", "false"], "default": "false"},
            "item is the exact revision rather than the current head, and links from other"
            " objects count only when they name exactly that revision")],
        _json(_ref("ObjectView"), "the object view"), NOT_FOUND),
    "/api/catalogue": _get(
        "Discover current heads: filter, search and rank (docs/read-api.md)",
        [
            _q("q", {"type": "string", "maxLength": 500},
               "search words; every word must occur, as a whole word (no prefix matching), in"
               " the title or body (NFKC, case folded);"
               f" at most {MAX_QUERY_WORDS} distinct words (400 QUERY_TOO_LONG)"),
            _q("kind", {"enum": list(LISTED_KINDS)}, "one kind (votes are never listed)"),
            _q("sort", {"enum": list(SORTS)},
               "new (default without q), top (vote score), relevance (default with q)"),
            _q("offset", OFFSET, f"page offset; pages hold {PAGE_SIZE}"),
            _q("author", HEX64, "the 64-hex actor who created the object"),
            _q("method", {"enum": list(METHODS)}, "evidence of this method only"),
            _q("verdict", {"enum": list(VERDICTS)}, "assessments with this verdict only"),
            _q("projection", {"enum": list(PROJECTIONS), "default": "full"},
               "signed records or unsigned summaries"),
            _q("view", {"enum": list(VIEWS), "default": "all"},
               "all non-vote heads, current (no replies) or feed kinds"),
        ],
        _json(_ref("Catalogue"), "a page of heads")),
    "/api/scores": _get(
        "Host-projected vote totals of an actor and the votes they currently hold",
        [_q("author", HEX64, "the 64-hex actor", required=True),
         _q("offset", OFFSET, "offset into the actor's votes")],
        _json(_ref("Scores"), "scores")),
    "/api/changes": _get(
        "Every revision of a root's members in admission order, by snapshot cursor",
        [_q("root", HEX64, "contribution root id", required=True),
         _q("cursor", {"type": "string", "pattern": f"^[A-Za-z0-9_-]{{{CURSOR_CHARS}}}$"},
            "opaque cursor from the previous page (a forged or altered one is 400"
            " CURSOR_MALFORMED)"),
         _q("limit", {"type": "integer", "minimum": 1, "maximum": 50, "default": 50},
            "items per page")],
        _json(_ref("Changes"), "a page of the feed"),
        {"404": _error("root is not the id of an admitted object's root (UNKNOWN_ROOT)"),
         "409": _error("cursor cannot be honoured: resync_required is true")}),
    "/api/personal": {
        "post": {
            "summary": "Read or compare-and-set the signer's private lists",
            "parameters": [],
            "requestBody": {"required": True,
                            "content": {"application/json": {
                                "schema": _envelope(PERSONAL_KINDS)}}},
            "responses": {
                "200": _json(PERSONAL_STATE,
                             "the signer's current state (or null), or an exact retry"),
                "201": _json(PERSONAL_STATE, "the new state was stored"),
                **WRITE_ERRORS,
            },
        }
    },
    "/api/authority": {
        **_get("Admitted authority certificates and revocations, in admission order", [],
               _json({"type": "object", "required": ["items"],
                      "properties": {"items": {"type": "array", "items": {
                          "type": "object",
                          "required": ["sequence", "type", "admitted_at", "document"]}}}},
                     "authority documents")),
        "post": {
            "summary": "Admit an authority certificate or a revocation",
            "parameters": [],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _ref("AuthorityDocument")}}},
            "responses": {
                "200": _json(_ref("AuthorityAdmission"), "already admitted"),
                "201": _json(_ref("AuthorityAdmission"), "admitted"),
                **{k: v for k, v in WRITE_ERRORS.items() if k != "409"},
            },
        },
    },
    "/api/enrolments": {
        **_get("Open enrolment requests (not approved, not expired), the oldest 100, and how"
               " many are open: what `alexandria authority requests` lists; for an authority"
               " of the library only (a read: refusals never wait for the writer)",
               [AUTHORITY_HEADER],
               _json({"type": "object", "required": ["requests", "total"], "properties": {
                   "requests": {"type": "array", "maxItems": 100,
                                "items": _ref("EnrolmentRequest")},
                   "total": {"type": "integer", "minimum": 0,
                             "description": "open requests, listed or not"}}},
                     "open requests"),
               {"403": AUTHORITY_REFUSED, "429": AUTHORITY_LIMITED}),
        "post": {
            "summary": "Ask for a worker certificate (`alexandria login`): kept aside, never in"
                       " the log, for 15 minutes; answers a one-time code",
            "parameters": [],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["worker", "name", "scopes", "proof"],
                "additionalProperties": False,
                "description": "proof: the worker key's signature of JCS({purpose:"
                               " 'alexandria.enrolment/1', genesis, worker, name, scopes})",
                "properties": {
                    "worker": HEX64,
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"},
                    "scopes": {"type": "array", "minItems": 1, "uniqueItems": True,
                               "items": {"enum": list(SCOPES)}},
                    "proof": {"type": "string", "pattern": "^[0-9a-f]{128}$"}}}}}},
            "responses": {
                "201": _json({"type": "object", "required": ["code", "expires_at"],
                              "properties": {"code": CODE,
                                             "expires_at": {"type": "string",
                                                            "format": "date-time"}}},
                             "the request is kept; show the code to the operator"),
                **ERROR_RESPONSES,
                "413": _error("request body over 2,048 bytes"),
                "429": RATE_LIMITED_ENROLMENT,
            },
        },
    },
    "/api/enrolments/{code}": _get(
        "The requester polls its request (?worker=KEY): pending, or approved with the worker"
        " certificate.  Or an authority (the x-alexandria-authority header, no worker) reads"
        " the request of that code, however many others wait: `alexandria authority approve"
        " CODE`",
        [ENROLMENT_CODE, _q("worker", HEX64, "the requesting public key (the requester's"
                            " poll; without it, x-alexandria-authority is required)"),
         {**AUTHORITY_HEADER, "required": False}],
        _json({"oneOf": [
            {"type": "object", "required": ["code", "status", "expires_at"],
             "additionalProperties": False, "properties": {
                 "code": CODE, "status": {"enum": ["pending", "approved"]},
                 "expires_at": {"type": "string", "format": "date-time"},
                 "certificate": _ref("SignedDocument")}},
            {"allOf": [_ref("EnrolmentRequest"), {"required": ["status"], "properties": {
                "status": {"enum": ["pending", "approved"]}}}]}]},
              "the request's state (the requester), or the request itself (an authority)"),
        {"403": AUTHORITY_REFUSED,
         "404": _error("no open request with this code (for this key) (UNKNOWN_CODE)"),
         "429": AUTHORITY_LIMITED}),
    "/api/enrolments/{code}/certificate": {
        "post": {
            "summary": "Approve a request (`alexandria authority approve CODE`): the worker"
                       " certificate the operator signed with the authority key; once per code",
            "parameters": [ENROLMENT_CODE],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref("SignedDocument")}}},
            "responses": {
                "200": _json({"type": "object", "required": ["code", "status"]}, "approved"),
                **ERROR_RESPONSES,
                "403": _error("not for the requesting key, not valid now, or not issued by a"
                              " certified, unrevoked native-application authority"),
                "404": _error("no open request with this code (UNKNOWN_CODE)"),
                "409": _error("the code was already approved (CODE_USED)"),
                "413": _error("request body over 8,192 bytes"),
                "429": AUTHORITY_LIMITED,
            },
        },
    },
    "/api/genesis": _get(
        "The genesis document and its pin", [],
        _json({"type": "object", "required": ["pin", "document"],
               "properties": {"pin": HEX64, "document": _ref("SignedDocument")}}, "genesis")),
    "/api/contract": _get(
        "The agent read contract as this server enforces it (its origin and limits)", [],
        _json({"type": "object", "required": ["format", "origin", "limits", "routes"]},
              "alexandria.agent-read-contract/1")),
    "/api/openapi.json": _get(
        "This document", [], _json({"type": "object"}, "OpenAPI 3.1")),
    "/mcp": {
        "post": {
            "summary": "The read tools for AI agents over MCP streamable HTTP (stateless, JSON"
            " answers; docs/mcp.md)",
            "parameters": [],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "description": "a JSON-RPC 2.0 message of the Model Context"
                " Protocol"}}}},
            "responses": {
                "200": _json({"type": "object"}, "the JSON-RPC answer; tool refusals are tool"
                             " results with isError and the typed error {error, code, details}"),
                "400": {"description": "not a JSON-RPC message of the MCP streamable HTTP"
                        " transport (its content type, its session or its shape)"},
                "406": {"description": "the Accept header names neither application/json nor"
                        " text/event-stream"},
                "408": _error("the body did not arrive in time (BODY_TIMEOUT)"),
                "413": _error("request body over 65,536 bytes (BODY_TOO_LARGE)"),
                "429": _with_retry_after(_error(
                    "this client address already has as many tools/call requests running as"
                    " one client may (CLIENT_BUSY; details.limit, details.retry_after)")),
                "503": _with_retry_after(_error(
                    "the server already runs as many tools/call requests as it takes at once"
                    " (SERVER_BUSY; details.limit, details.retry_after)")),
            },
        }
    },
    "/api/log/checkpoint": {
        "get": {
            "summary": "The latest signed checkpoint (C2SP signed note), followed by its"
                       " witnesses' cosignature/v1 lines; with --witness-quorum N, the newest"
                       " checkpoint N witnesses cosigned (docs/log.md, Witnesses)",
            "parameters": [],
            "responses": {"200": {"description": "signed note: the log's signature line,"
                                                 " then one cosignature line per witness",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          **ERROR_RESPONSES,
                          "503": {**_json(
                              _ref("Error"), "the tree grew and the log cannot sign it:"
                              " LOG_KEY_MISSING, LOG_KEY_NOT_CERTIFIED, ... (docs/log.md);"
                              " CATCH_UP_REQUIRED or LOG_FORKED: the database does not extend"
                              " the largest checkpoint this library published"
                              " (docs/operations.md); DISK_FULL, STORAGE_UNAVAILABLE or"
                              " PUBLISHED_CHECKPOINT_UNWRITABLE: the new checkpoint cannot be"
                              " stored, or recorded beside the log key before it is served;"
                              " MIRROR_NO_CHECKPOINT: a mirror that has verified none of its"
                              " origin's yet"), "headers": RETRY_AFTER}},
        }
    },
    "/healthz": {
        "get": {
            "summary": "Liveness and readiness, from state the server holds (never waiting"
                       " on the database): 200 when ready, 503 with the reasons when not"
                       " (storage failing: STORAGE_UNAVAILABLE, DISK_FULL; admissions stalled;"
                       " the writer is gone; a restore is catching up; the log is forked; a"
                       " mirror stopped, is still catching up with its origin, or its origin"
                       " has not answered for --stale-after seconds)",
            "parameters": [],
            "responses": {
                "200": _json({"$ref": "#/components/schemas/Health"}, "ready"),
                **ERROR_RESPONSES,
                "503": _json({"$ref": "#/components/schemas/Health"}, "live, not ready"),
            },
        }
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus text exposition (names prefixed alexandria_): admissions by"
                       " outcome, request latency per route, log size, checkpoint age, writer"
                       " queue depth, mirror lag",
            "parameters": [],
            "responses": {"200": {"description": "text format 0.0.4", "content": {
                "text/plain": {"schema": {"type": "string"}}}}, **ERROR_RESPONSES},
        }
    },
    "/api/log/checkpoints": _get(
        "Every signed checkpoint after a tree size, oldest first, each note with its"
        " witnesses' cosignature lines: at most 1,000 or 393,216 bytes of them, at least one;"
        " next is the size of the last one when more follow",
        [_q("after", OFFSET, "only checkpoints of larger trees")],
        _json({"type": "object", "required": ["checkpoints", "next"], "properties": {
            "checkpoints": {"type": "array", "items": {
                "type": "object", "required": ["note", "size"]}},
            "next": NEXT_OFFSET}}, "checkpoints")),
    "/api/log/entries": _get(
        "Log leaves [start, end), at most 50 or 393,216 bytes, at least one",
        [_q("start", {"type": "integer", "minimum": 0}, "first leaf index", required=True),
         _q("end", {"type": "integer", "minimum": 1}, "end leaf index (exclusive)",
            required=True)],
        _json({"type": "object", "required": ["entries", "next"], "properties": {
            "entries": {"type": "array", "items": {
                "type": "object", "required": ["leaf", "sequence", "type"],
                "additionalProperties": False, "properties": {
                    "leaf": {
                        "type": "object", "required": ["admitted_at", "document"],
                        "additionalProperties": False,
                        "description": "the leaf data is the RFC 8785 form of this object"
                        " (PROTOCOL §7): the admitted document and its admission time"},
                    "sequence": {"type": "integer", "minimum": 1},
                    "type": {"enum": ["contribution", "certificate", "revocation"]}}}},
            "next": NEXT_OFFSET}}, "entries")),
    "/api/lookup": _get(
        "What a full id or a unique prefix of one names: a revision, an object (its root),"
        " an actor or an authority key, with its page. Not a contract route (those take"
        " exact 64-hex ids); for the short ids pages print",
        [_q("id", {"type": "string", "pattern": "^[0-9a-f]{8,64}$", "examples": ["9d272d70"]},
            "a full id or its first 8 or more lowercase hex characters (else 400 BAD_ID)",
            required=True),
         _q("kind", {"type": "string", "pattern": "^(object|revision|actor|key)"
                                                  "(,(object|revision|actor|key))*$",
                    "examples": ["object,revision"]},
            "the kinds of thing to look among, comma-separated (default: all)")],
        _json({"type": "object", "required": ["kind", "id", "url"],
               "additionalProperties": False, "properties": {
                   "kind": {"enum": ["object", "revision", "actor", "key"],
                            "description": "an object is named by its root, its first"
                                           " revision's id"},
                   "id": HEX64,
                   "url": {"type": "string", "description": "the page that shows it"},
                   "entry": {"type": "integer", "minimum": 1,
                             "description": "the log entry that admitted it"},
                   "title": {"type": "string"},
                   "root": {**HEX64, "description": "a revision's object"}}},
              "the one thing the id names"),
        {**NOT_FOUND,
         "409": _error("several things begin with the prefix (AMBIGUOUS_ID): details.candidates"
                       " lists at most 20 of them, each as this route's answer, and"
                       " details.truncated says whether there are more")}),
    "/api/log/proof/inclusion": _get(
        "RFC 9162 inclusion proof of leaf index in a tree of size",
        [_q("index", {"type": "integer", "minimum": 0}, "leaf index", required=True),
         _q("size", {"type": "integer", "minimum": 1}, "tree size", required=True)],
        _json({"type": "object", "required": ["index", "size", "proof"], "properties": {
            "index": {"type": "integer"}, "size": {"type": "integer"},
            "proof": {"type": "array", "items": HEX64}}}, "inclusion proof")),
    "/api/log/proof/consistency": _get(
        "RFC 9162 consistency proof between two tree sizes",
        [_q("old", {"type": "integer", "minimum": 1}, "older tree size, at least 1",
            required=True),
         _q("new", {"type": "integer", "minimum": 1}, "newer tree size: old ≤ new ≤ tree size"
            " (400 LOG_RANGE otherwise)", required=True)],
        _json({"type": "object", "required": ["old", "new", "proof"], "properties": {
            "old": {"type": "integer"}, "new": {"type": "integer"},
            "proof": {"type": "array", "items": HEX64}}}, "consistency proof")),
}


def document(server_url: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Alexandria ledger",
            "version": __version__,
            "description": "A signed, append-only contribution ledger for a public knowledge"
            " library. Wire decisions: docs/protocol.md; read routes: docs/read-api.md.",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "responses": {
                "BadRequest": _error("malformed parameter or path revision (typed error)"),
                "NotFound": _error("unknown revision"),
                "Unavailable": {
                    **_error("QUERY_TIMEOUT: the read ran past this server's time budget per"
                             " query (`serve --query-timeout`, 2 s by default; details.budget_ms)"
                             " and was stopped; STORAGE_UNAVAILABLE: the database cannot be"
                             " reached. Retrying after Retry-After is safe"),
                    "headers": {"Retry-After": {
                        "description": "seconds to wait before trying again",
                        "schema": {"type": "integer", "minimum": 1}}},
                },
            },
        },
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc
