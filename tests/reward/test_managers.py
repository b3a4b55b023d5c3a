"""The built-in managers: naive, dapo (overlong penalty) and batch (one, maybe async, call)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentrl.reward import (
    BatchRewardManager,
    DAPORewardManager,
    InfraError,
    NaiveRewardManager,
    RewardScoreError,
)

SHORT = {
    "prompt": "What is 6 * 7?",
    "segments": [("<answer>42</answer><|im_end|>", 1)],
    "data_source": "agentrl/arithmetic",
    "ground_truth": "42",
}
LONG = {
    "prompt": "What is 12 * 12?",
    "segments": [
        ("Let me think. Twelve twelves make a gross, so <answer>144</answer><|im_end|>", 1)
    ],
    "data_source": "agentrl/arithmetic",
    "ground_truth": "144",
}


def placed(reward: torch.Tensor, lengths: list[int]) -> list[float]:
    """The reward of each row, checking it sits on the row's last token and nowhere else."""
    out = []
    for i, n in enumerate(lengths):
        assert (
            torch.count_nonzero(reward[i, n:]) == 0 and torch.count_nonzero(reward[i, : n - 1]) == 0
        )
        out.append(reward[i, n - 1].item())
    return out


def test_naive_scores_with_the_builtin_scorers(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SHORT, dict(LONG, ground_truth="145")])
    reward = NaiveRewardManager(tiny_tokenizer)(built.data)
    assert placed(reward, built.lengths) == [1.0, 0.0]


def test_dapo_overlong_penalty(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SHORT, LONG])
    n_short, n_long = built.lengths
    assert n_short < n_long
    # expected length L - b = n_short: the short answer is free, the long one pays
    # (n_long - n_short) / b * factor
    buffer, factor = 8, 0.5
    manager = DAPORewardManager(
        tiny_tokenizer,
        max_resp_len=n_short + buffer,
        overlong_buffer_cfg={"enable": True, "len": buffer, "penalty_factor": factor, "log": True},
    )
    out = manager(built.data, return_dict=True)
    penalty = -(n_long - n_short) / buffer * factor
    assert placed(out["reward_tensor"], built.lengths) == pytest.approx([1.0, 1.0 + penalty])
    info = out["reward_extra_info"]
    assert info["acc"] == [1.0, 1.0]  # plain float scores are reported as acc
    assert info["overlong_reward"] == pytest.approx([0.0, penalty])
    assert info["overlong"] == [False, True]


def test_dapo_without_buffer_is_naive_plus_acc(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SHORT])
    out = DAPORewardManager(tiny_tokenizer)(built.data, return_dict=True)
    assert placed(out["reward_tensor"], built.lengths) == [1.0]
    assert out["reward_extra_info"] == {"acc": [1.0]}


def test_dapo_buffer_config_is_checked(tiny_tokenizer):
    with pytest.raises(ValueError, match="max_resp_len is needed"):
        DAPORewardManager(tiny_tokenizer, overlong_buffer_cfg={"enable": True, "len": 4})
    with pytest.raises(ValueError, match="overlong_buffer_cfg.len must be in"):
        DAPORewardManager(
            tiny_tokenizer, max_resp_len=4, overlong_buffer_cfg={"enable": True, "len": 8}
        )


class BatchedScorer:
    """A batched scorer that records its calls; ``bonus`` arrives from reward_kwargs."""

    def __init__(self):
        self.calls = []

    def __call__(self, data_sources, solution_strs, ground_truths, extra_infos, bonus=0.0):
        self.calls.append(list(data_sources))
        return [
            {"score": float(gt in s) + bonus, "n": len(s)}
            for s, gt in zip(solution_strs, ground_truths, strict=True)
        ]


def test_batch_manager_calls_once_per_batch(rollout_batch, tiny_tokenizer):
    scorer = BatchedScorer()
    built = rollout_batch([SHORT, dict(LONG, ground_truth="145"), SHORT])
    manager = BatchRewardManager(tiny_tokenizer, compute_score=scorer, bonus=0.25)
    out = manager(built.data, return_dict=True)
    assert scorer.calls == [["agentrl/arithmetic"] * 3]
    assert placed(out["reward_tensor"], built.lengths) == [1.25, 0.25, 1.25]
    long_text = "Let me think. Twelve twelves make a gross, so <answer>144</answer>"
    assert out["reward_extra_info"]["n"] == [19, len(long_text), 19]  # special tokens skipped


def test_batch_manager_runs_async_scorers_also_inside_a_loop(rollout_batch, tiny_tokenizer):
    async def scorer(data_sources, solution_strs, ground_truths, extra_infos):
        await asyncio.sleep(0)
        return [float(gt in s) for s, gt in zip(solution_strs, ground_truths, strict=True)]

    built = rollout_batch([SHORT, dict(SHORT, ground_truth="41")])
    manager = BatchRewardManager(tiny_tokenizer, compute_score=scorer)
    assert placed(manager(built.data), built.lengths) == [1.0, 0.0]

    async def inside_a_running_loop():
        return manager(built.data)

    assert placed(asyncio.run(inside_a_running_loop()), built.lengths) == [1.0, 0.0]


def test_batch_manager_default_and_errors(rollout_batch, tiny_tokenizer):
    built = rollout_batch([SHORT, dict(SHORT, ground_truth="41")])
    assert placed(BatchRewardManager(tiny_tokenizer)(built.data), built.lengths) == [1.0, 0.0]
    short = BatchRewardManager(tiny_tokenizer, compute_score=lambda **kw: [1.0])
    with pytest.raises(RewardScoreError, match="got 1 scores for 2 samples"):
        short(built.data)

    def broken(**kwargs):  # a service the scorer needs is down: every sample's failure
        raise InfraError("sandbox down")

    out = BatchRewardManager(tiny_tokenizer, compute_score=broken)(built.data, return_dict=True)
    assert out["reward_tensor"].abs().sum() == 0
    assert out["reward_extra_info"] == {"infra_error": [
        "2 samples (data_sources ['agentrl/arithmetic']): InfraError: sandbox down"] * 2}


def test_batch_manager_finds_the_samples_its_function_raises_on(rollout_batch, tiny_tokenizer):
    """Another exception: each sample is scored alone, so only the odd one fails (scores 0)."""
    built = rollout_batch([SHORT, dict(SHORT, ground_truth="41"), LONG])
    calls = []

    def picky(data_sources, solution_strs, ground_truths, extra_infos):
        calls.append(len(solution_strs))
        if "41" in ground_truths:
            raise ValueError("cannot compare 42 with 41")
        return [1.0] * len(solution_strs)

    out = BatchRewardManager(tiny_tokenizer, compute_score=picky)(built.data, return_dict=True)
    assert calls == [3, 1, 1, 1]
    assert placed(out["reward_tensor"], built.lengths) == [1.0, 0.0, 1.0]
    assert out["reward_extra_info"] == {"score_error": [
        None, "sample 1 (data_source='agentrl/arithmetic'): ValueError: cannot compare 42 with 41",
        None]}


def test_a_scorer_raising_on_odd_output_scores_zero_and_the_run_goes_on(rollout_batch,
                                                                        tiny_tokenizer):
    """docs/rewards.md, "When scoring fails": the model's output made it raise -> 0, marked
    score_error; an infrastructure failure (timeout, connection, InfraError) -> infra_error;
    a dict result may name an infrastructure failure itself."""
    built = rollout_batch([SHORT, dict(SHORT, ground_truth="odd"), dict(SHORT, ground_truth="down"),
                           dict(SHORT, ground_truth="busy"), LONG])  # fmt: skip

    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        if ground_truth == "odd":
            raise TypeError("unsupported operand type(s) for *: 'dict' and 'int'")
        if ground_truth == "down":
            raise ConnectionRefusedError(111, "Connection refused")
        if ground_truth == "busy":
            return {"score": 0.0, "infra_error": "the verifier answered 503"}
        return {"score": 1.0}

    for cls in (NaiveRewardManager, DAPORewardManager):
        out = cls(tiny_tokenizer, compute_score=scorer)(built.data, return_dict=True)
        assert placed(out["reward_tensor"], built.lengths) == [1.0, 0.0, 0.0, 0.0, 1.0]
        info = out["reward_extra_info"]
        assert info["score_error"] == [None, "sample 1 (data_source='agentrl/arithmetic'): "
                                       "TypeError: unsupported operand type(s) for *: 'dict' "
                                       "and 'int'", None, None, None]
        assert info["infra_error"] == [
            None, None, "sample 2 (data_source='agentrl/arithmetic'): ConnectionRefusedError: "
            "[Errno 111] Connection refused", "the verifier answered 503", None]
