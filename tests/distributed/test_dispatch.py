"""Dispatch modes: how one group call's arguments reach the ranks and results come back."""

from __future__ import annotations

import pytest
import torch

from agentrl.distributed.dispatch import (
    Dispatch,
    DispatchSpec,
    collect_results,
    register,
    registered_methods,
    split_arguments,
)
from agentrl.protocol import DataProto


def _batch(n: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n)},
        non_tensors={"tag": [f"t{i}" for i in range(n)]},
        meta_info={"temperature": 0.7},
    )


class _Base:
    @register(Dispatch.DP_COMPUTE)
    def compute(self, data):
        return data

    def plain(self):
        return 1


class _Child(_Base):
    @register(Dispatch.RANK_ZERO)
    def save(self, path):
        return path


def test_registered_methods_are_found_on_the_class_and_its_bases():
    assert registered_methods(_Child) == {
        "compute": DispatchSpec(Dispatch.DP_COMPUTE),
        "save": DispatchSpec(Dispatch.RANK_ZERO),
    }


def test_pad_is_only_for_dp_compute():
    with pytest.raises(ValueError, match="pad=True only applies"):
        register(Dispatch.ONE_TO_ALL, pad=True)
    assert register("dp_compute", pad=True)(lambda: 0)._agentrl_dispatch.pad is True


def test_one_to_all_sends_the_same_arguments_and_returns_the_list():
    calls = split_arguments(DispatchSpec(Dispatch.ONE_TO_ALL), 3, (1,), {"k": 2}, "W.m")
    assert calls.args == [(1,)] * 3 and calls.kwargs == [{"k": 2}] * 3
    assert collect_results(DispatchSpec(Dispatch.ONE_TO_ALL), [5, 6, 7], 0, "W.m") == [5, 6, 7]
    assert collect_results(DispatchSpec(Dispatch.RANK_ZERO), [5, 6, 7], 0, "W.m") == 5


def test_dp_compute_splits_contiguously_and_concatenates_in_rank_order():
    spec = DispatchSpec(Dispatch.DP_COMPUTE)
    calls = split_arguments(spec, 2, (_batch(4), "broadcast"), {"scale": 3}, "W.m")
    assert [a[0].batch["x"].tolist() for a in calls.args] == [[0, 1], [2, 3]]
    assert [a[0].non_tensor_batch["tag"].tolist() for a in calls.args] == [
        ["t0", "t1"],
        ["t2", "t3"],
    ]
    assert [a[1] for a in calls.args] == ["broadcast", "broadcast"]
    assert calls.kwargs == [{"scale": 3}, {"scale": 3}]
    assert calls.args[1][0].meta_info == {"temperature": 0.7}
    parts = [
        DataProto.from_dict(tensors={"y": a[0].batch["x"] * 10}, meta_info={"rank": r})
        for r, a in enumerate(calls.args)
    ]
    merged = collect_results(spec, parts, calls.pad_size, "W.m")
    assert merged.batch["y"].tolist() == [0, 10, 20, 30]
    assert merged.meta_info == {"rank": 0}


def test_dp_compute_refuses_an_uneven_batch_without_pad():
    with pytest.raises(ValueError, match="5 samples cannot be split evenly across 2"):
        split_arguments(DispatchSpec(Dispatch.DP_COMPUTE), 2, (_batch(5),), {}, "W.update")


def test_dp_compute_with_pad_repeats_the_first_rows_and_cuts_them_from_the_result():
    spec = DispatchSpec(Dispatch.DP_COMPUTE, pad=True)
    calls = split_arguments(spec, 4, (_batch(5),), {}, "W.m")
    assert calls.pad_size == 3
    assert [a[0].batch["x"].tolist() for a in calls.args] == [[0, 1], [2, 3], [4, 0], [1, 2]]
    merged = collect_results(spec, [a[0] for a in calls.args], calls.pad_size, "W.m")
    assert merged.batch["x"].tolist() == [0, 1, 2, 3, 4]
    # a method may return several rows per input row (n samples per prompt, interleaved)
    doubled = [a[0].repeat(2, interleave=True) for a in calls.args]
    merged = collect_results(spec, doubled, calls.pad_size, "W.m", calls.padded_length)
    assert merged.batch["x"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    with pytest.raises(ValueError, match="returned 9 rows for a padded batch of 8"):
        collect_results(spec, [a[0] for a in calls.args] + [_batch(1)], 3, "W.m", 8)
    # a batch shorter than the padding is repeated cyclically
    calls = split_arguments(spec, 4, (_batch(1),), {}, "W.m")
    assert [a[0].batch["x"].tolist() for a in calls.args] == [[0], [0], [0], [0]]


def test_dp_compute_needs_a_dataproto_of_one_length():
    spec = DispatchSpec(Dispatch.DP_COMPUTE)
    with pytest.raises(TypeError, match="no DataProto argument"):
        split_arguments(spec, 2, (3,), {}, "W.m")
    with pytest.raises(ValueError, match="different lengths"):
        split_arguments(spec, 2, (_batch(2),), {"other": _batch(4)}, "W.m")


def test_dp_compute_results_must_all_be_dataprotos_or_all_none():
    spec = DispatchSpec(Dispatch.DP_COMPUTE)
    assert collect_results(spec, [None, None], 0, "W.m") is None
    with pytest.raises(TypeError, match="every rank must return a DataProto; got DataProto, int"):
        collect_results(spec, [_batch(1), 3], 0, "W.m")


def test_all_to_all_gives_each_rank_its_element():
    calls = split_arguments(
        DispatchSpec(Dispatch.ALL_TO_ALL), 2, ([1, 2],), {"k": ["a", "b"]}, "W.m"
    )
    assert calls.args == [(1,), (2,)] and calls.kwargs == [{"k": "a"}, {"k": "b"}]
    with pytest.raises(ValueError, match="argument 0 must be a list with one element per rank"):
        split_arguments(DispatchSpec(Dispatch.ALL_TO_ALL), 2, ([1, 2, 3],), {}, "W.m")


def test_dp_compute_gathers_the_trace_events_of_every_rank():
    spec = DispatchSpec(Dispatch.DP_COMPUTE, pad=True)
    parts = _batch(4).chunk(2)
    parts[0].meta_info["trace_events"] = [("rollout (pid 1)", "request a", "request", 10, 5, {})]
    parts[1].meta_info["trace_events"] = [("rollout (pid 2)", "request b", "request", 11, 4, {})]
    merged = collect_results(spec, parts, pad_size=1, what="W.m", padded_length=4)
    assert len(merged) == 3 and merged.meta_info["temperature"] == 0.7  # rank 0's meta_info
    assert [e[1] for e in merged.meta_info["trace_events"]] == ["request a", "request b"]
    assert "trace_events" not in collect_results(spec, _batch(4).chunk(2), 0, "W.m").meta_info
