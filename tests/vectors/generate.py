"""Build the signed test vectors in this folder from fixed Ed25519 seeds and fixed timestamps.

    python -m tests.vectors.generate [OUT_DIR]      (default: this folder)

Every request body is a file, in RFC 8785 canonical form plus a newline (except the vectors
whose point is to be something else: not JSON, too large).  ``index.json`` lists them in replay
order with the route, the expected status and error code, and what each one breaks; replayed in
that order against a fresh library whose clock reads ``server_time``, every one gets exactly
its status and code (``tests/rules/test_vectors.py``); ``log_leaves.json`` holds the exact
leaf bytes (``JCS({"admitted_at", "document"})``, PROTOCOL §7), leaf hashes and root of the log
that replay builds, which the test compares with what the server logged.  Ed25519 signatures are
deterministic, so the same seeds and timestamps give the same bytes: the test regenerates the
folder and compares.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.leaf import leaf_bytes
from alexandria.core.records import make_envelope, make_record, revision_id
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.core.trust import (
    document_name,
    make_authority_certificate,
    make_revocation,
    make_worker_certificate,
)
from alexandria.service.bootstrap import (
    Founding,
    Participant,
    derive_key,
    found_library,
    resolve_refs,
)

SEED = b"alexandria-test-vectors/1"
CREATED = "2026-01-01T00:00:00.000Z"
FIRST_AUTHORED = "2026-05-31T00:00:00.000Z"
SERVER_TIME = "2026-06-01T00:00:00.000Z"
HERE = Path(__file__).resolve().parent
WORKED_EXAMPLE: list[dict[str, Any]] = [
    # the contract's object_examples steps, copied so that the vectors do not move if the
    # shared contract file is not at hand; tests/rules/test_vectors.py checks they still match it
    {"name": "space", "actor": "owner", "content": {
        "kind": "space", "title": "Space",
        "body": {"summary": "What establishes this arithmetic result?"},
        "links": [], "previous": ""}},
    {"name": "subspace", "actor": "owner", "content": {
        "kind": "space", "title": "Subspace", "body": {"summary": "Definitions and consequences"},
        "links": [{"relation": "contained_in", "target": "$space"}], "previous": ""}},
    {"name": "claim", "actor": "owner", "content": {
        "kind": "claim", "title": "Claim",
        "body": {"statement": "One plus one equals two",
                 "scope": "Natural numbers with standard addition",
                 "assumptions": ["Successor definition of addition"]},
        "links": [{"relation": "contained_in", "target": "$subspace"}], "previous": ""}},
    {"name": "discussion", "actor": "peer", "content": {
        "kind": "discussion", "title": "Discussion",
        "body": {"text": "Does this depend on the domain?"},
        "links": [{"relation": "contained_in", "target": "$subspace"},
                  {"relation": "about", "target": "$claim"}], "previous": ""}},
    {"name": "reply", "actor": "owner", "content": {
        "kind": "reply", "title": "Reply", "body": "Yes: state which addition operation is meant.",
        "links": [{"relation": "replies_to", "target": "$discussion"}], "previous": ""}},
    {"name": "branch", "actor": "peer", "content": {
        "kind": "discussion", "title": "Branch", "body": {"text": "Compare alternate domains."},
        "links": [{"relation": "branches_from", "target": "$reply"}], "previous": ""}},
    {"name": "evidence", "actor": "peer", "content": {
        "kind": "evidence", "title": "Evidence",
        "body": {"claim": "$claim", "method": "example",
                 "content": "The successor of one is two.", "sources": []},
        "links": [{"relation": "evidence_for", "target": "$claim"}], "previous": ""}},
    {"name": "assessment", "actor": "owner", "content": {
        "kind": "assessment", "title": "Assessment",
        "body": {"claim": "$claim", "verdict": "supported",
                 "rationale": "The calculation follows the stated definition.",
                 "evidence": ["$evidence"]},
        "links": [{"relation": "assesses", "target": "$claim"}], "previous": ""}},
    {"name": "document", "actor": "owner", "content": {
        "kind": "document", "title": "Document",
        "body": {"text": "A synthesis of the domain and definitions."},
        "links": [{"relation": "contained_in", "target": "$space"}], "previous": ""}},
    {"name": "relationship", "actor": "owner", "content": {
        "kind": "relationship", "title": "Relationship",
        "body": {"from": "$claim", "to": "$document", "relation": "supports",
                 "rationale": "The result supports this explanation."},
        "links": [{"relation": "relates_from", "target": "$claim"},
                  {"relation": "relates_to", "target": "$document"}], "previous": ""}},
    {"name": "proposal", "actor": "peer", "content": {
        "kind": "proposal", "title": "Proposal",
        "body": {"base": "$claim", "title": "One plus one equals two",
                 "body": {"statement": "One plus one equals two",
                          "scope": "Natural numbers under Peano axioms",
                          "assumptions": ["Successor definition of addition"]},
                 "links": [{"relation": "contained_in", "target": "$subspace"}],
                 "rationale": "Name the axioms explicitly."},
        "links": [{"relation": "proposes_for", "target": "$claim"}], "previous": ""}},
    {"name": "merge", "actor": "owner", "content": {
        "kind": "claim", "title": "One plus one equals two",
        "body": {"statement": "One plus one equals two",
                 "scope": "Natural numbers under Peano axioms",
                 "assumptions": ["Successor definition of addition"]},
        "links": [{"relation": "contained_in", "target": "$subspace"},
                  {"relation": "merges", "target": "$proposal"}], "previous": "$claim"}},
]


class Vectors:
    """Accumulates the files and the replay steps."""

    def __init__(self) -> None:
        self.founding: Founding = found_library(
            library="alexandria-vectors", origin="vectors.example/log", created_at=CREATED,
            seed=SEED)
        f = self.founding
        self.owner = f.enroll("owner")
        self.peer = f.enroll("peer")
        self.commenter = f.enroll("commenter", scopes=["library.comment"])
        self.expired = f.enroll("expired", not_after="2026-03-01T00:00:00.000Z")
        self.files: dict[str, bytes] = {}
        self.steps: list[dict[str, Any]] = []
        self.ids: dict[str, str] = {}
        start = parse_ms(FIRST_AUTHORED)
        assert start is not None
        self.ms = start

    def tick(self) -> str:
        self.ms += 1000
        return format_ms(self.ms)

    def envelope(self, who: Participant, content: dict[str, Any],
                 authored_at: str | None = None) -> dict[str, Any]:
        return who.envelope(self.founding.genesis, content, authored_at or self.tick())

    def file(self, name: str, data: Any) -> None:
        assert name not in self.files, name
        self.files[name] = data if isinstance(data, bytes) else canonical(data) + b"\n"

    def step(self, name: str, data: Any, status: int, code: str | None, breaks: str,
             route: str = "/api/entries") -> None:
        if name not in self.files:
            self.file(name, data)
        self.steps.append({"file": name, "route": route, "status": status, "code": code,
                           "breaks": breaks})

    def entry(self, name: str, env: dict[str, Any] | bytes, status: int, code: str | None,
              breaks: str) -> None:
        self.step(name, env, status, code, breaks)


def resigned(who: Participant, record: dict[str, Any]) -> dict[str, Any]:
    return {"record": record,
            "signature": {"certificate": who.certificate,
                          "proof": who.worker.sign(canonical(record))}}


def build() -> dict[str, bytes]:
    v = Vectors()
    f = v.founding
    g = f.genesis
    v.file("genesis.json", f.genesis_document)
    v.file("worker_certificate_owner.json", v.owner.certificate)
    v.file("worker_certificate_peer.json", v.peer.certificate)

    # --- authority documents ------------------------------------------------------------------
    v.step("authority_certificate.json", f.authority_certificate, 201, None,
           "nothing: the native application's authority certificate", "/api/authority")
    v.step("log_certificate.json", f.log_certificate, 201, None,
           "nothing: the log key's authority certificate", "/api/authority")
    v.step("authority_certificate.json", None, 200, None,
           "nothing: an exact re-post is idempotent", "/api/authority")
    bad_sig = copy.deepcopy(f.authority_certificate)
    bad_sig["certificate"]["not_after"] = "2099-01-01T00:00:00.000Z"
    v.step("authority_certificate_bad_signature.json", bad_sig, 403, "AUTHORITY_SIGNATURES",
           "the root signature (payload changed after signing)", "/api/authority")
    other = found_library(created_at=CREATED, seed=SEED + b"/another-library")
    wrong = make_authority_certificate(other.genesis, derive_key(SEED, "extra").public_hex,
                                       ["native-application"], CREATED,
                                       "2030-01-01T00:00:00.000Z", f.roots)
    v.step("authority_certificate_wrong_genesis.json", wrong, 403, "GENESIS_MISMATCH",
           "the genesis pin (certificate of another library)", "/api/authority")
    twice = copy.deepcopy(f.authority_certificate)
    twice["signatures"] = twice["signatures"] * 2
    v.step("authority_certificate_signed_twice.json", twice, 403, "DUPLICATE_SIGNATURE",
           "the signatures (one root key signs twice: refused before any verification)",
           "/api/authority")
    unknown_field = copy.deepcopy(f.authority_certificate)
    unknown_field["certificate"]["comment"] = "unsigned extra field"
    v.step("authority_certificate_unknown_field.json", unknown_field, 400, "CERTIFICATE_FIELDS",
           "the document shape (unknown payload field)", "/api/authority")
    v.step("worker_certificate_owner.json", None, 400, "NOT_AN_AUTHORITY_DOCUMENT",
           "the route (worker certificates travel inside envelopes)", "/api/authority")
    v.step("revocation_by_unknown_key.json",
           make_revocation(g, v.owner.worker.public_hex, "not mine to revoke",
                           [derive_key(SEED, "stranger")]),
           403, "REVOCATION_SIGNATURES", "the revocation's signer (no authority)",
           "/api/authority")

    # --- the worked example -------------------------------------------------------------------
    participants = {"owner": v.owner, "peer": v.peer}
    for i, spec in enumerate(WORKED_EXAMPLE, start=1):
        content = resolve_refs(spec["content"], v.ids)
        env = v.envelope(participants[spec["actor"]], content)
        v.ids[spec["name"]] = revision_id(env["record"])
        v.entry(f"envelope_{i:02d}_{spec['name']}.json", env, 201, None,
                f"nothing: worked example step {i} ({spec['name']})")
    v.step("envelope_01_space.json", None, 200, None, "nothing: an exact retry is idempotent")
    ids = v.ids
    vote = {"kind": "vote", "title": "Vote", "body": "1",
            "links": [{"relation": "votes_on", "target": ids["claim"]}], "previous": ""}
    vote_env = v.envelope(v.peer, vote)
    ids["vote"] = revision_id(vote_env["record"])
    v.entry("envelope_13_vote.json", vote_env, 201, None, "nothing: the peer votes on the claim")
    space = {"kind": "space", "title": "Another space", "body": {"summary": "Elsewhere"},
             "links": [], "previous": ""}
    good = v.envelope(v.owner, space)  # the base of most broken envelopes below

    # --- 413 / 400: bytes and envelope shape --------------------------------------------------
    reply = {"kind": "reply", "title": "Long", "body": "x" * 66_000,
             "links": [{"relation": "replies_to", "target": ids["discussion"]}], "previous": ""}
    v.entry("envelope_too_large.json", v.envelope(v.owner, reply), 413, "BODY_TOO_LARGE",
            "the request size limit (65,536 bytes)")
    v.entry("envelope_not_json.json", canonical(good)[:200] + b"\n", 400, "NOT_JSON",
            "JSON syntax (truncated)")
    v.entry("envelope_missing_signature.json", {"record": good["record"]}, 400, "BAD_ENVELOPE",
            "the envelope shape (no signature)")
    v.entry("envelope_extra_field.json", {**good, "note": "unsigned"}, 400, "BAD_ENVELOPE",
            "the envelope shape (a third top-level field)")

    # --- 422: record shape --------------------------------------------------------------------
    rec = good["record"]
    v.entry("envelope_unknown_field.json", resigned(v.owner, {**rec, "tags": "x"}), 422,
            "UNKNOWN_FIELD", "the record's exact fields")
    v.entry("envelope_unknown_kind.json", resigned(v.owner, {**rec, "kind": "poem"}), 422,
            "UNKNOWN_KIND", "the kinds of the write contract")
    v.entry("envelope_bad_timestamp.json",
            resigned(v.owner, {**rec, "authored_at": "2026-05-31T12:00:00Z"}), 422,
            "BAD_TIMESTAMP", "timestamp syntax (no milliseconds)")
    v.entry("envelope_noncanonical_body.json",
            resigned(v.owner, {**rec, "body": '{"summary": "Elsewhere"}'}), 422,
            "NON_CANONICAL_BODY", "the canonical encoding of an object body")
    v.entry("envelope_float_in_body.json",
            resigned(v.owner, {**rec, "body": '{"summary":"Elsewhere","weight":0.5}'}), 422,
            "FLOAT_NOT_ALLOWED", "no floats in signed data")
    long_reply = {**reply, "body": "x" * 48_001}
    v.entry("envelope_body_too_long.json", v.envelope(v.owner, long_reply), 422,
            "BODY_TOO_LONG", "the body limit (48,000 characters)")

    # --- 403: certificates, authority, proof, scope -------------------------------------------
    forged = copy.deepcopy(good)
    forged["signature"]["certificate"]["certificate"]["scopes"] = ["library.curate"]
    v.entry("envelope_bad_certificate_signature.json", forged, 403, "CERTIFICATE_SIGNATURE",
            "the worker certificate's signature (scopes changed after signing)")
    stranger = derive_key(SEED, "stranger")
    for name, signer in (("unknown", stranger), ("log", f.log_key)):
        cert = make_worker_certificate(g, v.owner.actor, v.owner.worker.public_hex,
                                       ["library.curate"], signer, CREATED,
                                       "2030-01-01T00:00:00.000Z")
        env = make_envelope(make_record(g.pin, v.owner.actor, v.tick(), space), cert,
                            v.owner.worker)
        v.entry(f"envelope_cert_signed_by_{name}_authority.json", env, 403, "AUTHORITY_UNKNOWN",
                f"the authority chain (worker certificate signed by the {name} key)")
    v.entry("envelope_expired_certificate.json",
            v.envelope(v.expired, space, "2026-02-01T00:00:00.000Z"), 403,
            "CERTIFICATE_EXPIRED", "the worker certificate's validity window (ended 2026-03-01)")
    stray = other.enroll("owner")
    v.entry("envelope_wrong_genesis.json", stray.envelope(other.genesis, space, v.tick()), 403,
            "GENESIS_MISMATCH", "the pinned genesis (an envelope of another library)")
    v.entry("envelope_author_not_actor.json",
            resigned(v.owner, {**rec, "author": v.peer.actor}), 403, "AUTHOR_NOT_CERTIFIED",
            "the certified actor (record author is someone else)")
    bad_proof = copy.deepcopy(good)
    bad_proof["signature"]["proof"] = v.peer.worker.sign(canonical(rec))
    v.entry("envelope_bad_proof.json", bad_proof, 403, "PROOF_INVALID",
            "the proof (signed by another worker key)")
    claim = {"kind": "claim", "title": "A comment is not a claim",
             "body": {"statement": "s", "scope": "t", "assumptions": []}, "links": [],
             "previous": ""}
    v.entry("envelope_scope_denied.json", v.envelope(v.commenter, claim), 403, "SCOPE_DENIED",
            "the scopes table (library.comment cannot publish a claim)")

    # --- 422: content schema ------------------------------------------------------------------
    def evidence(source: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "evidence", "title": "Sourced",
                "body": {"claim": ids["claim"], "method": "source", "content": "See source.",
                         "sources": [{"label": "Source", **source}]},
                "links": [{"relation": "evidence_for", "target": ids["claim"]}], "previous": ""}

    for name, source, breaks in (
        ("http_source", {"url": "http://example.org/paper"}, "sources require HTTPS"),
        ("source_with_credentials", {"url": "https://user:secret@example.org/paper"},
         "sources carry no credentials"),
        ("source_without_host", {"url": "https:///paper"}, "sources name a host"),
        ("retrieved_at_without_z", {"url": "https://example.org/paper",
                                    "retrieved_at": "2026-05-01T12:00:00+00:00"},
         "source times end in Z"),
    ):
        v.entry(f"envelope_{name}.json", v.envelope(v.peer, evidence(source)), 422,
                "SCHEMA_VIOLATION", breaks)

    # --- state rules --------------------------------------------------------------------------
    def broken(name: str, who: Participant, content: dict[str, Any], status: int, code: str,
              breaks: str, authored_at: str | None = None) -> None:
        v.entry(f"envelope_{name}.json", v.envelope(who, content, authored_at), status, code,
                breaks)

    missing = "f" * 64
    broken("link_target_missing", v.owner,
          {**space, "links": [{"relation": "contained_in", "target": missing}]}, 422,
          "LINK_TARGET_MISSING", "link targets must already exist")
    broken("reply_to_claim", v.owner,
          {**reply, "body": "r", "links": [{"relation": "replies_to", "target": ids["claim"]}]},
          422, "LINK_TARGET_KIND", "a reply answers a discussion or reply")
    merged = WORKED_EXAMPLE[11]["content"]
    claim_now = resolve_refs({**merged, "previous": "$merge", "links": merged["links"][:1]}, ids)
    broken("not_original_author", v.peer, claim_now, 422, "NOT_ORIGINAL_AUTHOR",
          "only the original author revises")
    broken("stale_previous", v.owner, resolve_refs({**merged, "title": "Stale",
                                                   "links": merged["links"][:1]}, ids),
          409, "HEAD_CONFLICT", "previous must be the current head")
    broken("kind_changed", v.owner, {**claim_now, "kind": "document", "body": {"text": "t"}},
          422, "KIND_CHANGED", "a revision keeps its kind")
    broken("parentage_changed", v.owner, {**claim_now, "links": []}, 422, "PARENTAGE_CHANGED",
          "parentage cannot change on revision")
    broken("second_vote", v.peer, {**vote, "body": "-1"}, 409, "DUPLICATE_VOTE",
          "one vote per identity and target")
    broken("vote_on_vote", v.owner, {**vote, "links": [{"relation": "votes_on",
                                                       "target": ids["vote"]}]},
          422, "LINK_TARGET_KIND", "votes target a non-vote root")
    evidence_again = resolve_refs({**WORKED_EXAMPLE[6]["content"], "previous": "$evidence"}, ids)
    broken("revise_evidence", v.peer, evidence_again, 422, "IMMUTABLE",
          "evidence is immutable")
    assessment = resolve_refs(WORKED_EXAMPLE[7]["content"], ids)
    broken("assessment_without_evidence", v.owner,
          {**assessment, "body": {**assessment["body"], "evidence": []}}, 422,
          "EVIDENCE_REQUIRED", "non-open verdicts require evidence")
    broken("duplicate_include", v.owner,
          {**space, "links": [{"relation": "includes", "target": ids["claim"]},
                              {"relation": "includes", "target": ids["merge"]}]},
          422, "DUPLICATE_INCLUDE", "each include names a different claim or document")
    proposal = resolve_refs(WORKED_EXAMPLE[10]["content"], ids)
    broken("stale_proposal", v.peer, proposal, 409, "STALE_BASE",
          "a proposal pins the current head")
    fresh = copy.deepcopy(proposal)
    fresh["body"]["base"] = fresh["links"][0]["target"] = ids["merge"]
    fresh["body"]["title"] = "One plus one equals two, in Peano arithmetic"
    fresh_env = v.envelope(v.peer, fresh)
    ids["proposal2"] = revision_id(fresh_env["record"])
    v.entry("envelope_14_proposal_on_head.json", fresh_env, 201, None,
            "nothing: a proposal on the current head")
    merge2 = {**claim_now, "title": fresh["body"]["title"], "previous": ids["merge"],
              "links": [*fresh["body"]["links"],
                        {"relation": "merges", "target": ids["proposal2"]}]}
    broken("merge_mismatch", v.owner, {**merge2, "title": "Not what was proposed"}, 422,
          "MERGE_MISMATCH", "a merge carries exactly the proposed title, body and links")
    broken("merge_by_non_author", v.peer, merge2, 422, "NOT_ORIGINAL_AUTHOR",
          "only the target author accepts a proposal")

    # --- timestamp rules ----------------------------------------------------------------------
    server = parse_ms(SERVER_TIME)
    assert server is not None
    broken("timestamp_in_future", v.owner, space, 422, "TIMESTAMP_IN_FUTURE",
          "authored_at at most 60 s ahead of the server clock", format_ms(server + 60_001))
    broken("timestamp_before_previous", v.owner, merge2, 422, "TIMESTAMP_BEFORE_PREVIOUS",
          "authored_at not before the previous revision's", FIRST_AUTHORED)
    v.entry("envelope_15_merge.json", v.envelope(v.owner, merge2), 201, None,
            "nothing: the target author merges the proposal")

    # --- revocation ---------------------------------------------------------------------------
    v.step("revocation_peer_worker.json",
           make_revocation(g, v.peer.worker.public_hex, "key lost", [f.authority]), 201, None,
           "nothing: the authority revokes the peer's worker key", "/api/authority")
    broken("revoked_worker", v.peer, {**space, "title": "After revocation"}, 403,
          "WORKER_REVOKED", "a revoked worker key (revoked before this admission)")
    v.step("envelope_04_discussion.json", None, 200, None,
           "nothing: what the revoked worker signed before its revocation stays admitted")

    v.file("log_leaves.json", log_leaves(v))

    index = {
        "format": "alexandria.test-vectors/1",
        "description": __doc__.strip().splitlines()[0] if __doc__ else "",
        "server_time": SERVER_TIME,
        "genesis": "genesis.json",
        "pin": g.pin,
        "steps": v.steps,
    }
    v.file("index.json", (json.dumps(index, indent=1, ensure_ascii=False) + "\n").encode())
    return v.files


def log_leaves(v: Vectors) -> bytes:
    """The log that the replay of ``index.json`` builds (every step answered 201, in order,
    each admitted at ``server_time``): every leaf's exact bytes (PROTOCOL §7,
    ``JCS({"admitted_at", "document"})``, as a string), its RFC 6962 leaf hash and the root."""
    entries, hashes = [], []
    for step in v.steps:
        if step["status"] != 201:
            continue
        document = v.files[step["file"]].rstrip(b"\n")  # canonical, as admitted
        data = leaf_bytes(SERVER_TIME, document)
        hashes.append(merkle.leaf_hash(data))
        kind = ("contribution" if step["route"] == "/api/entries"
                else document_name(json.loads(document)))
        entries.append({"sequence": len(entries) + 1, "type": kind, "file": step["file"],
                        "leaf": data.decode("utf-8"), "leaf_hash": hashes[-1].hex()})
    value = {
        "format": "alexandria.test-vectors.log-leaves/1",
        "description": "leaf data = JCS({admitted_at, document}) (PROTOCOL §7); leaf_hash ="
                       " SHA-256(0x00 || leaf); root = the RFC 6962 root of all of them",
        "size": len(entries), "root": merkle.root_from_leaves(hashes).hex(),
        "entries": entries,
    }
    return (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode()


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in sorted(build().items()):
        (out / name).write_bytes(data)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else HERE
    for path in write(out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
