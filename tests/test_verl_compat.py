"""agentrl/verl_compat.py: files written for verl load where verl is not installed, and an
installed verl is never shadowed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from agentrl.plugins import PluginLoadError, load_object
from agentrl.tools import BaseTool

TOOL_FILE = textwrap.dedent("""
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
    from verl.utils.rollout_trace import rollout_trace_op

    class EchoTool(BaseTool):
        @rollout_trace_op
        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(text=parameters["text"]), 0.0, {}
""")

REWARD_FILE = textwrap.dedent("""
    from verl.utils.reward_score import default_compute_score, gsm8k
    from verl.utils.reward_score.search_r1_like_qa_em import compute_score as em

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if data_source == "qa":
            return em(solution_str, {"target": [ground_truth]})
        return default_compute_score(data_source, solution_str, ground_truth, extra_info)

    def strict(solution_str, ground_truth):
        return gsm8k.compute_score(solution_str, ground_truth)
""")


def test_tool_and_reward_files_written_for_verl_load(tmp_path, caplog):
    (tmp_path / "my_tool.py").write_text(TOOL_FILE)
    (tmp_path / "my_reward.py").write_text(REWARD_FILE)
    with caplog.at_level("INFO", logger="agentrl.verl_compat"):
        tool_cls = load_object(f"{tmp_path}/my_tool.py:EchoTool", BaseTool)
        score = load_object(f"{tmp_path}/my_reward.py:compute_score")
    assert issubclass(tool_cls, BaseTool)  # verl's BaseTool is agentrl's
    assert score("openai/gsm8k", "so #### 42", "42") == 1.0
    assert score("qa", "<answer>The Paris</answer>", "paris") == 1.0
    assert load_object(f"{tmp_path}/my_reward.py:strict")("#### 7", "8") == 0.0
    # logged once per process: here, or by an earlier test that imported it first
    from agentrl import verl_compat

    assert ("verl.tools.base_tool -> agentrl.tools.base" in caplog.text
            or "verl.tools.base_tool" in verl_compat._FINDER.logged)


def test_stock_verl_tool_classes_map_to_agentrls():
    assert load_object("verl.tools.gsm8k_tool.Gsm8kTool").__module__ == "tools.gsm8k"
    assert load_object("verl.tools.search_tool.SearchTool").__module__ == "tools.search"
    sandbox = load_object("verl.tools.sandbox_fusion_tools.SandboxFusionTool")
    assert sandbox.__name__ == "SandboxTool"


def test_a_verl_module_agentrl_lacks_is_a_clear_error():
    with pytest.raises(PluginLoadError, match="agentrl stands in only for"):
        load_object("verl.workers.fsdp_workers.ActorRolloutRefWorker")


def test_an_installed_verl_is_not_shadowed(tmp_path):
    package = tmp_path / "verl" / "tools"
    package.mkdir(parents=True)
    (tmp_path / "verl" / "__init__.py").write_text("REAL = True\n")
    (package / "__init__.py").write_text("")
    (package / "base_tool.py").write_text("class BaseTool:\n    real = True\n")
    code = ("from agentrl import verl_compat; verl_compat.install_verl_paths()\n"
            "import verl; from verl.tools.base_tool import BaseTool\n"
            "assert verl.REAL and BaseTool.real\n"
            "try:\n    import verl.tools.gsm8k_tool\nexcept ImportError:\n    print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"  # no stand-in mixed into the real package
