// theseus ui: the one-page app of `theseus ui`. The path says the page: `/` the runs (a page of
// `/api/runs` with the filters in the query string, refetched on `/api/events`' `changed`),
// `/runs/ID` one run (`/api/runs/ID`, its log over `/api/runs/ID/logs/stream`, cancel), and
// `/capacity` every host (`/api/capacity`). The element ids are the contract with the browser
// tests (contract of issue 29, "Page elements"). Plain ES2020, no framework, nothing fetched
// from outside (the CSP forbids it). Everything the API returns is untrusted text: the DOM is
// built with createElement and textContent only, never innerHTML; the token goes only in the
// X-Theseus-Token header of same-origin /api/ requests (EventSource, which cannot send headers,
// rides on the cookie the server set when the page was opened with ?token=).
"use strict";

const TOKEN = (document.querySelector('meta[name="theseus-token"]') || {}).content || "";
const PAGE_SIZE = 50;
const MAX_PAGE = 500; // the server's most rows a page (crates/ui/src/api.rs MAX_PAGE)
const LOG_CAP = 20000;
const STATES = ["running", "pending", "submitting", "failed", "preempted", "cancelled", "completed", "unknown"];
const TERMINAL = new Set(["completed", "failed", "cancelled", "preempted"]);

// ---- small helpers ----------------------------------------------------------------------

/** Makes an element: h("td", {class: "x", text: "y"}, child...). Strings become text nodes. */
function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v == null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

/** Fetches JSON from the same-origin API with the token header; throws an Error with the
 *  server's one-line `error` (and `.status`) when not 2xx. */
async function api(path, options = {}) {
  if (!path.startsWith("/api/")) throw new Error("not an API path: " + path);
  const headers = Object.assign({ Accept: "application/json", "X-Theseus-Token": TOKEN }, options.headers || {});
  let res;
  try {
    res = await fetch(path, Object.assign({}, options, { headers, credentials: "same-origin", cache: "no-store" }));
  } catch (e) {
    const err = new Error("theseus ui does not answer (" + e.message + "): is `theseus ui` still running?");
    err.status = 0;
    throw err;
  }
  let body = null;
  try {
    body = await res.json();
  } catch (_) {
    body = null;
  }
  if (!res.ok) {
    const err = new Error((body && typeof body.error === "string" && body.error) || res.status + " " + res.statusText);
    err.status = res.status;
    throw err;
  }
  return body;
}

function str(v) {
  return v == null ? "" : String(v);
}

/** "12s", "3m", "2h", "4d" since an RFC 3339 time. */
function age(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "?";
  const s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

function exactTime(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? str(iso) : new Date(t).toLocaleString() + " (" + iso + ")";
}

function badge(state) {
  const s = str(state) || "unknown";
  return h("span", { class: "badge st-" + (STATES.includes(s) ? s : "unknown"), text: s });
}

/** A number as text: whole numbers without a fraction (as core's `shares::show`). */
function num(v) {
  if (v == null) return "-";
  const n = Number(v) + 0;
  if (!Number.isFinite(n)) return str(v);
  return Number.isInteger(n) ? String(n) : n.toFixed(2);
}

// Terminal control sequences (colours, cursor moves, titles) that programs print for a
// terminal: a terminal shows none of them, nor shall the page.
// eslint-disable-next-line no-control-regex
const CONTROL = /\x1b\[[0-9;:?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]/g;

/** A line as a terminal shows it: without control sequences, and only what follows its last
 *  carriage return (a progress bar redrawn in place shows its last state). */
function visible(text) {
  let t = str(text);
  if (t.indexOf("\x1b") >= 0 || /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/.test(t)) t = t.replace(CONTROL, "");
  const cr = t.replace(/\r+$/, "");
  const at = cr.lastIndexOf("\r");
  return at >= 0 ? cr.slice(at + 1) : cr;
}

/** The line as the CLI prints it (crates/cli/src/output.rs `print_line`), as a terminal shows it. */
function lineText(line) {
  const text = visible(line.text);
  if (line.source != null) return "[" + line.source + "] " + text;
  if (line.rank != null) return "[rank-" + line.rank + "] " + text;
  return text;
}

/** A W&B run URL in `text` (https, wandb.ai only), or null. */
function wandbUrl(text) {
  const m = /https:\/\/(?:[a-z0-9-]+\.)*wandb\.ai\/[^\s"'<>`]+/i.exec(text);
  if (!m) return null;
  const raw = m[0].replace(/[).,;:!?\]]+$/, "");
  try {
    const u = new URL(raw);
    if (u.protocol !== "https:") return null;
    if (u.hostname !== "wandb.ai" && !u.hostname.endsWith(".wandb.ai")) return null;
    return u.href;
  } catch (_) {
    return null;
  }
}

async function copyText(text, button, source) {
  let ok = false;
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      ok = true;
    }
  } catch (_) {
    ok = false;
  }
  if (!ok) {
    const area = h("textarea", { class: "offscreen", readonly: true });
    area.value = text;
    document.body.append(area);
    area.select();
    try {
      ok = document.execCommand("copy");
    } catch (_) {
      ok = false;
    }
    area.remove();
  }
  if (!ok && source) {
    // The browser refused: select the text for Ctrl+C.
    const range = document.createRange();
    range.selectNodeContents(source);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
  if (button) {
    const was = button.textContent;
    button.textContent = ok ? "copied" : "press Ctrl+C";
    setTimeout(() => (button.textContent = was), 1500);
  }
}

const shownKeys = new WeakMap();

/** Whether `value` differs from what `el` showed last (and remembers it). */
function changed(el, value) {
  const key = JSON.stringify(value === undefined ? null : value);
  if (shownKeys.get(el) === key) return false;
  shownKeys.set(el, key);
  return true;
}

function setReady() {
  document.body.dataset.ready = "1";
}

function main() {
  return document.getElementById("main");
}

function showError(where, message) {
  where.replaceChildren(h("div", { class: "banner error", role: "alert", text: message }));
}

// ---- the event stream (/api/events) and the live dot -------------------------------------

const live = {
  source: null,
  handlers: [],
  connected: false,
  start(onChanged) {
    if (onChanged) this.handlers.push(onChanged);
    if (this.source) return;
    this.connect();
    // While disconnected, a slow poll keeps the page roughly current.
    setInterval(() => {
      if (!this.connected) for (const f of this.handlers) f(null);
    }, 15000);
  },
  connect() {
    // EventSource cannot send headers: it is authorised by the cookie `theseus ui` set when the
    // page was opened with ?token=.
    const es = new EventSource("/api/events");
    this.source = es;
    es.addEventListener("open", () => this.set(true));
    es.addEventListener("error", () => {
      this.set(es.readyState === EventSource.OPEN);
      // The browser retries a dropped connection itself, but gives up on an answer that is not
      // a stream (a 401 after `theseus ui` restarted, a 502 from a proxy): try again later.
      if (es.readyState === EventSource.CLOSED) {
        setTimeout(() => {
          if (this.source === es) this.connect();
        }, 10000);
      }
    });
    es.addEventListener("changed", (e) => {
      this.set(true);
      let mark = null;
      try {
        mark = JSON.parse(e.data).mark;
      } catch (_) {
        mark = e.data;
      }
      for (const f of this.handlers) f(mark);
    });
  },
  set(on) {
    this.connected = on;
    const el = document.getElementById("live");
    if (!el) return;
    el.classList.toggle("on", on);
    el.classList.toggle("off", !on);
    el.title = on ? "live: connected to theseus ui's event stream" : "not connected: reconnecting (the page polls meanwhile)";
    el.querySelector(".live-text").textContent = on ? "live" : "offline";
  },
};

// ---- the runs page ----------------------------------------------------------------------

function runsQuery() {
  const p = new URLSearchParams(location.search);
  const q = {};
  for (const k of ["project", "group", "host", "state"]) q[k] = p.get(k) || "";
  q.offset = Math.max(0, parseInt(p.get("offset") || "0", 10) || 0);
  q.limit = Math.min(MAX_PAGE, Math.max(1, parseInt(p.get("limit") || "", 10) || PAGE_SIZE));
  return q;
}

function runsSearch(q) {
  const p = new URLSearchParams();
  for (const k of ["project", "group", "host", "state"]) if (q[k]) p.set(k, q[k]);
  if (q.offset) p.set("offset", String(q.offset));
  if (q.limit && q.limit !== PAGE_SIZE) p.set("limit", String(q.limit));
  const s = p.toString();
  return s ? "?" + s : "";
}

function runsPage() {
  document.title = "runs · theseus";
  // `#counts` holds one card per state ([data-state]); the "all" card sits beside it.
  const card = (s, data) => h("button", { type: "button", class: "count-card st-" + s, dataset: data }, h("span", { class: "count", text: "–" }), h("span", { class: "label", text: s }));
  const counts = h("div", { id: "counts" }, STATES.map((s) => card(s, { state: s })));
  const bar = h("div", { class: "counts", role: "group", "aria-label": "runs per state (click to filter)" }, card("all", { filter: "all" }), counts);
  const sel = (id, label) =>
    h("label", { class: "filter" }, h("span", { text: label }), h("select", { id }, h("option", { value: "", text: "all" })));
  const filters = h(
    "div",
    { class: "filters" },
    sel("filter-project", "project"),
    sel("filter-group", "group"),
    sel("filter-host", "host"),
    sel("filter-state", "state"),
    h("span", { class: "spacer" }),
    h("span", { id: "refreshed", class: "muted" }),
  );
  const stateSel = filters.querySelector("#filter-state");
  for (const s of STATES) stateSel.append(h("option", { value: s, text: s }));
  const table = h(
    "table",
    { id: "runs", class: "grid runs" },
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        h("th", { text: "name" }),
        h("th", { class: "id", text: "run id" }),
        h("th", { text: "state" }),
        h("th", { class: "pg", text: "project / group" }),
        h("th", { text: "host" }),
        h("th", { text: "chips" }),
        h("th", { class: "num", text: "age" }),
        h("th", { text: "reason" }),
      ),
    ),
    h("tbody"),
  );
  const pager = h(
    "div",
    { class: "pager" },
    h("button", { id: "prev", type: "button", text: "‹ newer" }),
    h("span", { id: "page-info", class: "muted", text: "" }),
    h("button", { id: "next", type: "button", text: "older ›" }),
  );
  main().replaceChildren(
    bar,
    filters,
    h("div", { id: "notice" }),
    h("div", { class: "table-wrap" }, table),
    h("p", { id: "empty", class: "empty", hidden: true }),
    pager,
  );

  const view = new RunsView(table.tBodies[0]);
  let q = runsQuery();
  let inflight = false;
  let again = false;
  let first = true;

  const go = (next, push = true) => {
    q = next;
    const url = location.pathname + runsSearch(q);
    if (push) history.pushState(null, "", url);
    load();
  };

  async function load() {
    if (inflight) {
      again = true;
      return;
    }
    inflight = true;
    const asked = runsSearch(q);
    const p = new URLSearchParams({ offset: String(q.offset), limit: String(q.limit) });
    for (const k of ["project", "group", "host", "state"]) p.set(k, q[k]);
    try {
      const page = await api("/api/runs?" + p.toString());
      // The filters changed while it was asked: the next load renders.
      if (asked === runsSearch(q)) render(page);
    } catch (e) {
      document.getElementById("notice").replaceChildren(h("div", { class: "banner error", role: "alert", text: e.message }));
      if (first) setReady();
    } finally {
      inflight = false;
      if (again) {
        again = false;
        load();
      }
    }
  }

  function render(page) {
    const t0 = performance.now();
    // Paged past the end (runs were removed): go to the last page.
    if (page.runs.length === 0 && page.total > 0 && q.offset > 0) {
      go(Object.assign({}, q, { offset: Math.max(0, Math.floor((page.total - 1) / q.limit) * q.limit) }), false);
      history.replaceState(null, "", location.pathname + runsSearch(q));
      return;
    }
    renderCounts(page.counts || {});
    const running = Number((page.counts || {}).running || 0);
    document.title = (running ? running + " running · " : "") + "runs · theseus";
    for (const k of ["project", "group", "host"]) fillSelect(document.getElementById("filter-" + k), (page.facets || {})[k] || [], q[k]);
    stateSel.value = q.state;
    renderNotice(page);
    view.update(page.runs || []);
    const empty = document.getElementById("empty");
    empty.hidden = page.runs.length > 0;
    const filtered = q.project || q.group || q.host || q.state;
    if (!filtered) empty.textContent = "No runs in the ledger yet. Submit one with `theseus submit NAME experiment.yaml`.";
    else empty.replaceChildren("No runs match these filters. ", h("a", { href: location.pathname, id: "clear-filters", text: "Show every run" }));
    const from = page.total === 0 ? 0 : page.offset + 1;
    const to = page.offset + page.runs.length;
    document.getElementById("page-info").textContent = page.total === 0 ? "0 of 0" : from + "–" + to + " of " + page.total;
    document.getElementById("prev").disabled = page.offset === 0;
    document.getElementById("next").disabled = to >= page.total;
    performance.measure("runs-render", { start: t0, end: performance.now() });
    if (first) {
      first = false;
      performance.mark("runs-rendered");
      setReady();
    }
  }

  function renderCounts(c) {
    let total = 0;
    for (const s of STATES) total += Number(c[s] || 0);
    for (const el of bar.querySelectorAll(".count-card")) {
      const s = el.dataset.state || "all";
      const n = s === "all" ? total : Number(c[s] || 0);
      el.querySelector(".count").textContent = String(n);
      el.classList.toggle("zero", n === 0);
      const active = s === "all" ? !q.state : q.state === s;
      el.classList.toggle("active", active);
      el.setAttribute("aria-pressed", active ? "true" : "false");
      el.title = s === "all" ? "show every state" : active ? "showing " + s + " runs: click to show all" : "show only " + s + " runs";
    }
  }

  function renderNotice(page) {
    const notice = document.getElementById("notice");
    const hosts = Object.entries(page.unanswered || {});
    notice.replaceChildren(
      ...hosts.map(([host, why]) =>
        h("div", { class: "banner warn" }, h("b", { text: host }), " did not answer the last refresh: ", why, " (its rows show their last known state)"),
      ),
    );
    const r = document.getElementById("refreshed");
    if (page.refreshed_at) {
      r.dataset.at = page.refreshed_at;
      r.textContent = "live states refreshed " + age(page.refreshed_at) + " ago";
      r.title = exactTime(page.refreshed_at);
    } else {
      r.textContent = "";
    }
  }

  // A click anywhere on a row opens the run (not when selecting text or on a link).
  table.tBodies[0].addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-run-id]");
    if (!tr || e.target.closest("a") || String(window.getSelection() || "") !== "") return;
    const link = tr.querySelector("td.name a");
    if (link) link.click();
  });
  bar.addEventListener("click", (e) => {
    const el = e.target.closest(".count-card");
    if (!el) return;
    const s = el.dataset.state || "all";
    const state = s === "all" || q.state === s ? "" : s;
    go(Object.assign({}, q, { state, offset: 0 }));
  });
  for (const k of ["project", "group", "host", "state"]) {
    document.getElementById("filter-" + k).addEventListener("change", (e) => {
      go(Object.assign({}, q, { [k]: e.target.value, offset: 0 }));
    });
  }
  const page = (offset) => {
    go(Object.assign({}, q, { offset }));
    if (table.getBoundingClientRect().top < 0) table.scrollIntoView({ block: "start" });
  };
  document.getElementById("prev").addEventListener("click", () => page(Math.max(0, q.offset - q.limit)));
  document.getElementById("next").addEventListener("click", () => page(q.offset + q.limit));
  window.addEventListener("popstate", () => {
    q = runsQuery();
    load();
  });
  // Ages move on: refresh their text (only the cells whose text changes are touched).
  setInterval(() => {
    view.tickAges();
    const r = document.getElementById("refreshed");
    if (r && r.dataset.at) r.textContent = "live states refreshed " + age(r.dataset.at) + " ago";
  }, 30000);

  live.start(() => load());
  load();
}

function fillSelect(select, values, current) {
  const want = values.slice();
  if (current && !want.includes(current)) want.push(current);
  const have = Array.from(select.options)
    .slice(1)
    .map((o) => o.value);
  if (have.length !== want.length || have.some((v, i) => v !== want[i])) {
    select.replaceChildren(h("option", { value: "", text: "all" }), ...want.map((v) => h("option", { value: v, text: v })));
  }
  select.value = current;
}

/** The rows of the runs table, kept by run id: a refetch touches only rows that changed and
 *  moves rows only when the order changed, so the scroll position and selection stay. */
class RunsView {
  constructor(tbody) {
    this.tbody = tbody;
    this.rows = new Map(); // run id -> {tr, key, submitted}
  }

  update(runs) {
    const seen = new Set();
    let cursor = this.tbody.firstElementChild;
    for (const run of runs) {
      const id = str(run.identity && run.identity.run_id);
      if (!id || seen.has(id)) continue;
      seen.add(id);
      // `updated_at` moves at every refresh round and is not shown: it does not make a change.
      const { updated_at: _, ...shown } = run;
      const key = JSON.stringify(shown);
      let row = this.rows.get(id);
      if (!row) {
        row = { tr: h("tr", { dataset: { runId: id } }), key: null, submitted: run.submitted_at };
        this.rows.set(id, row);
      }
      if (row.key !== key) {
        this.fill(row.tr, run);
        row.key = key;
        row.submitted = run.submitted_at;
      }
      if (row.tr !== cursor) this.tbody.insertBefore(row.tr, cursor);
      else cursor = cursor.nextElementSibling;
    }
    for (const [id, row] of this.rows) {
      if (!seen.has(id)) {
        row.tr.remove();
        this.rows.delete(id);
      }
    }
  }

  fill(tr, run) {
    const ident = run.identity || {};
    const id = str(ident.run_id);
    const state = str(run.state);
    // One line per row: the notes are cut to the cell's width (ellipsis), their whole text in
    // the cell's title and on the run's page.
    const reason = [];
    const whole = [];
    if (run.unanswered) {
      reason.push(h("span", { class: "unanswered", text: "host did not answer: " + run.unanswered }));
      whole.push("host did not answer: " + run.unanswered);
    }
    if (run.message) {
      if (reason.length) reason.push(h("span", { class: "muted", text: " · " }));
      reason.push(h("span", { text: str(run.message) }));
      whole.push(str(run.message));
    }
    if (state === "failed" && run.exit_code != null && !run.message) reason.push(h("span", { text: "exit code " + run.exit_code }));
    const kind = run.kind === "repl" ? h("span", { class: "tag", text: "repl" }) : null;
    tr.className = "st-row-" + state;
    tr.replaceChildren(
      h("td", { class: "name" }, h("a", { href: "/runs/" + encodeURIComponent(id), text: str(ident.name) || id }), kind),
      h("td", { class: "id mono", text: id }),
      h("td", { class: "state" }, badge(state)),
      h("td", { class: "pg" }, h("span", { text: str(ident.project) }), h("span", { class: "muted", text: " / " }), h("span", { text: str(ident.group) })),
      h("td", { class: "host", title: run.handle && run.handle.kind ? "a " + run.handle.kind + " host" : null, text: str(run.host) }),
      h("td", { class: "chips mono", text: str(run.chips) }),
      h("td", { class: "age num", title: exactTime(run.submitted_at), text: age(run.submitted_at) }),
      h("td", { class: "reason", title: whole.length ? whole.join("\n") : null }, h("div", { class: "line" }, reason)),
    );
  }

  tickAges() {
    const now = Date.now();
    for (const row of this.rows.values()) {
      const cell = row.tr.querySelector("td.age");
      const text = age(row.submitted, now);
      if (cell && cell.textContent !== text) cell.textContent = text;
    }
  }
}

// ---- the run page -----------------------------------------------------------------------

function runPage(id) {
  document.title = id + " · theseus";
  const logBox = h("div", { id: "log", class: "log mono", role: "log", "aria-live": "off", tabindex: "0" });
  const layout = h(
    "div",
    { class: "run" },
    h(
      "div",
      { class: "run-head" },
      h("div", null, h("a", { class: "back", href: "/", text: "‹ runs" })),
      h("h1", null, h("span", { id: "run-name", text: id }), " ", h("span", { id: "run-state", class: "badge st-unknown", text: "…" })),
      h("div", { id: "run-message", class: "message" }),
      h("div", { class: "actions" }, h("button", { id: "cancel-button", type: "button", class: "danger", disabled: true, text: "Cancel run" }), h("span", { id: "action-result", role: "status" })),
    ),
    h("div", { id: "status-error" }),
    h(
      "div",
      { class: "run-body" },
      h(
        "div",
        { class: "run-main" },
        h("section", { id: "ranks-section", class: "card" }, h("h2", { text: "Ranks" }), h("table", { id: "ranks", class: "grid" }, h("thead", null, h("tr", null, ["rank", "state", "location", "exit", "restarts"].map((t) => h("th", { class: t === "state" || t === "location" ? null : "num", text: t })))), h("tbody"))),
        h(
          "section",
          { class: "card log-card" },
          h(
            "div",
            { class: "card-head" },
            h("h2", { text: "Log" }),
            h("span", { id: "log-count", class: "muted" }),
            h("select", { id: "log-filter", class: "small", hidden: true, title: "show the lines of one rank only" }),
            h("span", { class: "spacer" }),
            h("button", { id: "log-follow", type: "button", class: "small", hidden: true, title: "scroll to the newest line and keep following", text: "↓ follow" }),
            h("a", { id: "wandb-link", class: "wandb", hidden: true, target: "_blank", rel: "noopener noreferrer", text: "W&B run ↗" }),
            h("a", { id: "log-download", href: "/api/runs/" + encodeURIComponent(id) + "/logs", download: id + "-logs.json", text: "download the whole log" }),
          ),
          h("div", { id: "log-dropped", class: "muted small", hidden: true }),
          logBox,
          h("div", { id: "log-end", hidden: true }),
        ),
        h("section", { id: "batch-search", class: "card", hidden: true }),
      ),
      h(
        "aside",
        { class: "run-side" },
        h("section", { class: "card" }, h("h2", { text: "Facts" }), h("dl", { id: "facts", class: "facts" })),
        h("section", { class: "card" }, h("h2", { text: "Commands" }), h("div", { id: "commands", class: "commands" })),
        h("section", { id: "checkpoints-section", class: "card" }, h("h2", { text: "Checkpoints" }), h("div", { id: "checkpoints-body" })),
        h("section", { class: "card" }, h("h2", { text: "Metadata" }), h("div", { id: "metadata" }), h("p", { id: "files-note", class: "muted", hidden: true })),
      ),
    ),
  );
  const dialog = h(
    "dialog",
    { id: "confirm-cancel" },
    h("form", { method: "dialog" }, h("p", { id: "confirm-cancel-text" }, "Cancel run ", h("b", { class: "mono", text: id }), "? Its processes are stopped; this cannot be undone."), h("div", { class: "dialog-actions" }, h("button", { id: "confirm-cancel-no", type: "button", text: "Keep it running" }), h("button", { id: "confirm-cancel-yes", type: "button", class: "danger", text: "Cancel the run" }))),
  );
  main().replaceChildren(layout, dialog);

  const state = { detail: null, over: false, gone: false, timer: null, loading: null };
  const log = new LogView(logBox, id);
  document.getElementById("log-filter").addEventListener("change", (e) => log.showOnly(e.target.value));
  const follow = document.getElementById("log-follow");
  logBox.addEventListener("scroll", () => (follow.hidden = logBox.scrollHeight - logBox.scrollTop - logBox.clientHeight < 8), { passive: true });
  follow.addEventListener("click", () => {
    logBox.scrollTop = logBox.scrollHeight;
    follow.hidden = true;
  });

  // One refresh at a time: a refresh asked while one is in flight joins it.
  function refresh() {
    if (state.gone) return Promise.resolve(null);
    if (!state.loading) state.loading = fetchDetail().finally(() => (state.loading = null));
    return state.loading;
  }

  async function fetchDetail() {
    try {
      const d = await api("/api/runs/" + encodeURIComponent(id));
      renderDetail(d);
      return d;
    } catch (e) {
      if (e.status === 404) {
        state.gone = true;
        if (state.timer) clearInterval(state.timer);
        log.close();
        notFound(id, e.message);
      } else {
        document.getElementById("status-error").replaceChildren(h("div", { class: "banner error", role: "alert", text: e.message }));
      }
      setReady();
      return null;
    }
  }

  function renderDetail(d) {
    state.detail = d;
    document.getElementById("status-error").replaceChildren();
    const run = d.run || {};
    const ident = run.identity || {};
    const st = (d.status && d.status.state) || run.state || "unknown";
    state.over = TERMINAL.has(st);
    document.title = str(ident.name) + " · " + st + " · theseus";
    document.getElementById("run-name").textContent = str(ident.name) || id;
    const stEl = document.getElementById("run-state");
    stEl.textContent = st;
    stEl.className = "badge st-" + (STATES.includes(st) ? st : "unknown");
    const msg = (d.status && d.status.message) || run.message || "";
    const msgEl = document.getElementById("run-message");
    msgEl.className = "message msg-" + st;
    msgEl.replaceChildren(msg ? h("span", { text: msg }) : "", run.unanswered ? h("div", { class: "unanswered", text: "host did not answer: " + run.unanswered }) : "");
    if (d.status_error) document.getElementById("status-error").replaceChildren(h("div", { class: "banner warn", text: "could not ask the host: " + d.status_error + " (showing the last known state)" }));
    document.getElementById("cancel-button").disabled = state.over;
    // A section is rebuilt only when what it shows changed (a refresh every 5 s keeps
    // selections and hovers).
    const facts = document.getElementById("facts");
    if (changed(facts, [d.run, d.status && [d.status.exit_code, d.status.attempt], d.resume, st, age(run.submitted_at)])) renderFacts(d, st);
    const ranks = document.getElementById("ranks");
    if (changed(ranks, [d.status && d.status.ranks, !!d.status])) renderRanks(d);
    const batch = document.getElementById("batch-search");
    if (changed(batch, d.batch_search)) renderBatch(d.batch_search);
    const cps = document.getElementById("checkpoints-body");
    if (changed(cps, [d.checkpoints, Math.floor(Date.now() / 60000)])) renderCheckpoints(d.checkpoints);
    renderMetadata(d.metadata, d.files_note);
    renderCommands(d.commands || {});
    if (state.over && state.timer) {
      clearInterval(state.timer);
      state.timer = null;
    }
    // An ended run's files are read from its cluster in the background: ask again shortly.
    if (d.files_pending && !state.filesTimer) {
      state.filesTimer = setTimeout(() => {
        state.filesTimer = null;
        refresh();
      }, 2000);
    }
    setReady();
  }

  function renderFacts(d, st) {
    const run = d.run || {};
    const ident = run.identity || {};
    const status = d.status || {};
    const rows = [
      ["run id", h("span", { class: "mono", text: str(ident.run_id) })],
      ["project", str(ident.project)],
      ["group", str(ident.group)],
      ["host", h("span", null, str(run.host), run.handle && run.handle.kind && run.handle.kind !== run.host ? h("span", { class: "muted", text: " (" + run.handle.kind + ")" }) : "")],
      ["backend id", run.handle ? h("span", { class: "mono", text: str(run.handle.id) }) : null],
      ["chips", run.chips ? h("span", { class: "mono", text: run.chips }) : "—"],
      ["kind", str(run.kind)],
      ["submitted", h("span", { title: exactTime(run.submitted_at), text: age(run.submitted_at) + " ago" })],
      ["exit code", status.exit_code != null ? String(status.exit_code) : run.exit_code != null ? String(run.exit_code) : TERMINAL.has(st) ? "?" : "—"],
      ["attempt", status.attempt != null ? String(status.attempt) : "—"],
      ["resume", describeResume(d.resume)],
    ];
    const dl = document.getElementById("facts");
    dl.replaceChildren(...rows.filter(([, v]) => v != null).flatMap(([k, v]) => [h("dt", { text: k }), h("dd", null, v)]));
  }

  function renderRanks(d) {
    const tbody = document.querySelector("#ranks tbody");
    const ranks = (d.status && d.status.ranks) || [];
    if (ranks.length === 0) {
      tbody.replaceChildren(h("tr", { class: "none" }, h("td", { colspan: "5", class: "muted", text: !d.status ? "unknown: the host did not answer" : TERMINAL.has(d.status.state) ? "no per-rank state: the host keeps none for this ended run" : "no per-rank state from this host yet" })));
      return;
    }
    tbody.replaceChildren(
      ...ranks.map((r) =>
        h(
          "tr",
          { dataset: { rank: String(r.rank) } },
          h("td", { class: "rank num", text: String(r.rank) }),
          h("td", { class: "state" }, badge(r.state)),
          h("td", { class: "location mono", text: str(r.location) }),
          h("td", { class: "exit num", text: r.exit_code != null ? String(r.exit_code) : "" }),
          h("td", { class: "restarts num", text: r.restarts != null ? String(r.restarts) : "" }),
        ),
      ),
    );
  }

  function renderBatch(doc) {
    const sec = document.getElementById("batch-search");
    if (!doc || typeof doc !== "object" || !Array.isArray(doc.probes)) {
      sec.hidden = true;
      return;
    }
    sec.hidden = false;
    const chosen = doc.chosen != null ? "chosen size " + doc.chosen : "no size chosen yet";
    sec.replaceChildren(
      h("h2", { text: "Batch-size search" }),
      h("p", null, "phase ", h("b", { text: str(doc.phase || "scan") }), ", ", chosen, doc.reused ? " (chosen by an earlier start of this run)" : ""),
      h(
        "table",
        { id: "probes", class: "grid" },
        h("thead", null, h("tr", null, h("th", { class: "num", text: "size" }), h("th", { text: "outcome" }), h("th", { class: "num", text: "seconds" }))),
        h(
          "tbody",
          null,
          doc.probes.map((p) =>
            h(
              "tr",
              { dataset: { size: str(p.size) }, class: p.size === doc.chosen ? "latest" : null },
              h("td", { class: "num", text: str(p.size) }),
              h("td", { text: str(p.outcome) }),
              h("td", { class: "num", text: p.seconds != null ? Number(p.seconds).toFixed(0) : "—" }),
            ),
          ),
        ),
      ),
    );
  }

  function renderCheckpoints(doc) {
    const body = document.getElementById("checkpoints-body");
    if (!doc || typeof doc !== "object") {
      body.replaceChildren(h("p", { class: "muted", text: "none recorded" }));
      return;
    }
    const list = Array.isArray(doc.checkpoints) ? doc.checkpoints : [];
    const latest = doc.latest == null ? null : str(doc.latest);
    const isLatest = (name) => latest != null && (latest === name || latest.endsWith("/" + name));
    body.replaceChildren(
      h("div", { class: "muted small" }, "in ", h("span", { class: "mono", text: str(doc.dir) }), doc.written_at ? h("span", { title: exactTime(doc.written_at), text: " · written " + age(doc.written_at) + " ago" }) : ""),
      list.length === 0
        ? h("p", { class: "muted", text: "no checkpoint yet" })
        : h(
            "table",
            { id: "checkpoints", class: "grid" },
            h("thead", null, h("tr", null, h("th", { text: "name" }), h("th", { class: "num", text: "modified" }))),
            h(
              "tbody",
              null,
              list.map((c) =>
                h(
                  "tr",
                  { dataset: { checkpoint: str(c.name) }, class: isLatest(str(c.name)) ? "latest" : null },
                  h("td", { class: "mono" }, str(c.name), isLatest(str(c.name)) ? h("span", { class: "tag latest-tag", text: "latest" }) : ""),
                  h("td", { class: "num", title: exactTime(c.modified), text: age(c.modified) + " ago" }),
                ),
              ),
            ),
          ),
    );
  }

  function renderMetadata(doc, note) {
    const box = document.getElementById("metadata");
    const text = doc == null ? null : JSON.stringify(doc, null, 2);
    const old = box.querySelector("pre");
    if (text == null) {
      box.replaceChildren(note ? "" : h("p", { class: "muted", text: "none recorded" }));
    } else if (!old || old.textContent !== text) {
      const open = box.querySelector("details") ? box.querySelector("details").open : true;
      box.replaceChildren(h("details", { open }, h("summary", { text: "metadata.json" }), h("pre", { class: "mono json", text })));
    }
    const n = document.getElementById("files-note");
    n.hidden = !note;
    n.textContent = str(note);
    document.getElementById("checkpoints-section").classList.toggle("dim", !!note);
  }

  function renderCommands(c) {
    const box = document.getElementById("commands");
    const key = JSON.stringify(c);
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    box.replaceChildren(
      ...["status", "logs", "shell", "forward", "cancel"]
        .filter((k) => c[k])
        .map((k) => {
          const btn = h("button", { type: "button", class: "copy", title: "copy to the clipboard", text: "copy" });
          const code = h("code", { class: "mono", dataset: { command: k }, text: c[k] });
          btn.addEventListener("click", () => copyText(c[k], btn, code));
          return h("div", { class: "command" }, code, btn);
        }),
    );
  }

  // Cancel, through the in-page dialog.
  const cancelBtn = document.getElementById("cancel-button");
  cancelBtn.addEventListener("click", () => {
    const run = (state.detail && state.detail.run) || {};
    const ident = run.identity || {};
    document
      .getElementById("confirm-cancel-text")
      .replaceChildren("Cancel ", h("b", { text: str(ident.name) || id }), " ", h("span", { class: "mono muted", text: "(" + (str(ident.run_id) || id) + ")" }), " on ", h("b", { text: str(run.host) }), "? Its processes are stopped; this cannot be undone.");
    if (typeof dialog.showModal === "function") dialog.showModal();
    else dialog.setAttribute("open", "");
  });
  const closeDialog = () => (typeof dialog.close === "function" ? dialog.close() : dialog.removeAttribute("open"));
  document.getElementById("confirm-cancel-no").addEventListener("click", closeDialog);
  document.getElementById("confirm-cancel-yes").addEventListener("click", async () => {
    closeDialog();
    const result = document.getElementById("action-result");
    cancelBtn.disabled = true;
    result.className = "muted";
    result.textContent = "cancelling…";
    try {
      const d = await api("/api/runs/" + encodeURIComponent(id) + "/cancel", { method: "POST" });
      renderDetail(d);
      const st = (d.status && d.status.state) || (d.run && d.run.state) || "unknown";
      result.className = "ok";
      result.textContent = "Cancelled: the run is now " + st + ".";
    } catch (e) {
      result.className = "error";
      result.textContent = "Could not cancel: " + e.message;
      cancelBtn.disabled = state.over;
    }
    // Ask again after any refresh that started before the cancel.
    Promise.resolve(state.loading).then(() => refresh());
  });

  live.start(() => {
    if (!state.over && !state.gone) refresh();
  });
  // The log opens at once: the run's live state may take its host a while to tell.
  refresh().then((d) => {
    if (d && !state.over && !state.gone) state.timer = setInterval(refresh, 5000);
  });
  log.open(() => refresh());
}

function describeResume(r) {
  if (!r || typeof r !== "object") return "—";
  if (r.restore) return h("span", null, "--restore ", h("span", { class: "mono", text: str(r.restore) }));
  if (r.fresh) return "--fresh (the latest marker is ignored)";
  const keys = Object.keys(r);
  return keys.length ? h("span", { class: "mono", text: JSON.stringify(r) }) : "from the latest checkpoint, if any";
}

function notFound(id, why) {
  document.title = "no such run · theseus";
  main().replaceChildren(
    h(
      "div",
      { class: "notfound" },
      h("h1", { id: "not-found", text: "no such run" }),
      h("p", { title: str(why) }, "The ledger has no run ", h("b", { class: "mono", text: id }), " (by run id or name)."),
      h("p", null, h("a", { href: "/", text: "‹ back to the runs" })),
    ),
  );
}

/** The log of a run: lines from the SSE stream, appended in batches, capped in the DOM. */
class LogView {
  constructor(box, id) {
    this.box = box;
    this.id = id;
    this.pending = [];
    this.scheduled = false;
    this.shown = 0; // .log-line elements in the DOM
    this.dropped = 0;
    this.received = 0; // lines received over all connections
    this.thisConn = 0;
    this.skip = 0;
    this.ended = false;
    this.es = null;
    this.wandb = null;
    this.backoff = 5;
    this.sources = new Set(); // the prefixes seen, offered by #log-filter
    this.only = null; // the prefix shown, null: all
  }

  /** Offers `src` in the filter (shown once lines come from two places). */
  addSource(src) {
    this.sources.add(src);
    const select = document.getElementById("log-filter");
    if (!select) return;
    const names = Array.from(this.sources).sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
    select.replaceChildren(h("option", { value: "", text: "every rank" }), ...names.map((n) => h("option", { value: n, text: n })));
    select.value = this.only === null ? "" : this.only;
    select.hidden = this.sources.size < 2;
  }

  /** Shows only the lines of `src` ("" or null: every line). */
  showOnly(src) {
    this.only = src ? src : null;
    for (const el of this.box.querySelectorAll(".log-line")) el.hidden = this.only !== null && el.dataset.src !== this.only;
    this.box.scrollTop = this.box.scrollHeight;
  }

  open(onEnd) {
    this.onEnd = onEnd;
    this.connect();
  }

  connect() {
    if (this.ended) return;
    const es = new EventSource("/api/runs/" + encodeURIComponent(this.id) + "/logs/stream");
    this.es = es;
    // A reconnect replays the history: skip what was already shown.
    es.addEventListener("open", () => {
      this.skip = this.received;
      this.thisConn = 0;
    });
    es.addEventListener("line", (e) => {
      const ev = parse(e.data);
      if (!ev) return;
      this.thisConn++;
      if (this.thisConn <= this.skip) return;
      this.received++;
      this.backoff = 5; // a new line: the stream works again
      this.push({ text: lineText(ev), src: lineSource(ev) });
    });
    es.addEventListener("note", (e) => {
      const ev = parse(e.data);
      // Notes of a replayed history were shown already.
      if (ev && this.thisConn >= this.skip) this.push({ note: str(ev.text) });
    });
    es.addEventListener("end", (e) => {
      const ev = parse(e.data) || {};
      es.close();
      this.finish(ev);
    });
    es.addEventListener("error", (e) => {
      if (typeof e.data === "string") {
        // The server's own `error` event: the stream broke; it is closed, reopen it shortly.
        const ev = parse(e.data) || {};
        es.close();
        this.push({ note: "the log stream broke: " + str(ev.error) + " (reopening in " + this.backoff + " s)" });
        this.retry();
      } else if (es.readyState === EventSource.CLOSED && !this.ended) {
        this.push({ note: "the log stream closed (reopening in " + this.backoff + " s)" });
        this.retry();
      }
    });
  }

  /** Reopens the stream after `backoff` seconds (5, doubling up to 60). */
  retry() {
    const wait = this.backoff;
    this.backoff = Math.min(60, this.backoff * 2);
    setTimeout(() => {
      if (!this.ended) this.connect();
    }, wait * 1000);
  }

  close() {
    this.ended = true;
    if (this.es) this.es.close();
  }

  finish(ev) {
    this.ended = true;
    this.flush();
    const end = document.getElementById("log-end");
    const st = str(ev.state) || "unknown";
    end.replaceChildren("The run is over: ", badge(st), ev.exit_code != null ? " exit code " + ev.exit_code : "");
    end.dataset.state = st;
    end.hidden = false;
    if (this.onEnd) this.onEnd(ev);
  }

  push(item) {
    if (!this.wandb && item.text != null && item.text.indexOf("wandb.ai/") >= 0) {
      const url = wandbUrl(item.text);
      if (url) this.showWandb(url);
    }
    this.pending.push(item);
    // A hidden tab draws no frames: keep at most what the page would show.
    if (this.pending.length > 2 * LOG_CAP) {
      const cut = this.pending.length - LOG_CAP;
      for (let i = 0; i < cut; i++) if (this.pending[i].text != null) this.dropped++;
      this.pending.splice(0, cut);
    }
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  flush() {
    this.scheduled = false;
    if (this.pending.length === 0) return;
    const box = this.box;
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
    let items = this.pending;
    this.pending = [];
    // Only the newest LOG_CAP lines can stay: do not build the rest.
    let lines = 0;
    for (const it of items) if (it.text != null) lines++;
    if (lines > LOG_CAP) {
      let skip = lines - LOG_CAP;
      this.dropped += skip;
      items = items.filter((it) => it.text == null || skip-- <= 0);
    }
    const frag = document.createDocumentFragment();
    for (const it of items) {
      if (it.text != null) {
        const el = lineElement(it.text, it.src);
        if (it.src && !this.sources.has(it.src)) this.addSource(it.src);
        if (this.only !== null && it.src !== this.only) el.hidden = true;
        frag.append(el);
        this.shown++;
      } else {
        frag.append(h("div", { class: "log-note", text: it.note }));
      }
    }
    box.append(frag);
    while (this.shown > LOG_CAP) {
      const first = box.firstElementChild;
      if (!first) break;
      if (first.classList.contains("log-line")) {
        this.shown--;
        this.dropped++;
      }
      first.remove();
    }
    if (this.dropped > 0) {
      const d = document.getElementById("log-dropped");
      d.hidden = false;
      d.replaceChildren(
        "The page keeps the last " + LOG_CAP.toLocaleString() + " lines; " + this.dropped.toLocaleString() + " earlier lines are not shown: ",
        h("a", { href: "/api/runs/" + encodeURIComponent(this.id) + "/logs", text: "download the whole log" }),
        ".",
      );
    }
    document.getElementById("log-count").textContent = this.received.toLocaleString() + " lines";
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  showWandb(url) {
    this.wandb = url;
    const a = document.getElementById("wandb-link");
    a.href = url;
    a.title = url;
    a.hidden = false;
  }
}

/** A `.log-line`: `text` as the CLI prints it, its `[src] ` prefix (when `src`) coloured. */
function lineElement(text, src) {
  const el = document.createElement("div");
  el.className = "log-line";
  const prefix = src ? "[" + src + "] " : "";
  if (prefix && text.startsWith(prefix)) {
    el.dataset.src = src;
    const pre = document.createElement("span");
    pre.className = "src";
    pre.textContent = prefix;
    el.append(pre, text.slice(prefix.length));
  } else {
    el.textContent = text;
  }
  return el;
}

/** Where a line came from, as its prefix names it: its `source`, else `rank-N`, else "". */
function lineSource(line) {
  if (line.source != null) return str(line.source);
  if (line.rank != null) return "rank-" + line.rank;
  return "";
}

function parse(data) {
  try {
    return JSON.parse(data);
  } catch (_) {
    return null;
  }
}

// ---- the capacity page ------------------------------------------------------------------

function capacityPage() {
  document.title = "capacity · theseus";
  const box = h("div", { id: "capacity", class: "capacity" });
  const head = h(
    "div",
    { class: "page-head" },
    h("h1", { text: "Capacity" }),
    h("span", { id: "probed-at", class: "muted" }),
    h("span", { class: "spacer" }),
    h("button", { id: "capacity-refresh", type: "button", text: "refresh" }),
  );
  const about = h("p", { class: "muted small about", text: "What a job asking for one GPU of any kind finds on each host, as `theseus plan` weighs it; every host is asked at once, at most every 30 s." });
  main().replaceChildren(head, about, h("div", { id: "notice" }), box);
  box.append(h("p", { class: "muted", text: "asking every host…" }));

  async function load() {
    const btn = document.getElementById("capacity-refresh");
    btn.disabled = true;
    try {
      const cap = await api("/api/capacity");
      document.getElementById("notice").replaceChildren();
      renderCapacity(box, cap || {});
      const p = document.getElementById("probed-at");
      p.textContent = cap && cap.probed_at ? "probed " + age(cap.probed_at) + " ago" : "";
      p.title = cap && cap.probed_at ? exactTime(cap.probed_at) : "";
    } catch (e) {
      document.getElementById("notice").replaceChildren(h("div", { class: "banner error", role: "alert", text: e.message }));
      if (box.querySelector(".muted")) box.replaceChildren();
    } finally {
      btn.disabled = false;
      setReady();
    }
  }
  document.getElementById("capacity-refresh").addEventListener("click", load);
  live.start(null);
  load();
}

function renderCapacity(box, cap) {
  const hosts = Array.isArray(cap.hosts) ? cap.hosts : [];
  if (hosts.length === 0) {
    box.replaceChildren(h("p", { class: "empty", text: "No hosts configured." }));
    return;
  }
  box.replaceChildren(...hosts.map(hostCard));
}

function hostCard(host) {
  const name = str(host.host);
  const av = host.availability || null;
  const availability = h("div", { class: "availability" });
  const unknown = h("div", { class: "unknown", hidden: true });
  const queues = h("div", { class: "queues", hidden: true });
  let status = "ok";
  const kind = av && av.kind;
  if (!av) {
    availability.append(h("span", { class: "muted", text: "not reported" }));
  } else if (kind === "not_checked") {
    availability.append(h("span", { class: "muted", text: "not checked" }));
    status = "idle";
  } else if (kind === "unknown") {
    status = "unknown";
    unknown.hidden = false;
    unknown.append(h("b", { text: "unknown: " }), str(av.reason));
  } else if (kind === "unusable") {
    status = "unusable";
    unknown.hidden = false;
    unknown.append(h("b", { text: "unusable: " }), str(av.reason));
  } else if (kind === "free") {
    // What is free is of the kind the probe asked for (`request`): CPU cores on a host that
    // lists no GPUs, GPUs elsewhere.
    const cpu = /\bcpu\b/.test(str(host.request));
    const what = cpu ? (av.chips === 1 ? " CPU core free" : " CPU cores free") : av.chips === 1 ? " GPU free" : " GPUs free";
    availability.append(h("span", { class: "big", text: String(av.chips) }), what, h("span", { class: "muted", text: " · " + str(av.source) }));
  } else if (kind === "slurm") {
    availability.append(partitions(av.partitions || []));
  } else {
    availability.append(h("pre", { class: "mono json", text: JSON.stringify(av, null, 2) }));
  }
  if (host.queues) {
    queues.hidden = false;
    queues.append(queueShares(host.queues));
  }
  if (host.queues_error) {
    queues.hidden = false;
    queues.append(h("div", { class: "banner warn", text: "could not read the queues: " + host.queues_error }));
  }
  return h(
    "section",
    { class: "card host status-" + status + (host.queues ? " wide" : ""), dataset: { host: name } },
    h("div", { class: "card-head" }, h("h2", { class: "mono", text: name }), h("span", { class: "tag", text: str(host.kind) }), h("span", { class: "dot-status ds-" + status, title: status })),
    availability,
    unknown,
    queues,
  );
}

/** Free/total per chip type over the usable nodes of each partition, and the nodes. */
function partitions(parts) {
  if (parts.length === 0) return h("span", { class: "muted", text: "no partitions reported" });
  return h(
    "div",
    { class: "partitions" },
    parts.map((p) => {
      const nodes = Array.isArray(p.nodes) ? p.nodes : [];
      const per = new Map();
      for (const n of nodes) {
        const t = n.gpu_type || "gpu";
        const e = per.get(t) || { free: 0, total: 0, down: 0 };
        if (n.usable) {
          e.free += Number(n.free) || 0;
          e.total += Number(n.total) || 0;
        } else e.down += 1;
        per.set(t, e);
      }
      const summary = Array.from(per, ([t, e]) =>
        h("span", { class: "chipsum" }, h("b", { text: e.free + "/" + e.total }), " " + t + " free", e.down ? h("span", { class: "muted", text: " (" + e.down + " node" + (e.down > 1 ? "s" : "") + " down)" }) : ""),
      );
      return h(
        "details",
        { class: "partition", dataset: { partition: str(p.name) }, open: nodes.length <= 8 },
        h("summary", null, h("span", { class: "mono", text: str(p.name) }), " ", summary.length ? summary : h("span", { class: "muted", text: "no GPU nodes" })),
        h(
          "table",
          { class: "grid nodes" },
          h("thead", null, h("tr", null, h("th", { text: "node" }), h("th", { text: "type" }), h("th", { class: "num", text: "free/total" }), h("th", { text: "usable" }))),
          h(
            "tbody",
            null,
            nodes.map((n) =>
              h(
                "tr",
                { dataset: { node: str(n.name) }, class: n.usable ? null : "down" },
                h("td", { class: "mono", text: str(n.name) }),
                h("td", { text: str(n.gpu_type) || "—" }),
                h("td", { class: "num", text: num(n.free) + "/" + num(n.total) }),
                h("td", { text: n.usable ? "yes" : "no (down, drained or maintenance)" }),
              ),
            ),
          ),
        ),
      );
    }),
  );
}

/** The verdict as one line (core's `ShareVerdict::describe`). */
function verdictText(v) {
  if (!v || typeof v !== "object") return "unknown";
  const reason = str(v.reason);
  switch (v.kind) {
    case "fits_now":
      return "fits now: " + reason;
    case "reclaim":
      return "fits only by reclaiming " + (v.from || []).map((t) => num(t.amount) + " from queue " + str(t.queue)).join(", ") + ": " + reason;
    case "preempt":
      return (
        "fits only by preempting " +
        (v.victims || []).map((j) => str(j.namespace) + "/" + str(j.job) + " (" + str(j.queue) + ", priority " + (j.priority_class == null ? "none" : str(j.priority_class)) + " " + str(j.priority) + ", " + num(j.amount) + ")").join(", ") +
        ": " +
        reason
      );
    case "waits":
      return "does not fit now: " + reason;
    case "never":
      return "never fits: " + reason;
    default:
      return "unknown: " + reason;
  }
}

function queueShares(s) {
  const v = s.verdict || {};
  const rows = Array.isArray(s.queues) ? s.queues : [];
  return h(
    "div",
    null,
    h("div", { class: "verdict v-" + str(v.kind) }, verdictText(v)),
    h("div", { class: "muted small" }, "queue ", h("b", { class: "mono", text: str(s.queue) }), " · ", str(s.resource), " · ", str(s.model)),
    h(
      "div",
      { class: "scroll-x" },
      h(
      "table",
      { class: "grid queues-table" },
      h("thead", null, h("tr", null, ["queue", "state", "weight", "deserved", "allocated", "owed", "borrowed", "pending"].map((t, i) => h("th", { class: i >= 2 ? "num" : null, text: t })))),
      h(
        "tbody",
        null,
        rows.map((q) =>
          h(
            "tr",
            { dataset: { queue: str(q.name) }, class: q.name === s.queue ? "own" : null },
            h("td", { class: "mono qname" }, str(q.name), q.name === s.queue ? h("span", { class: "tag", title: "the queue a request goes to", text: "yours" }) : "", q.reclaimable === false ? h("span", { class: "tag", text: "not reclaimable" }) : ""),
            h("td", { text: str(q.state) || "—" }),
            h("td", { class: "num", text: num(q.weight) }),
            h("td", { class: "num", text: num(q.deserved) }),
            h("td", { class: "num", text: num(q.allocated) }),
            h("td", { class: "num" + (q.owed > 0 ? " owed" : ""), text: num(q.owed) }),
            h("td", { class: "num" + (q.borrowed > 0 ? " borrowed" : ""), text: num(q.borrowed) }),
            h("td", { class: "num", text: q.pending == null ? "?" : num(q.pending) }),
          ),
        ),
      ),
    ),
    ),
    Array.isArray(s.unknown) && s.unknown.length ? h("ul", { class: "muted small" }, s.unknown.map((u) => h("li", { text: str(u) }))) : "",
  );
}

// ---- start ------------------------------------------------------------------------------

function start() {
  // The token came in the address; keep it out of the history and the address bar (the server
  // set a cookie, and the page sends the header).
  const params = new URLSearchParams(location.search);
  if (params.has("token")) {
    params.delete("token");
    const s = params.toString();
    history.replaceState(history.state, "", location.pathname + (s ? "?" + s : "") + location.hash);
  }
  const path = location.pathname.replace(/\/+$/, "") || "/";
  let page;
  let id = null;
  if (path === "/") page = "runs";
  else if (path === "/capacity") page = "capacity";
  else if (path.startsWith("/runs/")) {
    page = "run";
    id = decodeURIComponent(path.slice("/runs/".length));
  } else page = "runs";
  document.body.dataset.page = page;
  for (const a of document.querySelectorAll("nav a")) a.classList.remove("active");
  const nav = document.getElementById(page === "capacity" ? "nav-capacity" : "nav-runs");
  if (nav) nav.classList.add("active");
  api("/api/health")
    .then((hl) => {
      const b = document.querySelector(".brand");
      if (b && hl && hl.version) b.title = "theseus " + hl.version;
    })
    .catch(() => {});
  if (page === "runs") runsPage();
  else if (page === "capacity") capacityPage();
  else runPage(id);
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
