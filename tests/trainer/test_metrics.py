"""verl-named data metrics, timing/throughput and validation metrics on hand-made batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.protocol import DataProto
from agentrl.trainer.metrics import (
    compute_data_metrics,
    compute_rollout_logprob_gap,
    compute_throughput_metrics,
    compute_timing_metrics,
    failed_rows,
    failure_metrics,
    process_validation_metrics,
    timer,
)


def _batch(states=("completed", "completed", "failed")):
    # P = 2 prompt columns, R = 3 response columns
    attention = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    response_mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 0, 0]])
    scores = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    return DataProto.from_dict(
        tensors={
            "responses": torch.zeros(3, 3, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores - 0.5,
            "advantages": torch.tensor([[1.0, 3.0, 0.0], [-1.0, 0.0, -3.0], [5.0, 5.0, 5.0]]),
            "returns": torch.tensor([[2.0, 2.0, 0.0], [1.0, 0.0, 1.0], [7.0, 7.0, 7.0]]),
            "values": torch.tensor([[1.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        },
        non_tensors={"request_state": list(states), "num_turns": [2, 4, 1]},
    )


def test_data_metrics_have_verl_names_and_leave_failed_rows_out():
    m = compute_data_metrics(_batch(), use_critic=True)
    assert m["training/failed"] == 1.0
    assert (m["critic/score/mean"], m["critic/score/max"], m["critic/score/min"]) == (1.5, 2.0, 1.0)
    # rewards sum over all 3 tokens: 2 - 1.5, 1 - 1.5
    assert m["critic/rewards/mean"] == pytest.approx(0.0)
    assert m["critic/advantages/mean"] == 0.0  # valid tokens 1, 3, -1, -3
    assert (m["critic/advantages/max"], m["critic/advantages/min"]) == (3.0, -3.0)
    assert m["critic/returns/mean"] == 1.5  # 2, 2, 1, 1
    assert m["critic/values/mean"] == 1.0  # 1, 2, 1, 0
    # explained variance: 1 - var(returns - values) / var(returns)
    residual = torch.tensor([1.0, 0.0, 0.0, 1.0])
    expected = 1 - residual.var() / (torch.tensor([2.0, 2.0, 1.0, 1.0]).var() + 1e-5)
    assert m["critic/vf_explained_var"] == pytest.approx(expected.item())
    assert (m["response_length/mean"], m["response_length/max"]) == (2.5, 3.0)
    assert m["response_length/clip_ratio"] == 0.5  # row 1 used all 3 columns
    assert (m["prompt_length/mean"], m["prompt_length/min"]) == (1.5, 1.0)
    assert m["prompt_length/clip_ratio"] == 0.5
    assert (m["num_turns/mean"], m["num_turns/max"]) == (3.0, 4.0)
    without_critic = compute_data_metrics(_batch(), use_critic=False)
    assert "critic/values/mean" not in without_critic
    assert "critic/vf_explained_var" not in without_critic


def test_every_row_counts_when_none_failed():
    data = _batch(("completed",) * 3)
    assert failed_rows(data).tolist() == [False, False, False]
    m = compute_data_metrics(data, use_critic=False)
    assert m["training/failed"] == 0.0 and m["critic/score/max"] == 9.0
    data.non_tensor_batch.pop("request_state")
    assert failed_rows(data).tolist() == [False, False, False]


def test_timer_timing_and_throughput():
    timing: dict[str, float] = {}
    with timer("gen", timing):
        pass
    with timer("gen", timing):
        pass
    assert set(timing) == {"gen"} and timing["gen"] >= 0
    assert compute_timing_metrics({"gen": 1.5, "step": 2.0}) == {
        "timing_s/gen": 1.5,
        "timing_s/step": 2.0,
    }
    perf = compute_throughput_metrics(_batch(), {"step": 2.0}, n_workers=2)
    assert perf == {
        "perf/total_num_tokens": 11.0,
        "perf/time_per_step": 2.0,
        "perf/throughput": 11.0 / 4,
    }


def test_validation_metrics_per_source_and_prompt():
    sources = ["gsm8k", "gsm8k", "gsm8k", "gsm8k", "nq", "nq"]
    uids = ["a", "a", "b", "b", "c", "c"]
    variables = {
        "reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.5],
        "acc": [True, False, True, True, False, False],
        "note": ["x", "y", "z", "w", "v", "u"],  # not a number: ignored
    }
    m = process_validation_metrics(sources, uids, variables)
    assert m["val-core/gsm8k/acc/mean@2"] == 0.75  # prompts: 0.5 and 1.0; acc is the core
    assert m["val-aux/gsm8k/reward/mean@2"] == 0.75
    assert m["val-aux/gsm8k/reward/std@2"] == 0.25  # std 0.5 and 0
    # bootstrap best@2 of [1, 0]: 3/4 of the draws hold a 1; of [1, 1]: always 1
    assert m["val-core/gsm8k/acc/best@2/mean"] == pytest.approx((0.75 + 1.0) / 2, abs=0.03)
    assert m["val-aux/gsm8k/acc/worst@2/mean"] == pytest.approx((0.25 + 1.0) / 2, abs=0.03)
    assert m["val-aux/nq/reward/mean@2"] == 0.25 and "val-core/nq/acc/mean@2" in m
    assert not any("note" in k for k in m)
    single = process_validation_metrics(["x", "x"], ["a", "b"], {"reward": [1.0, 0.0]})
    assert single == {"val-core/x/reward/mean@1": 0.5}


def test_majority_vote_and_sample_sizes_follow_verl():
    # one prompt, 4 samples: answers 7, 7, 3, 7; only the 7s are right
    m = process_validation_metrics(["s"] * 4, ["p"] * 4, {
        "acc": [1.0, 1.0, 0.0, 1.0], "pred": ["7", "7", "3", "7"]})
    names = {k.split("/acc/")[1] for k in m}
    assert {"mean@4", "std@4", "best@2/mean", "best@4/mean", "maj@2/mean", "maj@4/mean",
            "maj@4/std", "worst@4/std"} <= names
    assert m["val-core/s/acc/maj@4/mean"] > 0.8  # the majority answer is almost always 7
    assert m["val-core/s/acc/mean@4"] == 0.75
    assert process_validation_metrics(["s"] * 4, ["p"] * 4, {
        "acc": [1.0, 1.0, 0.0, 1.0], "pred": ["7", "7", "3", "7"]}) == m  # seeded


def test_rollout_logprob_gap_over_the_models_tokens_only():
    rollout = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.2, 0.9, 0.9]]))
    trainer = torch.log(torch.tensor([[0.4, 0.25, 0.9], [0.2, 0.8, 0.1]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # the last column: a tool's tokens
    data = DataProto.from_dict(tensors={
        "rollout_log_probs": rollout, "old_log_probs": trainer, "response_mask": mask,
    })
    gap = compute_rollout_logprob_gap(data)
    assert gap["training/rollout_probs_diff_max"] == pytest.approx(0.1)
    assert gap["training/rollout_probs_diff_mean"] == pytest.approx(0.2 / 4)
    assert gap["training/rollout_log_probs_diff_max"] == pytest.approx(abs(
        torch.log(torch.tensor(0.5 / 0.4)).item()))
    # the trained tokens' gaps, sorted: 0, 0, log(0.9/0.8), log(0.5/0.4)
    small, large = np.log(0.9 / 0.8), np.log(0.5 / 0.4)
    assert gap["training/rollout_log_probs_diff_p50"] == pytest.approx(small / 2, rel=1e-5)
    assert gap["training/rollout_log_probs_diff_p99"] == pytest.approx(
        small + 0.97 * (large - small), rel=1e-5)
    assert compute_rollout_logprob_gap(data.select(batch_keys=["old_log_probs",
                                                               "response_mask"])) == {}


def test_rollout_metrics_of_several_batches_merge_by_kind():
    from agentrl.trainer.metrics import merge_batch_metrics

    merged = merge_batch_metrics([
        {"rollout/requests": 4, "rollout/turns/max": 3, "rollout/turns/mean": 2.0,
         "rollout/tool_call_rate": 0.5},
        {"rollout/requests": 2, "rollout/turns/max": 5, "rollout/turns/mean": 1.0,
         "rollout/tool_call_rate": 1.0},
    ])
    assert merged == {"rollout/requests": 6.0, "rollout/turns/max": 5.0,
                      "rollout/turns/mean": 1.5, "rollout/tool_call_rate": 0.75}


def test_failure_metrics_count_infra_failures_by_kind_and_score_failures_by_source():
    """rollout/infra_failed and reward/score_failed are in every step's metrics (0 when
    none); per kind and per data source where there are some."""
    data = DataProto.from_dict(non_tensors={
        "source": ["a", "b", "b", "a"],
        "infra_error": [None, {"kind": "search", "error": "down"},
                        {"kind": "judge", "error": "500"}, None],
        "reward_extra_info": [{"score_error": "sample 0: ValueError: odd"}, {}, {},
                              {"infra_error": "sample 3: TimeoutError: verifier"}]})
    assert failure_metrics(data, "source") == {
        "rollout/infra_failed": 2.0, "rollout/infra_failed/judge": 1.0,
        "rollout/infra_failed/search": 1.0, "reward/score_failed": 2.0,
        "reward/score_failed/a": 2.0}
    empty = DataProto.from_dict(non_tensors={"uid": ["x"]})
    assert failure_metrics(empty) == {"rollout/infra_failed": 0.0, "reward/score_failed": 0.0}
