"""The canary's arithmetic: gaps, top-k KL, calibrated thresholds, when it runs, metrics."""

from __future__ import annotations

import math

import pytest

from agentrl.rollout.backends.canary import (
    CanaryScore,
    CanarySet,
    Thresholds,
    aggregate,
    canary_after_sync,
    score_server,
    topk_kl,
)


def _canary(top: bool = False) -> CanarySet:
    tops = [[{1: -0.1, 2: -2.5}, {3: -0.2, 4: -1.8}]] if top else None
    return CanarySet([[5, 1, 3]], [[-0.1, -0.2]], tops)


def test_gaps_are_the_largest_and_mean_absolute_differences():
    score = score_server(_canary(), [[-0.1, -0.5]])
    assert score.logprob_gap_max == pytest.approx(0.3)
    assert score.logprob_gap_mean == pytest.approx(0.15)
    assert score.kl_topk is None


def test_a_server_answering_the_wrong_length_or_nan_is_infinitely_far():
    assert score_server(_canary(), [[-0.1]]).logprob_gap_max == math.inf
    assert score_server(_canary(), [[-0.1, math.nan]]).logprob_gap_max == math.inf


def test_topk_kl_is_zero_for_the_same_distribution_and_grows_when_it_moves():
    p = {1: math.log(0.7), 2: math.log(0.3)}
    assert topk_kl(p, dict(p)) == pytest.approx(0.0, abs=1e-12)
    q = {1: math.log(0.3), 2: math.log(0.7)}
    expected = 0.7 * math.log(0.7 / 0.3) + 0.3 * math.log(0.3 / 0.7)
    assert topk_kl(p, q) == pytest.approx(expected)
    # a token missing from the server's top-k gets its smallest top-k log-prob
    assert topk_kl(p, {1: math.log(0.7), 9: math.log(0.3)}) == pytest.approx(0.0, abs=1e-12)


def test_score_with_top_k_averages_the_positions_kl():
    same = score_server(_canary(top=True), [[-0.1, -0.2]], [[{1: -0.1, 2: -2.5},
                                                              {3: -0.2, 4: -1.8}]])
    assert same.kl_topk == pytest.approx(0.0, abs=1e-12)
    moved = score_server(_canary(top=True), [[-0.1, -0.2]], [[{1: -2.5, 2: -0.1},
                                                               {3: -0.2, 4: -1.8}]])
    assert moved.kl_topk > 0.5


def test_thresholds_are_the_median_times_the_margin_with_a_floor():
    scores = [CanaryScore(1e-6, 1e-7, 1e-8), CanaryScore(2e-6, 1e-7, 2e-8),
              CanaryScore(5.0, 1.0, 3.0)]  # one broken server does not set the bar
    fp32 = Thresholds.calibrate(scores, margin=4.0, floor=0.02)
    assert fp32.logprob_gap_max == 0.02 and fp32.kl_topk == 0.02
    bf16 = Thresholds.calibrate([CanaryScore(0.1, 0.01, 0.05), CanaryScore(0.125, 0.01, 0.05),
                                 CanaryScore(0.15, 0.01, 0.05)], margin=4.0, floor=0.02)
    assert bf16.logprob_gap_max == pytest.approx(0.5) and bf16.kl_topk == pytest.approx(0.2)
    assert bf16.diverged(CanaryScore(0.4, 0.1, 0.1)) is None
    assert "log-prob gap 0.6 > threshold 0.5" in bf16.diverged(CanaryScore(0.6, 0.1, 0.1))
    assert "top-k KL 0.3 > threshold 0.2" in bf16.diverged(CanaryScore(0.4, 0.1, 0.3))
    assert bf16.diverged(CanaryScore(math.nan, 0.1, 0.1)) is not None
    two = Thresholds.calibrate([CanaryScore(0.1, 0.01), CanaryScore(3.0, 1.0)], 4.0, 0.02)
    assert two.logprob_gap_max == pytest.approx(0.4)  # the broken one of two does not count


@pytest.mark.parametrize(("mode", "runs"), [
    ("every_sync", [1, 2, 3, 4, 5, 6, 7]),
    ("every_n", [1, 4, 7]),
    ("off", []),
])
def test_which_syncs_run_the_canary(mode, runs):
    assert [s for s in range(1, 8) if canary_after_sync(mode, 3, s)] == runs


def test_a_bad_mode_names_the_key():
    with pytest.raises(ValueError, match="rollout.canary is 'sometimes'"):
        canary_after_sync("sometimes", 3, 1)


def test_metrics_are_the_worst_server_and_each_server():
    metrics = aggregate({"a": CanaryScore(0.1, 0.01, 0.2), "b": CanaryScore(0.3, 0.02, None)})
    assert metrics["rollout/canary/logprob_gap_max"] == 0.3
    assert metrics["rollout/canary/logprob_gap_mean"] == 0.02
    assert metrics["rollout/canary/kl_topk"] == 0.2
    assert metrics["rollout/canary/logprob_gap_max/server0"] == 0.1
    assert metrics["rollout/canary/logprob_gap_max/server1"] == 0.3
    assert "rollout/canary/kl_topk/server1" not in metrics
