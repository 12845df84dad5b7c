// rein dashboard: progressive enhancement only. Every page works without
// this script; it shows times in the viewer's zone (UTC on hover),
// follows a running run's events without a reload, and reads the figures
// of a live page (`data-refresh`) again in place.
"use strict";

const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local";

function localize(t) {
  const d = new Date(t.dateTime);
  if (isNaN(d.getTime())) return;
  t.textContent = d.toLocaleString(undefined, {
    year: "numeric", month: "short", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  }) + " " + zone;
  t.title = t.dateTime + " (UTC)";
}

function iso(ms) {
  return new Date(ms).toISOString();
}

// NOTE: the same cells as `event_row` in src/ui/pages/run.rs.
function row(e) {
  const li = document.createElement("li");
  li.dataset.seq = String(e.seq);
  li.dataset.kind = e.kind;
  const seq = document.createElement("span");
  seq.className = "seq";
  seq.textContent = String(e.seq);
  const time = document.createElement("time");
  time.dateTime = iso(e.at_ms);
  time.textContent = iso(e.at_ms);
  localize(time);
  const kind = document.createElement("strong");
  kind.className = "kind";
  kind.textContent = e.kind;
  const step = document.createElement("span");
  step.className = "muted";
  step.textContent = "step " + e.step;
  const detail = document.createElement("code");
  detail.className = "detail";
  let text = JSON.stringify(e.data === undefined ? null : e.data);
  if (text.length > 240) text = text.slice(0, 240) + "…";
  detail.textContent = text;
  li.append(seq, " ", time, " ", kind, " ", step, " ", detail);
  return li;
}

function follow(list) {
  const note = document.getElementById("live-note");
  let after = Number(list.dataset.after || "0");
  const source = new EventSource(list.dataset.live + "?after=" + after);
  if (note) note.textContent = "Live: new events appear below as the run progresses.";
  source.onmessage = (message) => {
    let e;
    try { e = JSON.parse(message.data); } catch (_) { return; }
    if (typeof e.seq !== "number" || e.seq <= after) return;
    after = e.seq;
    list.dataset.after = String(after);
    list.append(row(e));
    if (e.kind === "run_finished") {
      source.close();
      if (note) {
        note.textContent = "The run ended. ";
        const a = document.createElement("a");
        a.href = window.location.pathname;
        a.textContent = "Reload to see its report and ledger";
        note.append(a);
      }
    }
  };
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED && note) {
      note.textContent = "Live updates stopped: reload the page.";
    }
  };
}

// Reads the page again every `data-refresh` ms and swaps in its figures:
// same origin, same session cookie, nothing else fetched.
function refresh(box) {
  const every = Number(box.dataset.refresh);
  if (!(every >= 1000)) return;
  const say = () => {
    const note = document.getElementById("refresh-note");
    if (note) note.textContent = "Updated every " + every / 1000 + " s.";
  };
  say();
  setInterval(async () => {
    try {
      const answer = await fetch(window.location.href, { credentials: "same-origin" });
      if (!answer.ok) return;
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = page.getElementById(box.id);
      if (!fresh) return;
      fresh.querySelectorAll("time[datetime]").forEach(localize);
      box.replaceWith(fresh);
      box = fresh;
      say();
    } catch (_) { /* the next round tries again */ }
  }, every);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("time[datetime]").forEach(localize);
  const list = document.getElementById("timeline");
  if (list && list.dataset.live && window.EventSource) follow(list);
  const live = document.querySelector("[data-refresh]");
  if (live && live.id) refresh(live);
});
