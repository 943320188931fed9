// Alexandria: verify one revision in the browser, with WebCrypto only.
//
// The revision page carries, in data- attributes of #verification, the revision id, its
// admission sequence, the genesis pin the page states, the log origin and the witnesses the
// library names.  The reader's own pin and witnesses, if they set them on /trust, come from
// this browser's storage (trust.js).  This script fetches what the JSON API serves (the signed
// record, the genesis, the authority documents, the signed checkpoint, the log leaf and an
// inclusion proof) and checks, in order:
//   1. genesis: SHA-256(JCS(payload)) is the pin the page states, threshold root signatures;
//   2. record: SHA-256(JCS(record)) is the revision id, the record names the pinned genesis;
//   3. author: the worker's proof over JCS(record), the worker certificate signed by its
//      authority, for this actor and a scope that grants the kind;
//   4. authority: its certificate signed by the root threshold, role native-application;
//   5. checkpoint: origin, signed by a key whose root-signed certificate has role log, and
//      cosigned by the reader's witnesses (or else the library's) up to their quorum;
//   6. leaf: this revision's leaf, recomputed from its record, signature and admitted_at;
//   7. inclusion: the RFC 9162 proof from that leaf leads to the checkpoint's root.
// Validity windows and revocations are left to `alexandria verify` (the page says so).
// Then the badge compares the page's pin with the reader's: green only when they are the same,
// amber with both shown when they differ, neutral (naming the page's pin) when the reader set
// none.
// Everything shown comes from textContent: no server or contributor text becomes markup.
"use strict";

(function () {
  const box = document.getElementById("verification");
  if (!box) return;
  const badge = document.getElementById("badge");
  const stepsList = document.getElementById("verify-steps");
  const enc = new TextEncoder();
  const SCOPES = {
    "library.publish": ["discussion", "claim", "document", "evidence", "assessment", "relationship"],
    "library.comment": ["reply"],
    "library.vote": ["vote"],
    "library.curate": ["space", "proposal"],
  };

  class Failure extends Error {}

  function show(state, text) {
    badge.className = "badge badge-" + state;
    badge.textContent = text;
    box.dataset.state = state;
  }

  function step(text, ok) {
    const li = document.createElement("li");
    li.className = ok ? "ok" : "fail";
    li.textContent = (ok ? "✓ " : "✗ ") + text;
    stepsList.appendChild(li);
  }

  // --- bytes --------------------------------------------------------------------------------

  function hex(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function unhex(text) {
    if (typeof text !== "string" || !/^([0-9a-f]{2})*$/.test(text)) throw new Failure("malformed hex");
    const out = new Uint8Array(text.length / 2);
    for (let i = 0; i < out.length; i++) out[i] = parseInt(text.substr(i * 2, 2), 16);
    return out;
  }

  function unbase64(text) {
    const raw = atob(text);
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }

  function concat(...parts) {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  }

  function equal(a, b) {
    return a.length === b.length && a.every((x, i) => x === b[i]);
  }

  // RFC 8785 (JCS) for the values Alexandria signs: no floats, so numbers are safe integers;
  // keys sorted by UTF-16 code units (what Array.prototype.sort compares); strings as
  // JSON.stringify writes them, which is what RFC 8785 §3.2.2.2 prescribes.
  function jcs(value) {
    if (value === null || typeof value === "boolean") return JSON.stringify(value);
    if (typeof value === "number") {
      if (!Number.isSafeInteger(value)) throw new Failure("a signed value holds a non-integer number");
      return String(value);
    }
    if (typeof value === "string") return JSON.stringify(value);
    if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
    const keys = Object.keys(value).sort();
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + jcs(value[k])).join(",") + "}";
  }

  async function sha256(bytes) {
    return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  }

  // --- the log ------------------------------------------------------------------------------

  // The bytes of the log leaf of `signed` (a signed record) that the tree hashes, recomputed
  // from the record alone: JCS({"admitted_at", "document": {record, signature}}) (PROTOCOL §7:
  // the leaf commits to the admission time).  The one place that knows the leaf's shape.
  function leafData(signed) {
    return enc.encode(jcs({
      admitted_at: signed.admission.admitted_at,
      document: { record: signed.record, signature: signed.signature },
    }));
  }

  async function leafHash(data) { return sha256(concat(Uint8Array.of(0), data)); }
  async function nodeHash(left, right) { return sha256(concat(Uint8Array.of(1), left, right)); }

  // RFC 9162 §2.1.3.2, as alexandria/core/merkle.py verify_inclusion.
  async function rootFromInclusion(index, size, leaf, proof) {
    if (!(index < size)) throw new Failure("leaf index " + index + " is not below tree size " + size);
    let fn = index, sn = size - 1, r = leaf;
    for (const p of proof) {
      if (sn === 0) throw new Failure("the inclusion proof is too long");
      if ((fn & 1) || fn === sn) {
        r = await nodeHash(p, r);
        while (!(fn & 1) && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
      } else {
        r = await nodeHash(r, p);
      }
      fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
    }
    if (sn !== 0) throw new Failure("the inclusion proof is too short");
    return r;
  }

  // C2SP signed note: the signed text is everything up to the blank line; signature lines are
  // "— NAME base64(keyid[4] || signature)".
  function parseNote(note) {
    const cut = note.indexOf("\n\n");
    if (cut < 0) throw new Failure("the checkpoint is not a signed note");
    const text = note.slice(0, cut + 1);
    const lines = text.split("\n");
    if (lines.length !== 4) throw new Failure("the checkpoint body is not three lines");
    if (!/^(0|[1-9][0-9]{0,15})$/.test(lines[1])) throw new Failure("the checkpoint size is malformed");
    const root = unbase64(lines[2]);
    if (root.length !== 32) throw new Failure("the checkpoint root is not 32 bytes");
    const signatures = [], cosignatures = [];
    for (const line of note.slice(cut + 2).split("\n")) {
      if (!line) continue;
      const m = /^\u2014 (\S+) ([A-Za-z0-9+/=]+)$/.exec(line);
      if (!m) throw new Failure("a checkpoint signature line is malformed");
      const blob = unbase64(m[2]);
      if (blob.length === 68) { // an Ed25519 note signature (the log's)
        signatures.push({ name: m[1], keyId: blob.slice(0, 4), signature: blob.slice(4) });
      } else if (blob.length === 76) { // a cosignature/v1: key id, u64 timestamp, signature
        let time = 0n;
        for (const b of blob.slice(4, 12)) time = time * 256n + BigInt(b);
        cosignatures.push({ name: m[1], keyId: blob.slice(0, 4), time: time.toString(),
                            signature: blob.slice(12) });
      }
    }
    return { text: enc.encode(text), origin: lines[0], size: Number(lines[1]), root, signatures,
             cosignatures };
  }

  // --- Ed25519 --------------------------------------------------------------------------------

  let ed25519 = null; // true, or a reason it is missing
  async function ed25519Available() {
    if (ed25519 === null) {
      try {
        await crypto.subtle.importKey("raw", new Uint8Array(32).fill(1), { name: "Ed25519" }, false, ["verify"]);
        ed25519 = true;
      } catch (e) {
        ed25519 = "this browser's WebCrypto has no Ed25519 (" + e.name + ")";
      }
    }
    return ed25519 === true;
  }

  async function ed25519Verify(publicHex, signatureHex, message) {
    const key = await crypto.subtle.importKey("raw", unhex(publicHex), { name: "Ed25519" }, false, ["verify"]);
    return crypto.subtle.verify({ name: "Ed25519" }, key, unhex(signatureHex), message);
  }

  // 5b. The witnesses: the reader's own (their cosignature/v1 verifier keys and quorum, set on
  // /trust) when they set any, else the library's, as the page names them.  Each witness's
  // line must verify over "cosignature/v1\ntime T\n" and the checkpoint text (C2SP
  // tlog-cosignature), and at least the quorum of them must have cosigned.
  async function witnessed(cp, trust) {
    const mine = !!(trust && trust.witnesses.length);
    const whose = mine ? "your witnesses" : "the library's witnesses";
    const vkeys = mine ? trust.witnesses.map((w) => w.vkey)
                       : (box.dataset.witnesses || "").split(" ").filter(Boolean);
    if (!vkeys.length) return null;
    const quorum = mine ? trust.quorum : Number(box.dataset.witnessQuorum || vkeys.length);
    const cosigners = [];
    for (const vkey of vkeys) {
      const parts = vkey.split("+");
      if (parts.length !== 3) continue;
      const [name, claimed, encoded] = parts;
      const raw = unbase64(encoded);
      if (raw.length !== 33 || raw[0] !== 4) continue;
      const pub = raw.slice(1);
      const id = (await sha256(concat(enc.encode(name + "\n"), Uint8Array.of(4), pub))).slice(0, 4);
      if (hex(id) !== claimed) continue; // a key id that is not this key's names no key
      const line = cp.cosignatures.find((s) => s.name === name && equal(s.keyId, id));
      if (!line) continue;
      const message = concat(enc.encode("cosignature/v1\ntime " + line.time + "\n"), cp.text);
      const key = await crypto.subtle.importKey("raw", pub, { name: "Ed25519" }, false, ["verify"]);
      check(await crypto.subtle.verify({ name: "Ed25519" }, key, line.signature, message),
            "witness " + name + "'s cosignature of the checkpoint does not verify");
      cosigners.push(name);
    }
    check(cosigners.length >= quorum, "the checkpoint carries " + cosigners.length + "/" + quorum +
          " valid cosignatures of " + whose);
    step("the checkpoint is cosigned by " + cosigners.length + " of " + whose + " (" +
         cosigners.join(", ") + ")", true);
    return { whose, count: cosigners.length };
  }

  // Threshold of distinct root keys over JCS(payload); returns how many signed validly.
  async function rootSignatures(payload, signatures, genesis) {
    const message = enc.encode(jcs(payload));
    const good = new Set();
    for (const s of signatures) {
      if (genesis.root_keys.includes(s.key) && !good.has(s.key) && await ed25519Verify(s.key, s.signature, message)) {
        good.add(s.key);
      }
    }
    return good.size;
  }

  // --- fetching -------------------------------------------------------------------------------

  // A refusal names the typed error the server gave (PROTOCOL §6), e.g. a log without a key.
  async function refused(url, r) {
    let reason = "";
    try {
      const body = await r.json();
      reason = ": " + body.error + " [" + body.code + "]";
    } catch (e) { /* not a typed error */ }
    return new Failure(url + " answered " + r.status + reason);
  }

  async function getJson(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!r.ok) throw await refused(url, r);
    return r.json();
  }

  async function getText(url) {
    const r = await fetch(url, { cache: "no-store" });
    if (!r.ok) throw await refused(url, r);
    return r.text();
  }

  function check(condition, reason) {
    if (!condition) throw new Failure(reason);
  }

  // --- the checks -----------------------------------------------------------------------------

  // What the reader set on /trust (trust.js), or null.
  function readerTrust() {
    try {
      return window.AlexandriaTrust ? window.AlexandriaTrust.read() : null;
    } catch (e) {
      return null;
    }
  }

  // The badge once every check held: whose pin it was checked against decides its colour.
  function settle(pin, trust, size, witnesses) {
    const cosigned = witnesses ? ", cosigned by " + witnesses.count + " of " + witnesses.whose : "";
    const logged = "included in the log's signed checkpoint of " + size + " entries" + cosigned;
    if (!trust || !trust.pin) {
      show("unpinned", "Checked against the pin this page states, " + pin + ": signed by its " +
           "author, certified up to that genesis, and " + logged + ". You have not set a pin " +
           "of your own, so this cannot tell whether it is the library you mean.");
      const link = document.createElement("a");
      link.href = "/trust";
      link.textContent = "Set the pin you trust";
      badge.append(" ", link, ".");
    } else if (trust.pin === pin) {
      show("ok", "Verified against your pin: signed by its author, certified up to your pinned " +
           "genesis, and " + logged + ".");
    } else {
      show("differs", "Not your pin: this page's library has genesis pin " + pin + ", but the " +
           "pin you trust is " + trust.pin + ". The record checks out against the page's own " +
           "pin only: this is another library than the one you pinned.");
    }
  }

  async function verify() {
    const rev = box.dataset.revision;
    const sequence = Number(box.dataset.sequence);
    const pin = box.dataset.pin;
    const trust = readerTrust();
    const origin = box.dataset.origin;
    const signatures = await ed25519Available();

    const [genesisDoc, signed, authority, note] = await Promise.all([
      getJson("/api/genesis"),
      getJson("/api/entries/" + rev),
      getJson("/api/authority"),
      getText("/api/log/checkpoint"),
    ]);

    // 1. genesis
    const genesis = genesisDoc.document.genesis;
    check(hex(await sha256(enc.encode(jcs(genesis)))) === pin, "the genesis does not hash to the pin");
    if (signatures) {
      const n = await rootSignatures(genesis, genesisDoc.document.signatures, genesis);
      check(n >= genesis.threshold, "the genesis has " + n + "/" + genesis.threshold + " valid root signatures");
    }
    step("the genesis hashes to the pin this page states" + (signatures ? " and carries its root signatures" : ""), true);

    // 2. record
    const record = signed.record;
    check(signed.id === rev, "the server returned another revision");
    check(hex(await sha256(enc.encode(jcs(record)))) === rev, "the record does not hash to its revision id");
    check(record.genesis === pin, "the record names another genesis");
    step("the record hashes to its revision id", true);

    // 3. author
    const worker = signed.signature.certificate;
    const wc = worker.certificate;
    check(wc.genesis === pin, "the worker certificate names another genesis");
    check(wc.actor === record.author, "the worker certificate is for another actor");
    check(wc.scopes.some((s) => (SCOPES[s] || []).includes(record.kind)), "no scope of the worker grants kind " + record.kind);
    check(worker.signatures.length === 1 && worker.signatures[0].key === wc.authority, "the worker certificate is not signed by its authority");
    if (signatures) {
      check(await ed25519Verify(wc.worker, signed.signature.proof, enc.encode(jcs(record))), "the author's signature (proof) is invalid");
      check(await ed25519Verify(wc.authority, worker.signatures[0].signature, enc.encode(jcs(wc))), "the worker certificate's signature is invalid");
      step("the author's worker key signed the record; its certificate is signed by the authority", true);
    }

    // 4. authority
    const ac = signed.admission.authority.certificate;
    check(ac.key === wc.authority, "the admission names another authority");
    check(ac.genesis === pin && ac.roles.includes("native-application"), "the authority certificate is not a native-application certificate of this genesis");
    if (signatures) {
      const n = await rootSignatures(ac, signed.admission.authority.signatures, genesis);
      check(n >= genesis.threshold, "the authority certificate has " + n + "/" + genesis.threshold + " valid root signatures");
      step("the authority certificate is signed by the root keys", true);
    }

    // 5. checkpoint
    const cp = parseNote(note);
    let witnesses = null;
    check(cp.origin === origin && cp.origin === genesis.origin, "the checkpoint is for another log");
    if (signatures) {
      let logKey = null;
      for (const item of authority.items) { // {sequence, type, admitted_at, document}
        const doc = item.document;
        const c = doc.certificate;
        if (item.type !== "certificate" || !c || !c.roles.includes("log") || c.genesis !== pin) continue;
        if (item.sequence > cp.size) continue; // a log key's certificate is in the tree it signs
        const id = (await sha256(concat(enc.encode(cp.origin + "\n"), Uint8Array.of(1), unhex(c.key)))).slice(0, 4);
        for (const s of cp.signatures) {
          if (s.name === cp.origin && equal(s.keyId, id)) {
            const n = await rootSignatures(c, doc.signatures, genesis);
            const key = await crypto.subtle.importKey("raw", unhex(c.key), { name: "Ed25519" }, false, ["verify"]);
            if (n >= genesis.threshold && await crypto.subtle.verify({ name: "Ed25519" }, key, s.signature, cp.text)) {
              logKey = c.key;
            }
          }
        }
      }
      check(logKey !== null, "the checkpoint is not signed by a root-certified log key");
      step("checkpoint of " + cp.size + " entries signed by log key " + logKey.slice(0, 12), true);
      witnesses = await witnessed(cp, trust);
    }
    check(sequence >= 1 && sequence <= cp.size, "the checkpoint (" + cp.size + " entries) does not cover entry " + sequence + " yet");

    // 6. leaf: recomputed from the signed record alone, its admission time included
    const leaf = await leafHash(leafData(signed));
    step("entry " + sequence + "'s leaf recomputed from this revision and its admission time", true);

    // 7. inclusion
    const proof = await getJson("/api/log/proof/inclusion?index=" + (sequence - 1) + "&size=" + cp.size);
    const root = await rootFromInclusion(sequence - 1, cp.size, leaf, proof.proof.map(unhex));
    check(equal(root, cp.root), "the inclusion proof does not lead to the checkpoint's root");
    step("the inclusion proof (leaf index " + (sequence - 1) + ") leads to the signed root", true);

    if (!signatures) {
      show("bad", "Not verified: " + ed25519 + ". Hashes and the Merkle inclusion check out, but no signature could be checked.");
      return;
    }
    settle(pin, trust, cp.size, witnesses);
  }

  // The pure parts, for tests that compare them with the server's Python (tests/api/test_browser.py).
  window.AlexandriaVerify = Object.freeze({ jcs, leafData, rootFromInclusion, parseNote, hex, unhex });

  if (!window.isSecureContext || !window.crypto || !crypto.subtle) {
    show("unavailable", "Cannot verify in this browser: WebCrypto is only available on HTTPS or on http://127.0.0.1 / localhost, and this page was served over plain HTTP from another host. Use `alexandria verify --entry` instead.");
    return;
  }
  show("pending", "Verifying…");
  verify().catch((e) => {
    const reason = e instanceof Failure ? e.message : "the check could not run (" + e.name + ": " + e.message + ")";
    step(reason, false);
    const trust = readerTrust();
    const against = trust && trust.pin ? (trust.pin === box.dataset.pin ? " (your pin)" :
      " (checked against the pin this page states, " + box.dataset.pin + "; yours is " + trust.pin + ")")
      : " (checked against the pin this page states, " + box.dataset.pin + ")";
    show("bad", "Not verified: " + reason + "." + against);
  });
})();
