"""The page's stylesheet and the trajectory viewer's script, inlined into report.html.

The script reads the records embedded as JSON in ``<script type="application/json"
id="report-data">`` ({"order": [source names], "sources": {name: {"label", "records"}}},
see agentrl/report/trajectories.py for a record) and builds the viewer with DOM calls and
``textContent`` only, so model output can never become markup. It needs no server, no
network and no library: the page opens from disk.
"""

from __future__ import annotations

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1400px; padding: 16px 24px; color: #1d1d1f; background: #fff; }
h1 { margin: 0 0 4px; font-size: 24px; }
h2 { margin: 28px 0 10px; font-size: 19px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.run { font-family: ui-monospace, monospace; color: #555; margin: 0 0 6px; overflow-wrap: anywhere; }
header p { overflow-wrap: anywhere; }
.notes li { color: #8a4b00; background: #fff6e5; padding: 4px 8px; margin: 3px 0;
            list-style: none; border-left: 3px solid #f0a030; }
.notes { padding: 0; }
.table-wrap { max-width: 100%; overflow-x: auto; }
table.eval { border-collapse: collapse; font-size: 14px; }
table.eval th, table.eval td { border: 1px solid #ccc; padding: 4px 10px; text-align: right; }
table.eval td { white-space: nowrap; }
table.eval th:first-child, table.eval td:first-child { text-align: left; }
table.eval thead th { background: #f2f2f2; font-weight: 600; max-width: 9em; vertical-align: bottom; }
table.grouping thead th { text-align: center; }
table.targets td { text-align: left; white-space: normal; }
table.targets td.met { color: #1a7f37; } table.targets td.missed { color: #b3261e; font-weight: 600; }
h3 { font-size: 15px; margin: 18px 0 6px; }
details#settings { margin: 8px 0; font-size: 13px; }
details#settings summary { cursor: pointer; color: #555; }
table.kv { border-collapse: collapse; margin-top: 6px; }
table.kv th { text-align: left; font-weight: 600; padding: 1px 14px 1px 0; color: #555; }
table.kv td { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
.truncated { font-size: 13px; color: #555; margin: 0 0 10px; }
.plots { display: grid; gap: 14px;
         grid-template-columns: repeat(auto-fill, minmax(min(560px, 100%), 1fr)); }
figure.plot { margin: 0; border: 1px solid #e4e4e4; border-radius: 6px; padding: 6px; }
figure.plot img { width: 100%; height: auto; display: block; }
figure.plot figcaption { font-size: 12px; color: #555; padding: 4px; }
.timeline { overflow-x: auto; border: 1px solid #e4e4e4; border-radius: 6px; padding: 6px; }
.filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 10px; }
.filters label { font-size: 13px; }
.filters input { width: 70px; }
.viewer { display: grid; grid-template-columns: minmax(0, 320px) minmax(0, 1fr); gap: 14px;
          align-items: start; }
#traj-list { list-style: none; padding: 0; margin: 0; max-height: 1100px; overflow-y: auto;
             border: 1px solid #e4e4e4; border-radius: 6px; }
#traj-list li button { width: 100%; text-align: left; border: 0; border-bottom: 1px solid #eee;
                       background: #fff; padding: 6px 8px; cursor: pointer; font-size: 12px; }
#traj-list li.correct button { border-left: 4px solid #2e9d4f; }
#traj-list li.wrong button { border-left: 4px solid #d0453a; }
#traj-list li.active button { background: #e8f0fe; }
#traj-detail { border: 1px solid #e4e4e4; border-radius: 6px; padding: 10px 14px; min-height: 200px; }
.meta { display: flex; flex-wrap: wrap; gap: 6px 18px; font-size: 13px; margin: 6px 0 12px; }
.meta b { color: #555; font-weight: 600; }
.msg { border-radius: 6px; padding: 6px 10px; margin: 8px 0; border: 1px solid #e0e0e0; }
.msg .role { font-size: 11px; font-weight: 700; text-transform: uppercase; color: #666; }
.msg pre, .text pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0 0;
                      font-size: 12.5px; font-family: ui-monospace, monospace; }
.msg.system { background: #f5f5f7; }
.msg.user { background: #eef5ff; }
.msg.assistant { background: #f0fbf2; }
.msg.tool { background: #fff7e8; }
.tool-call { display: block; margin-top: 6px; padding: 4px 8px; background: #1d1d1f; color: #f5f5f5;
             border-radius: 4px; font-family: ui-monospace, monospace; font-size: 12.5px;
             white-space: pre-wrap; word-break: break-word; }
.tokens { white-space: pre-wrap; word-break: break-word; font-family: ui-monospace, monospace;
          font-size: 12.5px; line-height: 1.7; border: 1px solid #e4e4e4; padding: 8px;
          border-radius: 6px; }
.tok { border-radius: 2px; padding: 1px 0; margin-right: 1px; }
.tok.m1 { background: #b9ecc6; }
.tok.m0 { background: #e6e6e6; color: #666; }
.tok.m1:nth-child(even) { background: #9fdfb0; }
.tok.m0:nth-child(even) { background: #d4d4d4; }
.legend { font-size: 12px; margin: 6px 0; display: flex; gap: 16px; }
.empty { color: #777; font-style: italic; }
ul.tree { list-style: none; padding: 0; margin: 4px 0 10px; font-size: 12.5px; }
ul.tree li { margin: 2px 0; }
ul.tree li button { border: 1px solid #d6d6d6; background: #fff; border-radius: 4px;
                    padding: 3px 8px; cursor: pointer; font-size: 12.5px; text-align: left; }
ul.tree li.current button { background: #e8f0fe; border-color: #7aa7f0; font-weight: 600; }
ul.tree li.absent span { color: #777; font-style: italic; }
ul.tree .bar { display: inline-block; width: 60px; height: 8px; background: #e6e6e6;
               border-radius: 2px; margin-left: 8px; vertical-align: middle; }
ul.tree .bar i { display: block; height: 8px; background: #2e9d4f; border-radius: 2px; }
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function fmt(x) {
    if (x === null || x === undefined) { return "-"; }
    if (typeof x === "number") { return Number.isInteger(x) ? String(x) : x.toFixed(3); }
    return String(x);
  }
  if (!data.order.length) { return; }
  var sourceSel = $("f-source"), stepSel = $("f-step"), outcomeSel = $("f-outcome");
  var minIn = $("f-min"), maxIn = $("f-max"), list = $("traj-list"), detail = $("traj-detail");
  var count = $("f-count"), orderSel = $("f-order"), selected = null;
  data.order.forEach(function (name) {
    var o = el("option", null, data.sources[name].label); o.value = name; sourceSel.appendChild(o);
  });
  function records() { return data.sources[sourceSel.value].records; }
  function fillSteps() {
    stepSel.textContent = "";
    var all = el("option", null, "all steps"); all.value = ""; stepSel.appendChild(all);
    var seen = {};
    records().forEach(function (r) { if (r.step !== null) { seen[r.step] = true; } });
    Object.keys(seen).map(Number).sort(function (a, b) { return a - b; }).forEach(function (s) {
      var o = el("option", null, "step " + s); o.value = String(s); stepSel.appendChild(o);
    });
  }
  function gapOf(r) {
    var g = r.extra ? r.extra.logprob_gap_max : undefined;
    return typeof g === "number" ? g : -Infinity;
  }
  function filtered() {
    var rows = matching();
    if (orderSel && orderSel.value === "gap") {
      rows = rows.slice().sort(function (a, b) { return gapOf(b) - gapOf(a); });
    }
    return rows;
  }
  function matching() {
    var step = stepSel.value, outcome = outcomeSel.value;
    var lo = minIn.value === "" ? -Infinity : Number(minIn.value);
    var hi = maxIn.value === "" ? Infinity : Number(maxIn.value);
    var bounded = minIn.value !== "" || maxIn.value !== "";
    return records().filter(function (r) {
      if (step !== "" && String(r.step) !== step) { return false; }
      if (outcome === "correct" && r.correct !== true) { return false; }
      if (outcome === "wrong" && r.correct !== false) { return false; }
      if (r.score === null) { return !bounded; }
      return r.score >= lo && r.score <= hi;
    });
  }
  function renderList() {
    var rows = filtered();
    list.textContent = "";
    count.textContent = rows.length + " of " + records().length + " trajectories";
    rows.forEach(function (r) {
      var cls = r.correct === true ? "correct" : (r.correct === false ? "wrong" : "");
      var li = el("li", cls);
      var label = (r.step !== null ? "step " + r.step + " \u00b7 " : "") + r.id +
        (r.segment ? " \u00b7 segment " + r.segment.index : "") +
        " \u00b7 score " + fmt(r.score) + " \u00b7 " + r.tool_calls + " tool call" +
        (r.tool_calls === 1 ? "" : "s");
      var b = el("button", null, label);
      b.type = "button";
      b.addEventListener("click", function () { select(r); });
      li.appendChild(b);
      r._li = li;
      list.appendChild(li);
    });
    select(rows.indexOf(selected) >= 0 ? selected : (rows[0] || null));
  }
  function select(r) {
    Array.prototype.forEach.call(list.children, function (li) { li.classList.remove("active"); });
    selected = r;
    if (r && r._li) { r._li.classList.add("active"); }
    renderDetail(r);
  }
  function callText(call) {
    var f = call["function"] || call;
    var args = f.arguments;
    if (typeof args !== "string") { args = JSON.stringify(args); }
    return (f.name || "?") + "(" + args + ")";
  }
  function renderMessages(r) {
    var box = el("div", "messages");
    if (!r.messages) {
      [["input", r.input], ["output", r.output]].forEach(function (p) {
        var d = el("div", "msg " + (p[0] === "input" ? "user" : "assistant"));
        d.appendChild(el("div", "role", p[0])); d.appendChild(el("pre", null, p[1] || ""));
        box.appendChild(d);
      });
      return box;
    }
    r.messages.forEach(function (m) {
      var role = String(m.role || "?");
      var d = el("div", "msg " + role.replace(/[^a-z]/g, ""));
      d.appendChild(el("div", "role", role === "tool" ? "tool response (" + (m.name || "") + ")"
                                                         : role));
      var content = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
      if (content) { d.appendChild(el("pre", role === "tool" ? "tool-response" : null, content)); }
      (m.tool_calls || []).forEach(function (c) { d.appendChild(el("code", "tool-call", callText(c))); });
      box.appendChild(d);
    });
    return box;
  }
  function renderTokens(r) {
    var box = el("div");
    if (!r.tokens) { box.appendChild(el("p", "empty", "no token ids in this dump")); return box; }
    var legend = el("div", "legend");
    legend.appendChild(el("span", "tok m1", "trained: loss mask 1 (the model's tokens)"));
    legend.appendChild(el("span", "tok m0", "not trained: loss mask 0 (tool responses, user turns)"));
    box.appendChild(legend);
    if (!r.mask) { box.appendChild(el("p", "empty", "no loss mask in this dump")); }
    var pre = el("div", "tokens");
    r.tokens.forEach(function (t, i) {
      var m = r.mask ? r.mask[i] : null;
      var span = el("span", m === null ? "tok" : "tok m" + m, t);
      span.title = "token " + i + (m === null ? "" : ", loss mask " + m);
      pre.appendChild(span);
    });
    box.appendChild(pre);
    return box;
  }
  function segmentText(s) {
    if (s.dumped === false) {
      return "segment " + s.index + " \u00b7 not in the dumps (not trained)";
    }
    var where = s.side_call ? "side call" : (s.parent === null ? "root" :
      "branches from segment " + s.parent + " at message " + s.branch_message +
      ", token " + s.branch_token);
    return "segment " + s.index + " \u00b7 " + where + " \u00b7 " + s.trained + " of " +
      s.tokens + " response tokens trained";
  }
  function recordOf(r, index) {
    var found = null;
    records().forEach(function (o) {
      if (o.session === r.session && o.step === r.step && o.segment &&
          o.segment.index === index) { found = o; }
    });
    return found;
  }
  function renderTree(r) {
    var box = el("ul", "tree");
    r.tree.forEach(function (s) {
      var li = el("li", s.dumped === false ? "absent" : "");
      li.style.paddingLeft = (s.depth * 22) + "px";
      li.setAttribute("data-segment", String(s.index));
      if (r.segment && s.index === r.segment.index) { li.classList.add("current"); }
      var target = s.dumped === false ? null : recordOf(r, s.index);
      var text = (s.depth ? "\u2514 " : "") + segmentText(s);
      if (target) {
        var b = el("button", null, text);
        b.type = "button";
        b.addEventListener("click", function () { select(target); });
        li.appendChild(b);
      } else {
        li.appendChild(el("span", null, text));
      }
      if (s.dumped !== false && s.tokens) {
        var bar = el("span", "bar"), fill = el("i");
        fill.style.width = Math.round(100 * s.trained / s.tokens) + "%";
        bar.title = s.trained + " of " + s.tokens + " response tokens trained";
        bar.appendChild(fill); li.appendChild(bar);
      }
      box.appendChild(li);
    });
    return box;
  }
  function renderDetail(r) {
    detail.textContent = "";
    if (!r) { detail.appendChild(el("p", "empty", "no trajectory matches the filters")); return; }
    detail.appendChild(el("h3", null, (r.step !== null ? "step " + r.step + " \u00b7 " : "") + r.id));
    var meta = el("div", "meta");
    var fields = [["score", r.score], ["correct", r.correct], ["request state", r.state],
                  ["turns", r.turns], ["tool calls", r.tool_calls], ["finish", r.finish]];
    Object.keys(r.extra).forEach(function (k) { fields.push([k, r.extra[k]]); });
    fields.forEach(function (f) {
      var s = el("span"); s.appendChild(el("b", null, f[0] + ": ")); s.appendChild(el("span", null, fmt(f[1])));
      meta.appendChild(s);
    });
    detail.appendChild(meta);
    if (r.tree) {
      detail.appendChild(el("h4", null, "Session tree (" + r.tree.length + " segments; " +
                                        "this one highlighted)"));
      detail.appendChild(renderTree(r));
    }
    detail.appendChild(el("h4", null, "Conversation"));
    detail.appendChild(renderMessages(r));
    detail.appendChild(el("h4", null, "Response tokens"));
    detail.appendChild(renderTokens(r));
  }
  sourceSel.addEventListener("change", function () { fillSteps(); renderList(); });
  [stepSel, outcomeSel, orderSel].forEach(function (s) {
    if (s) { s.addEventListener("change", renderList); }
  });
  [minIn, maxIn].forEach(function (s) { s.addEventListener("input", renderList); });
  fillSteps();
  renderList();
})();
"""
