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
    rows = re.findall(r'<tr data-eval="(\w+)"><td>([^<]*)</td>(.*?)</tr>', table)
    assert [r[0] for r in rows] == ["eval_sft", "eval_rl", "control"]
    assert rows[0][1] == "after SFT (eval_sft)"
    cells = {key: re.findall(r"<td>([^<]*)</td>", rest) for key, _, rest in rows}
    header = re.findall(r"<th>([^<]*)</th>", table)
    # the main columns first, then other numbers (nested dicts such as by_phrasing are left out)
    assert header == ["model", "accuracy", "sampled_accuracy", "tool_call_rate", "trajectories"]
    assert cells["eval_sft"] == ["0.531 ± 0.062", "0.410 ± 0.031", "0.970", "64"]
    assert cells["eval_rl"] == ["0.625 ± 0.060", "-", "1.000", "-"]
    assert cells["control"] == ["0.094 ± 0.036", "-", "0.000", "-"]
    assert evaluation_table({"timing_s": {"total": 1.0}}) == ""


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
