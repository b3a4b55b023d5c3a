"""A prompt group's versions, staleness and checkpoint record (agentrl/trainer/prompt_group.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentrl.trainer.prompt_group import PromptGroup


def request(versions, mask):
    return SimpleNamespace(weight_versions=versions, loss_mask=mask)


def test_versions_are_the_model_tokens_and_the_oldest_decides_staleness():
    group = PromptGroup("2-0", 2, prompt="row", started_version=1)
    group.requests = [request([-1, 3, 1, 1], [0, 1, 1, 1]), request([-1, 2], [0, 1])]
    assert group.versions == [1, 2, 3] and group.oldest_version() == 1  # tool token left out
    assert group.staler_than(2) and not group.staler_than(1)
    assert not PromptGroup("1-0", 1, prompt="row").staler_than(99)  # no model token yet


def test_a_version_older_than_its_start_or_missing_is_an_error():
    group = PromptGroup("3-1", 3, prompt="row", started_version=2)
    group.requests = [request([1], [1])]
    with pytest.raises(RuntimeError, match="prompt 3-1: .* version 1 .* after version 2"):
        group.oldest_version()
    group.requests = [request([-1], [1])]
    with pytest.raises(RuntimeError, match="reported no weight_version"):
        group.staler_than(0)


def test_a_record_reads_back_as_the_group_and_an_unfinished_one_without_requests():
    group = PromptGroup("4-1", 4, prompt="row", requests=["r0", "r1"], seconds=1.5,
                        started_version=3)  # fmt: skip
    back = PromptGroup.from_record(group.record())
    assert (back.uid, back.batch_index, back.prompt, back.requests, back.seconds) == (
        "4-1", 4, "row", ["r0", "r1"], 1.5)
    assert back.started_version == 0 and back.requests is not group.requests
    assert group.record(with_requests=False)["requests"] == []
