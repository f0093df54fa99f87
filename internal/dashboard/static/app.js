// lever dashboard: the run page's live events. Everything from the run is put in the
// page as text (textContent), never as markup.
"use strict";
(function () {
  const table = document.getElementById("events");
  if (!table) { return; }
  const body = table.tBodies[0];
  const state = document.getElementById("state");
  const cell = function (tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text === undefined || text === null ? "" : String(text);
    if (cls) { td.className = cls; }
    tr.appendChild(td);
  };
  const detail = function (ev) {
    const parts = [];
    if (ev.message) { parts.push(ev.message); }
    if (ev.args !== undefined) { parts.push("args: " + JSON.stringify(ev.args)); }
    if (ev.output !== undefined) { parts.push("result: " + (typeof ev.output === "string" ? ev.output : JSON.stringify(ev.output))); }
    if (ev.answer) { parts.push("answer: " + ev.answer); }
    if (ev.error) { parts.push("error: " + ev.error); }
    if (ev.status) { parts.push("status: " + ev.status); }
    return parts.join("\n");
  };
  // The gate's decision and what drove it: the context's label against the tool's
  // clearance, the decision's source (UserDeny, SessionAllow, a permission), the step
  // that refused.
  const labels = function (ev) {
    const parts = [];
    if (ev.taint) { parts.push("taint " + ev.taint + (ev.clearance ? ", clearance " + ev.clearance : "")); }
    if (ev.source) { parts.push(ev.source); }
    if (ev.step) { parts.push("at " + ev.step); }
    return parts.join(" / ");
  };
  const es = new EventSource(table.dataset.src);
  es.onopen = function () { state.textContent = "live"; };
  es.addEventListener("lev", function (m) {
    const ev = JSON.parse(m.data);
    const tr = document.createElement("tr");
    tr.className = "ev ev-" + String(ev.type).replace(/[^a-z_]/g, "");
    cell(tr, ev.id);
    cell(tr, ev.time);
    cell(tr, ev.type);
    cell(tr, ev.tool);
    cell(tr, ev.decision);
    cell(tr, labels(ev), "labels");
    cell(tr, detail(ev), "detail");
    body.appendChild(tr);
  });
  es.addEventListener("end", function (m) {
    state.textContent = JSON.parse(m.data);
    es.close();
  });
  es.onerror = function () { if (es.readyState === EventSource.CLOSED) { state.textContent = "disconnected"; } };
})();
