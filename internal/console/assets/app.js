// sandboxer console: theme switch and live updates (server-sent events).
// Everything from the server is put in as text (textContent), never as markup.
"use strict";

(function theme() {
  const root = document.documentElement;
  const saved = localStorage.getItem("sandboxer-theme");
  if (saved) root.dataset.theme = saved;
  document.addEventListener("DOMContentLoaded", () => {
    const b = document.getElementById("theme");
    if (!b) return;
    b.addEventListener("click", () => {
      const dark = root.dataset.theme ? root.dataset.theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
      root.dataset.theme = dark ? "light" : "dark";
      localStorage.setItem("sandboxer-theme", root.dataset.theme);
    });
  });
})();

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function live(on) {
  const l = document.getElementById("live");
  if (l) l.classList.toggle("on", on);
}

// The jobs list: replaced whole each time the server sends it.
function jobsList(table) {
  const body = table.tBodies[0];
  const seen = new Set(Array.from(body.rows).map((r) => r.dataset.id));
  const es = new EventSource(table.dataset.events);
  es.onopen = () => live(true);
  es.onerror = () => live(false);
  es.addEventListener("jobs", (ev) => {
    const rows = JSON.parse(ev.data) || [];
    const frag = document.createDocumentFragment();
    for (const j of rows) {
      const tr = el("tr");
      tr.dataset.id = j.id;
      if (!seen.has(j.id)) tr.className = "fresh";
      const a = el("a", j.short, "mono");
      a.href = "/ui/jobs/" + encodeURIComponent(j.id);
      const idCell = el("td"); idCell.append(a);
      const st = el("td"); st.append(el("span", j.status, "status s-" + j.status), " ", el("span", j.reason, "muted"));
      if (table.dataset.admin === "1") tr.append(el("td", j.tenant || ""));
      tr.append(idCell, st, el("td", j.kind), el("td", j.language), el("td", j.workspace),
        el("td", j.command, "cmd mono"), el("td", j.created, "muted"), el("td", j.took, "muted"));
      frag.append(tr);
    }
    if (rows.length === 0) {
      const tr = el("tr", null, "empty"); const td = el("td", "No jobs yet."); td.colSpan = 9; tr.append(td); frag.append(tr);
    }
    body.replaceChildren(frag);
    rows.forEach((j) => seen.add(j.id));
  });
}

function fill(dl, fields) {
  if (!dl) return;
  const frag = document.createDocumentFragment();
  for (const f of fields || []) frag.append(el("dt", f.Name), el("dd", f.Value));
  dl.replaceChildren(frag);
}

// A job page: output, record and screen as they change.
function jobPage(out) {
  const es = new EventSource(out.dataset.events);
  let follow = true;
  out.addEventListener("scroll", () => { follow = out.scrollTop + out.clientHeight >= out.scrollHeight - 8; });
  out.scrollTop = out.scrollHeight;
  es.addEventListener("output", (ev) => {
    for (const s of JSON.parse(ev.data) || []) out.append(el("span", s.t, s.c || ""));
    if (follow) out.scrollTop = out.scrollHeight;
  });
  es.addEventListener("job", (ev) => {
    const j = JSON.parse(ev.data);
    const st = document.getElementById("status");
    if (st) { st.textContent = j.status; st.className = "status s-" + j.status; }
    fill(document.getElementById("fields"), j.fields);
    fill(document.getElementById("usage"), j.usage);
    if (j.ended) { const k = document.getElementById("kill"); if (k) k.remove(); }
  });
  es.addEventListener("screen", (ev) => {
    const s = JSON.parse(ev.data);
    let scr = document.getElementById("screen");
    if (!scr) {
      const card = el("section", null, "card");
      card.append(el("h2", "Screen"));
      scr = el("pre", null, "term screen"); scr.id = "screen";
      card.append(scr);
      out.closest(".card").before(card);
    }
    scr.textContent = (s.lines || []).join("\n");
  });
  es.addEventListener("end", () => es.close());
  es.addEventListener("gone", () => es.close());
}

document.addEventListener("DOMContentLoaded", () => {
  const jobs = document.getElementById("jobs");
  if (jobs && jobs.dataset.events) jobsList(jobs);
  const out = document.getElementById("output");
  if (out && out.dataset.events) jobPage(out);
  for (const f of document.querySelectorAll("form#kill, form#delete")) {
    f.addEventListener("submit", (e) => { if (!confirm(f.id === "kill" ? "Kill this job?" : "Delete this workspace and its files?")) e.preventDefault(); });
  }
});
