// Alexandria: live search on the catalogue page.  The form works without script; with it,
// typing or changing a filter fetches the same server-rendered page (escaped by the server)
// and swaps in its results, keeping the address in step so that a reload shows the same list.
"use strict";

(function () {
  const form = document.querySelector("form.search");
  const results = document.getElementById("results");
  if (!form || !results) return;
  const section = results.closest("section");
  let timer = null;
  let generation = 0;

  function query() {
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v !== "") params.append(k, v);
    const text = params.toString();
    return text ? "/?" + text : "/";
  }

  async function refresh() {
    const url = query();
    const mine = ++generation;
    let html;
    let landed = null;
    try {
      const r = await fetch(url, { headers: { Accept: "text/html" } });
      if (r.redirected) landed = new URL(r.url).pathname;
      html = await r.text();
    } catch (e) {
      return; // offline: the form still submits normally
    }
    if (mine !== generation) return; // a newer query is on its way
    if (landed !== null) {
      // an id or a unique prefix of one: the server sent its page; offer it, and Enter
      // (submitting the form) goes there
      const doc = new DOMParser().parseFromString(html, "text/html");
      const heading = doc.querySelector("main h1");
      const p = document.createElement("p");
      p.className = "found-id";
      const a = document.createElement("a");
      a.href = landed;
      a.textContent = heading ? heading.textContent : landed;
      p.append("This id names ", a, " — press Enter to open it.");
      section.replaceChildren(p);
      return;
    }
    const doc = new DOMParser().parseFromString(html, "text/html");
    const fresh = doc.querySelector("main section") || doc.querySelector("main");
    if (!fresh) return;
    section.replaceChildren(...Array.from(fresh.childNodes, (n) => document.importNode(n, true)));
    history.replaceState(null, "", url);
  }

  function soon() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 250);
  }

  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
})();
