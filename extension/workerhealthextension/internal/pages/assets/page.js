// Refreshes the fleet table in place from /health/workers. Every
// worker-provided string goes through textContent or setAttribute, never
// innerHTML, so an id like <script> stays text. Formatting mirrors page.go.
(function () {
  "use strict";
  var table = document.getElementById("workers");
  var rows = document.getElementById("rows");
  var updated = document.getElementById("updated");
  var refresh = Number(table.getAttribute("data-refresh-ms")) || 5000;
  var maxRows = Number(table.getAttribute("data-max-rows")) || 1000;
  var truncated = document.getElementById("truncated");
  var SEV = { lost: 5, unhealthy: 4, stalled: 3, unknown: 2, degraded: 1, healthy: 0 };
  var ORDER = ["healthy", "degraded", "unhealthy", "stalled", "lost", "unknown"];
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  var STALE_MS = Number(table.getAttribute("data-stale-ms")) || 60000;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function bytes(n) {
    var i = 0, v = n;
    while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
    return (i === 0 || v >= 100 ? Math.round(v).toString() : v.toFixed(1)) + " " + UNITS[i];
  }
  function num(n) { return Math.round(n) === n ? String(n) : n.toFixed(2); }
  function dur(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor(s % 86400 / 3600) + "h";
  }
  function ago(t, now) {
    var ms = Date.parse(t);
    if (!t || isNaN(ms) || ms <= 0) return "never";
    return dur(now - ms) + " ago";
  }
  function since(t, now) {
    var ms = Date.parse(t);
    if (!t || isNaN(ms) || ms <= 0) return "–";
    return dur(now - ms);
  }
  function exitText(e) {
    if (e.how === "signal" && e.signal !== undefined) return "signal " + e.signal;
    if (e.how === "code" && e.code !== undefined) return "exit code " + e.code;
    return "exit unknown";
  }
  function evidence(r) {
    if (r.exit) return exitText(r.exit);
    if (!r.value && !r.threshold && !r.latched) return "";
    var f = r.code.indexOf("memory") >= 0 ? bytes : num;
    var s = f(r.value) + " / " + f(r.threshold);
    if (r.samples > 0) s += " · " + r.samples + (r.samples === 1 ? " sample" : " samples");
    if (!r.latched) return s;
    s = "fired at " + s + " · latched";
    if (r.current !== undefined && r.current !== null) s += " · now " + f(r.current);
    if (r.recovery) {
      s += " · recovering: " + r.recovery.samples + " of " + r.recovery.needed +
        " samples under " + num(Math.round(r.recovery.ratio * 1000) / 10) + " %";
    }
    return s;
  }
  function memory(m, state, now) {
    var soft = m.soft_limit_bytes || 0, rss = m.rss_bytes || 0, r;
    if (!m.sampled_at && !rss) return { pct: 0, cls: "none", text: "no sample yet" };
    if (soft <= 0) {
      r = { pct: 0, cls: "none", text: bytes(rss) + " (no soft limit)" };
    } else {
      var ratio = rss / soft, pct = Math.round(ratio * 100);
      r = { pct: Math.min(100, pct), cls: ratio > 1 ? "over" : ratio >= 0.8 ? "warn" : "ok",
        text: bytes(rss) + " / " + bytes(soft) + " (" + pct + "%)" };
    }
    // A lost worker's memory is its last known, not its current (page.go).
    var at = Date.parse(m.sampled_at);
    if (m.sampled_at && !isNaN(at) && (state === "lost" || now - at > STALE_MS)) {
      r.cls = "stale";
      r.text = r.text + " · last sample " + ago(m.sampled_at, now);
    } else if (state === "lost") {
      r.cls = "stale";
      r.text = r.text + " · last known";
    }
    return r;
  }
  function runs(r) {
    var s = "worker " + (r.worker || []).length + " · scheduler " + (r.scheduler || []).length;
    return r.capacity > 0 ? s + " · cap " + r.capacity : s;
  }
  function drift(d) {
    var parts = [], missing = d.missing || [], orphaned = d.orphaned || [];
    if (missing.length) parts.push("missing " + missing.length);
    if (orphaned.length) parts.push("orphaned " + orphaned.length);
    if (d.over_capacity > 0) parts.push("over capacity " + d.over_capacity);
    var title = [];
    if (missing.length) title.push("missing: " + missing.join(", "));
    if (orphaned.length) title.push("orphaned: " + orphaned.join(", "));
    return { text: parts.length ? parts.join(" · ") : "none", bad: parts.length > 0, title: title.join("\n") };
  }
  // sparkline mirrors page.go newSparkline: the tree's memory over the
  // history window in a 100x20 box, the soft limit dashed.
  var SVG = "http://www.w3.org/2000/svg";
  function px(f) { return f.toFixed(1); }
  function sparkline(trend, soft) {
    var top = Math.max(soft, 0), n = 0, pts = [];
    trend.forEach(function (v) { if (v !== null && v >= 0) { top = Math.max(top, v); n++; } });
    if (!n || top <= 0) return null;
    var scale = 18 / top, last = Math.max(1, trend.length - 1);
    trend.forEach(function (v, i) {
      if (v !== null && v >= 0) pts.push(px(i * 100 / last) + "," + px(19 - v * scale));
    });
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "trend");
    svg.setAttribute("viewBox", "0 0 100 20");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    var label = "tree memory over the history window, up to " + bytes(top);
    svg.setAttribute("aria-label", label);
    var title = document.createElementNS(SVG, "title");
    title.textContent = label;
    svg.appendChild(title);
    if (soft > 0) {
      var line = document.createElementNS(SVG, "line"), y = px(19 - soft * scale);
      line.setAttribute("x1", "0"); line.setAttribute("x2", "100");
      line.setAttribute("y1", y); line.setAttribute("y2", y);
      svg.appendChild(line);
    }
    var poly = document.createElementNS(SVG, "polyline");
    poly.setAttribute("points", pts.join(" "));
    svg.appendChild(poly);
    return svg;
  }
  function row(w, now) {
    // id_escaped: the id is not UTF-8 (page.go shownID).
    var shown = w.id_escaped || w.id;
    var tr = el("tr", "s-" + w.state);
    tr.setAttribute("data-id", shown);
    var td = el("td", "id"), a = el("a", null, shown);
    a.setAttribute("href", "workers/" + (w.id_escaped || encodeURIComponent(w.id)));
    td.appendChild(a);
    if (w.id_escaped) td.appendChild(el("span", "muted", " (not UTF-8)"));
    if (w.name && w.name !== w.id) td.appendChild(el("div", "muted", w.name));
    tr.appendChild(td);

    td = el("td");
    td.appendChild(el("span", "badge s-" + w.state, w.state));
    td.appendChild(el("div", "muted", "for " + since(w.since, now)));
    tr.appendChild(td);

    td = el("td");
    (w.reasons || []).forEach(function (r) {
      var d = el("div", "reason");
      d.setAttribute("title", r.message || "");
      d.appendChild(el("code", null, r.code));
      d.appendChild(document.createTextNode(" "));
      d.appendChild(el("span", "muted", evidence(r)));
      td.appendChild(d);
    });
    if (!td.firstChild) td.appendChild(el("span", "muted", "–"));
    tr.appendChild(td);

    var m = memory(w.memory || {}, w.state, now);
    td = el("td");
    var bar = el("div", "bar"), fill = el("div", "fill " + m.cls);
    fill.style.width = m.pct + "%";
    bar.appendChild(fill);
    td.appendChild(bar);
    td.appendChild(el("div", "muted", m.text));
    var trend = sparkline(w.memory_trend || [], (w.memory || {}).soft_limit_bytes || 0);
    if (trend) td.appendChild(trend);
    tr.appendChild(td);

    tr.appendChild(el("td", null, runs(w.runs || {})));
    var d = drift(w.drift || {});
    td = el("td", d.bad ? "drift-bad" : null, d.text);
    td.setAttribute("title", d.title);
    tr.appendChild(td);
    tr.appendChild(el("td", null, ago(w.last_seen, now)));
    return tr;
  }
  function render(data) {
    var now = Date.now(), workers = (data.workers || []).slice();
    workers.sort(function (a, b) {
      var d = (SEV[b.state] === undefined ? 2 : SEV[b.state]) - (SEV[a.state] === undefined ? 2 : SEV[a.state]);
      return d !== 0 ? d : (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
    });
    var body = document.createDocumentFragment();
    workers.slice(0, maxRows).forEach(function (w) { body.appendChild(row(w, now)); });
    if (workers.length > maxRows) {
      truncated.replaceChildren(document.createTextNode("Showing the " + maxRows + " most urgent of " +
        workers.length + " workers; " + (location.search ? "all of them are in " : "filter by state to see the rest, or use ")));
      var link = el("a", null, "the JSON list");
      link.setAttribute("href", "health/workers");
      truncated.appendChild(link);
      truncated.appendChild(document.createTextNode("."));
      truncated.hidden = false;
    } else {
      truncated.replaceChildren();
      truncated.hidden = true;
    }
    if (!workers.length) {
      var tr = el("tr"), td = el("td", "empty", location.search ? "No worker in this state." :
        "No workers yet: nothing has been published by a worker_health processor.");
      td.setAttribute("colspan", "7");
      tr.appendChild(td);
      body.appendChild(tr);
    }
    rows.replaceChildren(body);
    rows.setAttribute("data-source", "live");

    var by = (data.fleet && data.fleet.by_state) || {}, total = 0;
    ORDER.forEach(function (s) {
      total += by[s] || 0;
      var chip = document.querySelector('.chip[data-state="' + s + '"] .n');
      if (chip) chip.textContent = String(by[s] || 0);
    });
    var all = document.querySelector('.chip[data-state=""] .n');
    if (all) all.textContent = String(total);

    var f = data.fleet || {}, fleet = document.getElementById("fleet");
    fleet.replaceChildren(document.createTextNode(fleetText(f)));
    if (f.idle_while_pending) {
      fleet.appendChild(document.createTextNode(" · "));
      fleet.appendChild(el("span", "warn", "work is pending while healthy capacity sits idle"));
    }
    updated.className = "muted";
    updated.textContent = updatedText(data, now);
  }
  function fleetText(f) {
    var p = f.pending >= 0 ? String(f.pending) : "not reported";
    return "pending work: " + p + " · idle capacity: " + (f.idle_capacity || 0);
  }
  function updatedText(data, now) {
    var n = (data.sources || []).length;
    if (!data.time) return "no state published yet · live";
    return "evaluated " + ago(data.time, now) + " · " + n + (n === 1 ? " source" : " sources") + " · live";
  }
  function tick() {
    var q = location.search ? location.search + "&trend=1" : "?trend=1";
    fetch("health/workers" + q, { cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(render, function (err) {
        updated.className = "stale";
        updated.textContent = "update failed (" + err.message + "), retrying; the table may be stale";
      })
      .then(function () { setTimeout(tick, refresh); });
  }
  setTimeout(tick, refresh);
})();
