"""The reward-manager contract: decoding, placement on the last token, tool rewards, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.algos import get_adv_estimator_fn
from agentrl.reward import (
    REWARD_MANAGERS,
    DAPORewardManager,
    NaiveRewardManager,
    RewardManager,
    RewardScoreError,
    register_reward_manager,
)

TOOL_CALL = (
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 28"}}\n</tool_call>'
)
TOOL_DELTA = (
    "<|im_end|>\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
)
SINGLE = {
    "prompt": "What is 6 * 7?",
    "segments": [("<answer>42</answer><|im_end|>", 1)],
    "data_source": "agentrl/arithmetic",
    "ground_truth": "42",
}
MULTI = {
    "prompt": "A warehouse has 347 shelves of 28 boxes. How many boxes?",
    "segments": [
        (TOOL_CALL, 1),
        (TOOL_DELTA.format("9716"), 0),
        ("<answer>9716</answer><|im_end|>", 1),
    ],
    "data_source": "agentrl/arithmetic",
    "ground_truth": "9716",
    "extra_info": {"index": 7},
    "reward_scores": {"calculator": [0.5, 0.25]},
}
WRONG = {
    "prompt": "Tom has 70 apples and buys 2. How many?",
    "segments": [("#### 71<|im_end|>", 1)],
    "data_source": "openai/gsm8k",
    "ground_truth": "72",
}
ENDS_ON_TOOL = {  # the turn budget ran out right after a tool response
    "prompt": "What is 2 + 3?",
    "segments": [(TOOL_CALL, 1), (TOOL_DELTA.format("5"), 0)],
    "data_source": "agentrl/arithmetic",
    "ground_truth": "5",
    "reward_scores": {"calculator": 1.0},
}


def expected_tensor(lengths, rewards, response_length=64):
    out = torch.zeros(len(lengths), response_length)
    for i, (n, r) in enumerate(zip(lengths, rewards, strict=True)):
        out[i, n - 1] = r
    return out


def test_score_lands_on_the_last_attended_token(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SINGLE, MULTI, WRONG, ENDS_ON_TOOL])
    manager = NaiveRewardManager(tiny_tokenizer, tool_reward_weight=0.5)
    out = manager(built.data, return_dict=True)
    reward = out["reward_tensor"]
    assert reward.dtype == torch.float32 and reward.shape == (4, 64)
    # SINGLE 1; MULTI 1 + 0.5 * (0.5 + 0.25) = 1.375; WRONG 0; ENDS_ON_TOOL 0 + 0.5 * 1.0
    assert torch.equal(reward, expected_tensor(built.lengths, [1.0, 1.375, 0.0, 0.5]))
    assert out["reward_extra_info"] == {"tool_reward": [0.0, 0.375, 0.0, 0.5]}
    assert torch.equal(manager(built.data), reward)  # return_dict=False: the tensor


def test_by_default_the_reward_is_verls_tool_rewards_are_not_added(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SINGLE, MULTI, WRONG, ENDS_ON_TOOL])
    for manager_cls in (NaiveRewardManager, DAPORewardManager):
        out = manager_cls(tiny_tokenizer)(built.data, return_dict=True)
        # the score alone, in verl's 0-1 range, though MULTI and ENDS_ON_TOOL have tool rewards
        assert torch.equal(out["reward_tensor"],
                           expected_tensor(built.lengths, [1.0, 1.0, 0.0, 0.0]))
        assert out["reward_extra_info"]["tool_reward"] == [0.0, 0.0, 0.0, 0.0]


def test_decoded_response_and_inputs_reach_compute_score(rollout_batch, tiny_tokenizer):
    calls = []

    def spy(data_source, solution_str, ground_truth, extra_info):
        calls.append((data_source, solution_str, ground_truth, extra_info))
        return 0.0

    built = rollout_batch([SINGLE, MULTI])
    NaiveRewardManager(tiny_tokenizer, compute_score=spy)(built.data)
    assert calls[0] == ("agentrl/arithmetic", "<answer>42</answer>", "42", {"rollout_reward_scores": {}})
    source, text, truth, extra = calls[1]
    # special tokens are skipped; tool markup and the tool response text stay
    assert text == (
        TOOL_CALL + "\nuser\n<tool_response>\n9716\n</tool_response>\nassistant\n"
        "<answer>9716</answer>"
    )
    assert (source, truth) == ("agentrl/arithmetic", "9716")
    assert extra == {"index": 7, "rollout_reward_scores": {"calculator": [0.5, 0.25]}}


def test_dict_scores_fill_reward_extra_info(rollout_batch, tiny_tokenizer):
    def scorer(data_source, solution_str, ground_truth, extra_info):
        score = float(ground_truth in solution_str)
        if data_source == "openai/gsm8k":
            return {"score": score, "acc": score > 0}
        return {"score": score, "acc": score > 0, "pred": solution_str[-9:]}

    built = rollout_batch([SINGLE, WRONG])
    out = NaiveRewardManager(tiny_tokenizer, compute_score=scorer)(built.data, return_dict=True)
    assert out["reward_extra_info"] == {
        "score": [1.0, 0.0],
        "acc": [True, False],
        "pred": ["</answer>", None],  # a key one sample lacks is None there
    }


def test_a_failing_scorer_names_the_sample_and_data_source(rollout_batch, tiny_tokenizer):
    unknown = dict(WRONG, data_source="my/unknown")
    built = rollout_batch([SINGLE, unknown])
    with pytest.raises(RewardScoreError, match=r"sample 1 \(data_source='my/unknown'\).*known:"):
        NaiveRewardManager(tiny_tokenizer)(built.data)


def test_bad_score_values_are_errors(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SINGLE])
    with pytest.raises(RewardScoreError, match="dict without 'score' for sample 0"):
        NaiveRewardManager(tiny_tokenizer, compute_score=lambda **kw: {"acc": 1})(built.data)
    with pytest.raises(RewardScoreError, match="returned 'high' for sample 0"):
        NaiveRewardManager(tiny_tokenizer, compute_score=lambda **kw: "high")(built.data)


def test_missing_ground_truth_column_is_named(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SINGLE])
    built.data.non_tensor_batch.pop("reward_model")
    with pytest.raises(KeyError, match="non_tensor_batch\\['reward_model'\\]"):
        NaiveRewardManager(tiny_tokenizer)(built.data)


def test_empty_response_gets_no_reward(rollout_batch, tiny_tokenizer):
    failed = dict(SINGLE, segments=[])  # a FAILED sample: no response tokens
    built = rollout_batch([failed, SINGLE])
    reward = NaiveRewardManager(tiny_tokenizer)(built.data)
    assert torch.equal(reward, expected_tensor([1, built.lengths[1]], [0.0, 1.0]))


def test_outcome_on_a_tool_token_reaches_the_last_assistant_token(rollout_batch, tiny_tokenizer):
    built = rollout_batch([ENDS_ON_TOOL])
    rewards = NaiveRewardManager(tiny_tokenizer, tool_reward_weight=1.0)(built.data)
    mask = built.data.batch["response_mask"]
    last_model_token = int(torch.nonzero(mask[0])[-1])
    assert mask[0, built.lengths[0] - 1] == 0  # the reward sits on a tool token
    _, returns = get_adv_estimator_fn("reinforce_plus_plus")(rewards, mask, None, gamma=1.0)
    assert returns[0, last_model_token].item() == 1.0  # the tool reward, credited
    assert torch.all(returns[0, : last_model_token + 1] == 1.0)


def test_a_users_reward_manager_runs_through_the_base_class(rollout_batch, tiny_tokenizer):
    name = "tests/length_reward"
    if name not in REWARD_MANAGERS:

        @register_reward_manager(name)
        class LengthReward(RewardManager):
            def score(self, samples):
                return [
                    {"score": float(s.response_length), "chars": len(s.response_str)}
                    for s in samples
                ]

    manager = REWARD_MANAGERS.get(name)(tiny_tokenizer)
    built = rollout_batch([SINGLE, WRONG])
    out = manager(built.data, return_dict=True)
    assert torch.equal(out["reward_tensor"], expected_tensor(built.lengths, built.lengths))
    assert out["reward_extra_info"]["chars"] == [len("<answer>42</answer>"), len("#### 71")]
    assert np.array_equal(out["reward_extra_info"]["score"], np.array(built.lengths, dtype=float))


def test_num_turns_reaches_extra_info(rollout_batch, tiny_tokenizer):
    seen = []
    built = rollout_batch([MULTI])
    built.data.non_tensor_batch["__num_turns__"] = np.array([3], dtype=object)
    spy = lambda data_source, solution_str, ground_truth, extra_info: seen.append(extra_info) or 0.0  # noqa: E731
    NaiveRewardManager(tiny_tokenizer, compute_score=spy)(built.data)
    # verl's extra_info fields: num_turns and the tool rewards as rollout_reward_scores
    assert seen == [{"index": 7, "num_turns": 3,
                     "rollout_reward_scores": {"calculator": [0.5, 0.25]}}]


def test_num_examine_logs_that_many_samples_per_data_source(rollout_batch, tiny_tokenizer, caplog):
    built = rollout_batch([SINGLE, MULTI, WRONG])
    with caplog.at_level("INFO", logger="agentrl.reward.base"):
        NaiveRewardManager(tiny_tokenizer, num_examine=1)(built.data)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2  # one arithmetic sample, one gsm8k sample
    assert logged[0].startswith("[agentrl/arithmetic] [prompt] user\nWhat is 6 * 7?\nassistant\n")
    assert "[response] <answer>42</answer>" in logged[0] and logged[0].endswith("[reward] 1.0000")
    assert logged[1].startswith("[openai/gsm8k]")


def test_step_rewards_in_reward_scores_are_not_summed_into_the_tool_reward(tiny_tokenizer):
    from agentrl.reward.base import _tool_reward_sum

    scores = {"calculator": [0.5, 0.25], "step_rewards": {"calculator": [1.0, 2.0]}}
    assert _tool_reward_sum(scores) == 0.75
    assert _tool_reward_sum({"user_turn_rewards": [1.0, 0.5], "search": 0.25}) == 1.75
    assert _tool_reward_sum({"nested": {"step_rewards": 3.0}}) == 3.0  # only the top-level key


def test_scores_on_last_token_puts_each_score_on_its_rows_last_response_token():
    from agentrl.reward.base import scores_on_last_token

    # prompt length 2, response length 3: row 0 has 2 response tokens, row 1 three, row 2 none
    attention = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    out = scores_on_last_token([0.5, -2.0, 7.0], attention, 3)
    assert out.dtype == torch.float32
    assert out.tolist() == [[0.0, 0.5, 0.0], [0.0, 0.0, -2.0], [0.0, 0.0, 0.0]]
