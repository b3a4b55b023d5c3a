"""The report's timeline: the last traced step of a run drawn as an SVG, a row per track,
a bar per span (nested ones inset), tooltips with the span's args; in report.html."""

from __future__ import annotations

import json
import re

from agentrl.report import write_report
from agentrl.report.timeline import MAX_ROWS, ROW_H, read_tracks, timeline_section, trace_files
from agentrl.utils.trace import write_chrome_trace

EVENTS = [
    ("trainer (pid 1)", "stages", "step", 1_000_000, 2_000_000, {"step": 10}),
    ("trainer (pid 1)", "stages", "gen", 1_000_000, 800_000, {}),
    ("trainer (pid 1)", "stages", "update_actor", 1_900_000, 1_000_000, {}),
    ("rollout (pid 2)", "request a-0-0", "request", 1_010_000, 700_000, {"state": "COMPLETED"}),
    ("rollout (pid 2)", "request a-0-0", "RUNNING", 1_020_000, 300_000, {}),
    ("rollout (pid 2)", "request a-0-0", "generate", 1_030_000, 2_000,
     {"server": "http://s1", "output_tokens": 12, "policy_version": 9}),
    ("rollout (pid 2)", "request a-0-0 call 1", "tool", 1_400_000, 5_000,
     {"tool": "calculator", "outcome": "<ok>"}),
    ("worker rank 0 (pid 3)", "update_actor", "weight_sync", 2_700_000, 100_000, {}),
]  # fmt: skip


def _trace_dir(run, steps=(9, 10), events=EVENTS):
    for step in steps:
        write_chrome_trace(run / "trace" / f"step_{step}.json", events, step=step)
    return run


def test_rows_follow_the_trace_and_nesting_depth_is_counted(tmp_path):
    path = trace_files(_trace_dir(tmp_path, steps=(10,)))[0]
    tracks = read_tracks(json.loads(path.read_text()))
    assert [label for label, _ in tracks] == [
        "trainer / stages", "rollout / request a-0-0", "rollout / request a-0-0 call 1",
        "worker rank 0 / update_actor"]  # fmt: skip
    depths = {s.name: s.depth for _, spans in tracks for s in spans}
    assert depths == {"step": 0, "gen": 1, "update_actor": 1, "request": 0, "RUNNING": 1,
                      "generate": 2, "tool": 0, "weight_sync": 0}  # fmt: skip


def test_the_section_draws_the_last_step_with_a_bar_and_tooltip_per_span(tmp_path):
    run = _trace_dir(tmp_path, steps=(9, 10, 2))
    assert [p.name for p in trace_files(run)] == ["step_2.json", "step_9.json", "step_10.json"]
    html = timeline_section(run)
    assert "Timeline of one step (step_10)" in html and "3 steps traced" in html
    bars = re.findall(r'<rect x="([\d.]+)" y="(\d+)" width="([\d.]+)" height="(\d+)"[^>]*'
                      r'data-name="([^"]+)"><title>([^<]*)</title>', html)  # fmt: skip
    assert sorted(b[4] for b in bars) == sorted(e[2] for e in EVENTS)
    by_name = {b[4]: b for b in bars}
    step, gen, generate = by_name["step"], by_name["gen"], by_name["generate"]
    assert float(step[0]) == 260 and float(step[2]) == 900  # the whole width: 2 s
    assert float(gen[2]) == 360  # 0.8 s of 2 s
    assert int(gen[3]) < int(step[3]) == ROW_H - 2  # nested: thinner, inside its parent
    assert "generate: 2.0 ms (server=http://s1, output_tokens=12, policy_version=9)" in generate[5]
    assert "outcome=&lt;ok&gt;" in by_name["tool"][5]  # escaped
    assert ">0 s<" in html and ">1 s<" in html and ">2 s<" in html  # the axis


def test_many_tracks_are_capped_and_counted(tmp_path):
    events = [("rollout (pid 2)", f"request {k}", "request", k, 10, {}) for k in range(60)]
    html = timeline_section(_trace_dir(tmp_path, steps=(1,), events=events))
    assert html.count("<rect") == MAX_ROWS
    assert f"The {60 - MAX_ROWS} further tracks are in the file." in html


def test_no_trace_no_section_and_a_broken_file_is_a_note(tmp_path):
    assert timeline_section(tmp_path) == ""
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "step_3.json").write_text('{"traceEvents": [')
    html = timeline_section(tmp_path)
    assert "step_3.json cannot be read" in html and "<svg" not in html
    (tmp_path / "trace" / "step_3.json").write_text('{"traceEvents": []}')
    assert "holds no spans" in timeline_section(tmp_path)


def test_report_html_shows_the_timeline_of_a_traced_run(train_run):
    page = write_report(_trace_dir(train_run)).read_text(encoding="utf-8")
    assert page.count('<section id="timeline">') == 1 and page.count("<svg") == 1
    assert page.index('id="plots"') < page.index('id="timeline"') < page.index('id="viewer"')
    assert not re.search(r'(src|href)="https?:', page)  # still opens offline (a server
    # URL in a tooltip is text)
