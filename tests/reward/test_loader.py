"""load_reward_manager and get_custom_reward_fn from the config's two sub-trees."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.plugins import PluginLoadError
from agentrl.reward import (
    DAPORewardManager,
    NaiveRewardManager,
    get_custom_reward_fn,
    load_reward_manager,
)
from agentrl.reward.score import search_r1

SAMPLE = {
    "prompt": "What is 6 * 7?",
    "segments": [("<answer>42</answer><|im_end|>", 1)],
    "data_source": "agentrl/arithmetic",
    "ground_truth": "42",
}


def configs(manager="naive", reward_kwargs=None, path=None, name="compute_score", fn_kwargs=None):
    """The two sub-trees of the default config (every key the YAML has), with these values."""
    default = OmegaConf.to_container(load_config(), resolve=True)
    reward_model = OmegaConf.create({**default["reward_model"],
        "reward_manager": manager, "reward_kwargs": reward_kwargs or {},
        "tool_reward_weight": 1.0, "step_reward_weight": 0.0})  # fmt: skip
    custom = OmegaConf.create({**default["custom_reward_function"],
                               "path": path, "name": name, "reward_kwargs": fn_kwargs or {}})
    return reward_model, custom


def test_default_is_naive_with_builtin_scorers(rollout_batch, tiny_tokenizer):
    manager = load_reward_manager(*configs(), tiny_tokenizer)
    assert type(manager) is NaiveRewardManager
    built = rollout_batch([SAMPLE])
    assert manager(built.data)[0, built.lengths[0] - 1].item() == 1.0


def test_custom_function_from_a_file_with_bound_kwargs(tmp_path, rollout_batch, tiny_tokenizer):
    file = tmp_path / "my_reward.py"
    file.write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    return {'score': float(ground_truth in solution_str) + bonus, 'src': data_source}\n"
    )
    reward_model, custom = configs(path=str(file), name="my_score", fn_kwargs={"bonus": 0.5})
    manager = load_reward_manager(reward_model, custom, tiny_tokenizer, reward_fn_key="data_source")
    built = rollout_batch([SAMPLE])
    out = manager(built.data, return_dict=True)
    assert out["reward_tensor"][0, built.lengths[0] - 1].item() == 1.5
    assert out["reward_extra_info"] == {"score": [1.5], "src": ["agentrl/arithmetic"]}


def test_custom_function_from_a_module():
    fn = get_custom_reward_fn(
        configs(path="agentrl.reward.score.search_r1", name="compute_score_format")[1]
    )
    assert fn is search_r1.compute_score_format
    assert get_custom_reward_fn(configs()[1]) is None


def test_missing_custom_function_file_is_named(tmp_path):
    custom = configs(path=str(tmp_path / "nope.py"))[1]
    with pytest.raises(PluginLoadError, match="nope.py"):
        get_custom_reward_fn(custom)


def test_dapo_gets_its_reward_kwargs(tiny_tokenizer):
    kwargs = {
        "max_resp_len": 32,
        "overlong_buffer_cfg": {"enable": True, "len": 8, "penalty_factor": 1.0},
    }
    manager = load_reward_manager(*configs("dapo", kwargs), tiny_tokenizer, num_examine=1)
    assert isinstance(manager, DAPORewardManager)
    assert (manager.max_resp_len, manager.overlong.len, manager.num_examine) == (32, 8, 1)
    # keyword arguments override the config's reward_kwargs
    manager = load_reward_manager(*configs("dapo", kwargs), tiny_tokenizer, max_resp_len=64)
    assert manager.max_resp_len == 64


def test_unknown_manager_lists_valid_names(tiny_tokenizer):
    with pytest.raises(KeyError,
                       match="unknown reward manager 'prime'; valid: batch, dapo, judge, naive"):
        load_reward_manager(*configs("prime"), tiny_tokenizer)


def test_reward_kwargs_that_do_not_fit_the_manager_are_named(tiny_tokenizer):
    with pytest.raises(
        TypeError, match=r"reward_kwargs \['max_resp_len'\] do not fit reward manager 'naive'"
    ):
        load_reward_manager(*configs("naive", {"max_resp_len": 8}), tiny_tokenizer)


def test_tool_reward_weight_comes_from_the_config(rollout_batch, tiny_tokenizer):
    reward_model, custom = configs()
    reward_model.tool_reward_weight = 0.1
    manager = load_reward_manager(reward_model, custom, tiny_tokenizer)
    built = rollout_batch([dict(SAMPLE, reward_scores={"calculator": 2.0})])
    reward = manager(built.data)
    assert reward[0, built.lengths[0] - 1].item() == pytest.approx(1.0 + 0.1 * 2.0)
    assert torch.count_nonzero(reward) == 1


@pytest.mark.parametrize("manager", ["naive", "batch"])
def test_sandbox_fusion_keys_send_code_sources_to_that_sandbox(manager, tiny_tokenizer,
                                                               monkeypatch):
    from agentrl.reward.score import code_exec, default_compute_score

    calls = []
    monkeypatch.setattr(code_exec, "compute_score",
                        lambda *args, **kwargs: calls.append((args, kwargs)) or {"score": 1.0})
    reward_model, custom = configs(manager)
    reward_model.sandbox_fusion = {"url": "http://sandbox:8080", "max_concurrent": 5,
                                   "memory_limit_mb": 256}
    reward_fn = load_reward_manager(reward_model, custom, tiny_tokenizer)
    scorer = reward_fn.compute_score
    if manager == "batch":
        assert scorer(data_sources=["apps"], solution_strs=["x"], ground_truths=[{}],
                      extra_infos=[{}]) == [{"score": 1.0}]
    else:
        assert scorer("apps", "x", {}, {}) == {"score": 1.0}
    (args, kwargs), = calls
    assert args[0] == "apps" and kwargs == {"sandbox_fusion_url": "http://sandbox:8080",
                                            "memory_limit_mb": 256, "max_concurrent": 5}
    # other data sources keep their scorer; verl's semaphore argument is refused by name
    assert default_compute_score("openai/gsm8k", "#### 3", "3",
                                 sandbox_fusion_url="http://sandbox:8080") == 1.0
    with pytest.raises(TypeError, match="concurrent_semaphore"):
        default_compute_score("apps", "x", {}, None, "http://s", object())
