// Alexandria: what the reader trusts — a genesis pin and, optionally, witness keys and a quorum —
// kept in this browser (localStorage, per site), never sent to the library.
//
// On every page it says in the footer whether the pin the page states is the reader's; on
// /trust it runs the form that sets and forgets them.  verify.js reads the same record through
// window.AlexandriaTrust to check the badge against the reader's pin and witnesses.
// Everything shown comes from textContent: nothing typed or served becomes markup.
"use strict";

(function () {
  const KEY = "alexandria.trust";
  const PIN = /^[0-9a-f]{64}$/;
  const VKEY = /^([^+\s]+)\+([0-9a-f]{8})\+([A-Za-z0-9+/]{43}=|[A-Za-z0-9+/]{44})$/;

  // A witness's verifier key, NAME+KEYID+BASE64(0x04 || 32-byte Ed25519 key) (docs/log.md),
  // or a sentence saying what is wrong with it.  The key id is checked by `keyIdMatches`.
  function parseVkey(text) {
    const m = VKEY.exec(text);
    if (!m) return "“" + text.slice(0, 80) + "” is not NAME+KEYID+BASE64KEY";
    let raw;
    try {
      raw = Uint8Array.from(atob(m[3]), (c) => c.charCodeAt(0));
    } catch (e) {
      return "the key of " + m[1] + " is not base64";
    }
    if (raw.length !== 33 || raw[0] !== 4) {
      return "the key of " + m[1] + " is not a cosignature/v1 key (type 4 and 32 bytes)";
    }
    return { name: m[1], keyId: m[2], publicKey: raw.slice(1), vkey: text };
  }

  // SHA-256(name "\n" 0x04 key)[:4] is the key id the vkey claims (C2SP signed-note).
  async function keyIdMatches(w) {
    const enc = new TextEncoder().encode(w.name + "\n");
    const data = new Uint8Array(enc.length + 33);
    data.set(enc); data[enc.length] = 4; data.set(w.publicKey, enc.length + 1);
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
    const id = Array.from(digest.slice(0, 4), (b) => b.toString(16).padStart(2, "0")).join("");
    return id === w.keyId;
  }

  // The stored record, checked again on every read: {pin, witnesses: [vkey], quorum}, or null
  // when nothing (or something this script did not write) is stored.
  function read() {
    let value;
    try {
      value = JSON.parse(window.localStorage.getItem(KEY) || "null");
    } catch (e) {
      return null;
    }
    if (!value || typeof value !== "object") return null;
    const pin = typeof value.pin === "string" && PIN.test(value.pin) ? value.pin : "";
    const witnesses = Array.isArray(value.witnesses)
      ? value.witnesses.filter((v) => typeof v === "string").map(parseVkey)
        .filter((w) => typeof w === "object")
      : [];
    let quorum = Number.isSafeInteger(value.quorum) ? value.quorum : witnesses.length;
    quorum = Math.min(Math.max(quorum, witnesses.length ? 1 : 0), witnesses.length);
    if (!pin && !witnesses.length) return null;
    return { pin, witnesses, quorum };
  }

  function save(pin, vkeys, quorum) {
    window.localStorage.setItem(KEY, JSON.stringify({ pin, witnesses: vkeys, quorum }));
  }

  function forget() {
    window.localStorage.removeItem(KEY);
  }

  function storage() {
    try {
      return !!window.localStorage;
    } catch (e) { // storage disabled for this site
      return false;
    }
  }

  window.AlexandriaTrust = Object.freeze({ read, parseVkey, keyIdMatches, PIN });

  // --- every page: is the pin this page states the reader's? ---------------------------------

  function footer() {
    const out = document.getElementById("reader-pin");
    const stated = document.getElementById("library-pin");
    if (!out || !stated) return;
    const mine = storage() ? read() : null;
    const pin = stated.textContent.trim();
    if (!mine || !mine.pin) {
      out.className = "reader-pin reader-pin-unset";
      out.textContent = "You have not set a pin of your own.";
    } else if (mine.pin === pin) {
      out.className = "reader-pin reader-pin-match";
      out.textContent = "✓ It is your pin.";
    } else {
      out.className = "reader-pin reader-pin-differs";
      out.textContent = "⚠ It is not your pin (" + mine.pin + ").";
    }
  }

  // --- /trust: the form -----------------------------------------------------------------------

  function form() {
    const f = document.getElementById("trust-form");
    if (!f) return;
    const status = document.getElementById("trust-status");
    const pinField = document.getElementById("trust-pin");
    const witnessField = document.getElementById("trust-witnesses");
    const quorumField = document.getElementById("trust-quorum");
    const current = document.getElementById("trust-current");
    const stated = document.getElementById("library-pin").textContent.trim();

    function say(text, ok) {
      status.className = ok ? "trust-status trust-ok" : "trust-status trust-error";
      status.textContent = text;
    }

    function describe() {
      const mine = read();
      current.textContent = "";
      const lines = !mine ? ["Nothing is set: badges check against the pin each page states."] : [
        mine.pin ? "Your pin: " + mine.pin + (mine.pin === stated ? " (this library's)"
                                                                  : " (not this library's)")
                 : "No pin of your own: badges check against the pin each page states.",
        mine.witnesses.length
          ? "Your witnesses: " + mine.witnesses.map((w) => w.name).join(", ") + "; at least " +
            mine.quorum + " must cosign each checkpoint."
          : "No witnesses of your own: badges check the witnesses the library names.",
      ];
      for (const line of lines) {
        const li = document.createElement("li");
        li.textContent = line;
        current.appendChild(li);
      }
    }

    if (!storage()) {
      say("This browser keeps no storage for this site, so it cannot remember a pin.", false);
      return;
    }
    document.getElementById("trust-needs-script").hidden = true;
    f.hidden = false;
    const mine = read();
    if (mine) {
      pinField.value = mine.pin;
      witnessField.value = mine.witnesses.map((w) => w.vkey).join("\n");
      quorumField.value = mine.witnesses.length ? String(mine.quorum) : "";
    }
    describe();

    document.getElementById("trust-stated").addEventListener("click", () => {
      pinField.value = stated;
      pinField.focus();
    });
    document.getElementById("trust-forget").addEventListener("click", () => {
      forget();
      pinField.value = witnessField.value = quorumField.value = "";
      describe();
      footer();
      say("Forgotten: badges check against the pin each page states.", true);
    });
    f.addEventListener("submit", async (event) => {
      event.preventDefault();
      const pin = pinField.value.trim().toLowerCase();
      if (pin && !PIN.test(pin)) {
        say("A pin is 64 hex characters (the SHA-256 of the genesis); nothing was saved.", false);
        pinField.focus();
        return;
      }
      const vkeys = witnessField.value.split("\n").map((s) => s.trim()).filter(Boolean);
      const witnesses = [];
      for (const vkey of vkeys) {
        const w = parseVkey(vkey);
        if (typeof w === "string") { say(w + "; nothing was saved.", false); return; }
        if (window.crypto && crypto.subtle && !(await keyIdMatches(w))) {
          say("the key id " + w.keyId + " is not the id of " + w.name + "'s key; nothing was saved.", false);
          return;
        }
        if (witnesses.some((o) => o.name === w.name)) {
          say("witness " + w.name + " is listed twice; nothing was saved.", false);
          return;
        }
        witnesses.push(w);
      }
      let quorum = witnesses.length;
      if (quorumField.value.trim()) {
        quorum = Number(quorumField.value);
        if (!Number.isSafeInteger(quorum) || quorum < 1 || quorum > witnesses.length) {
          say("the number of cosignatures must be between 1 and the number of witnesses (" +
              witnesses.length + "); nothing was saved.", false);
          quorumField.focus();
          return;
        }
      }
      if (!pin && !witnesses.length) {
        forget();
      } else {
        save(pin, witnesses.map((w) => w.vkey), quorum);
      }
      pinField.value = pin;
      describe();
      footer();
      say("Saved in this browser. Badges now check against " +
          (pin ? "your pin" : "the pin each page states") +
          (witnesses.length ? " and your " + witnesses.length + " witness" +
                              (witnesses.length > 1 ? "es" : "") : "") + ".", true);
    });
  }

  footer();
  form();
})();
