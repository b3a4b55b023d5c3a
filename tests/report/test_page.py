"""The page: JSON embedding that keeps model output inert, and the evaluation table."""

from __future__ import annotations

import json
import re

from agentrl.report.page import embed_json, evaluation_table


def test_embedded_json_cannot_close_its_script_element():
    value = {"text": "</script><script>alert(1)</script> & <!--", "bad": float("nan")}
    text = embed_json(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"text": value["text"], "bad": None}


def test_evaluation_table_shows_each_model_with_standard_errors(synthetic):
    table = evaluation_table(synthetic.quickstart_report())
    rows = re.findall(r'<tr data-eval="(\w+)"><td title="\w+">([^<]*)</td>(.*?)</tr>', table)
    assert [r[0] for r in rows] == ["eval_sft", "eval_rl", "control"]
    assert rows[0][1] == "after SFT"
    cells = {key: re.findall(r"<td>([^<]*)</td>", rest) for key, _, rest in rows}
    main = table.split("</table>")[0]
    header = re.findall(r'<th(?: title="([^"]*)")?>([^<]*)</th>', main)
    # the main columns first, then other numbers (nested dicts such as by_phrasing go to
    # their own table); readable headers, each with its report.json key as tooltip
    assert header == [("", "model"), ("accuracy", "greedy accuracy"),
                      ("sampled_accuracy", "sampled accuracy (T=1)"),
                      ("tool_call_rate", "tool-call rate"), ("trajectories", "test problems")]
    assert cells["eval_sft"] == ["0.531 ± 0.062", "0.410 ± 0.031", "0.970", "64"]
    assert cells["eval_rl"] == ["0.625 ± 0.060", "-", "1.000", "-"]
    assert cells["control"] == ["0.094 ± 0.036", "-", "0.000", "-"]
    assert evaluation_table({"timing_s": {"total": 1.0}}) == ""
    # every table sits in a box that scrolls sideways instead of widening the page
    assert table.count('<div class="table-wrap"><table') == table.count("<table") == 2


def test_the_phrasing_table_has_accuracy_and_tool_call_rate_before_and_after(synthetic):
    table = evaluation_table(synthetic.quickstart_report()).split("</table>")[1]
    assert 'data-grouping="phrasing"' in table
    assert re.findall(r"<th[^>]*>([^<]*)</th>", table) == [
        "phrasing", "greedy accuracy", "tool-call rate",
        "after SFT", "after GRPO", "after SFT", "after GRPO"]
    tool = re.search(r'<tr data-group="tool_phrasings">(.*?)</tr>', table).group(1)
    assert re.findall(r"<td>([^<]*)</td>", tool) == [
        "tool phrasings", "0.800 ± 0.040", "0.820 ± 0.040", "0.950", "1.000"]


def test_alerts_section_lists_the_steps_each_rule_fired():
    from agentrl.report.page import alerts_section

    rows = [{"step": 1, "alerts/truncation": 0.0, "alerts/active": 0.0},
            {"step": 2, "alerts/truncation": 1.0, "alerts/tool_call_collapse": 1.0,
             "alerts/active": 2.0},
            {"step": 3, "alerts/truncation": 1.0, "alerts/active": 1.0}]
    section = alerts_section(rows)
    assert "<td>truncation</td><td>2</td><td>2, 3</td>" in section
    assert "<td>tool_call_collapse</td><td>1</td><td>2</td>" in section
    assert "active" not in section and alerts_section(rows[:1]) == ""


def test_targets_table_shows_each_stage_target_and_whether_it_was_met():
    from agentrl.report.page import targets_table

    report = {"targets": {
        "sft": {"target": "turn reproduction >= 0.80", "measured": "0.830 at step 500",
                "target_met": True, "stopped_run": False},
        "teacher": {"target": "teacher >= student", "measured": "teacher 0.090, student 0.344",
                    "target_met": False, "stopped_run": True}}}  # fmt: skip
    table = targets_table(report)
    rows = re.findall(r'<tr data-stage="(\w+)" data-met="(\w+)">(.*?)</tr>', table)
    assert [(stage, met) for stage, met, _ in rows] == [("sft", "true"), ("teacher", "false")]
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", rest) for _, _, rest in rows]
    assert cells[0] == ["sft", "turn reproduction &gt;= 0.80", "0.830 at step 500", "met"]
    assert cells[1][3] == "missed: the run stopped here"
    report["targets"]["teacher"]["stopped_run"] = False
    assert "missed: went on as asked" in targets_table(report)
    assert targets_table({"eval_sft": {"accuracy": 0.5}}) == ""
