/* toolfleet console, Live page, script version 1 (ours; no library, nothing fetched from elsewhere).
   Adds each finished tool call, streamed by /console/live/calls (server-sent events), to the top of the
   table of recent calls, and keeps the tables' relative times current. Without it the page is complete
   as loaded: a reload shows the latest calls. */
"use strict";

(function () {
  const body = document.getElementById("calls-body");
  const status = document.getElementById("calls-status");
  if (!body || !status || !body.dataset.stream || !window.EventSource) {  // no stream into a filtered view
    return;
  }
  const keep = Number(body.dataset.keep) || 50;

  function ago(seconds) {
    const s = Math.max(seconds, 0);
    const units = [[1, "ms", 0.001], [60, "s", 1], [3600, "min", 60], [86400, "h", 3600]];
    for (const [limit, unit, size] of units) {
      if (s < limit) {
        return Math.round(s / size) + " " + unit + " ago";
      }
    }
    return (s / 86400).toFixed(1) + " d ago";
  }

  function refreshTimes() {
    const now = Date.now() / 1000;
    for (const time of document.querySelectorAll("time[data-at]")) {
      time.textContent = ago(now - Number(time.dataset.at));
    }
  }

  function cell(row, content) {
    const td = row.insertCell();
    if (typeof content === "string") {
      td.textContent = content;
    } else {
      td.appendChild(content);
    }
  }

  function element(tag, text, attributes) {
    const node = document.createElement(tag);
    node.textContent = text;
    for (const [name, value] of Object.entries(attributes || {})) {
      node.setAttribute(name, value);
    }
    return node;
  }

  function add(call) {
    const empty = document.getElementById("calls-none");
    if (empty) {
      empty.remove();
    }
    const row = body.insertRow(0);
    row.className = "fresh";
    cell(row, element("time", ago(Date.now() / 1000 - call.at), {datetime: call.when, title: call.when, "data-at": String(call.at)}));
    cell(row, call.namespace);
    cell(row, call.tool);
    cell(row, call.latency);
    cell(row, element("span", call.outcome, {class: call.outcome === "ok" ? "ok" : "bad"}));
    cell(row, call.trace_id ? element("code", call.trace_id) : "not traced");
    cell(row, element("a", call.response_id, {href: "/console/traces?id=" + encodeURIComponent(call.response_id)}));
    while (body.rows.length > keep) {
      body.deleteRow(-1);
    }
  }

  const source = new EventSource(body.dataset.stream);
  source.addEventListener("open", function () {
    status.textContent = "Streaming: calls appear here as they finish.";
  });
  source.addEventListener("error", function () {
    status.textContent = "The stream was interrupted: reconnecting.";
  });
  source.addEventListener("call", function (event) {
    add(JSON.parse(event.data));
  });
  window.setInterval(refreshTimes, 10000);
})();
