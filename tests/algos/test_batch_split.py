"""algos/batch_split.py: each divisibility rule of a batch split across workers, once."""

from __future__ import annotations

import pytest

from agentrl.algos.batch_split import (
    BatchSplitError,
    micro_batch_per_worker,
    mini_batch_per_worker,
    trajectories_per_worker,
)


def test_a_mini_batch_splits_its_trajectories_evenly_across_workers():
    assert mini_batch_per_worker(4, 3, 2, "critic.ppo_mini_batch_size") == 6
    assert trajectories_per_worker(8, 1, 8, "data.train_batch_size") == 1
    with pytest.raises(BatchSplitError, match=r"critic.ppo_mini_batch_size x "
                       r"actor_rollout_ref.rollout.n = 3 x 1 trajectories cannot be split "
                       r"evenly across trainer.nnodes x trainer.n_gpus_per_node = 2 workers"):
        mini_batch_per_worker(3, 1, 2, "critic.ppo_mini_batch_size")


@pytest.mark.parametrize(("per_gpu", "global_size", "workers", "expected"), [
    (3, None, 4, 3),       # per-GPU as is
    (None, 8, 4, 2),       # the deprecated global size, divided by the workers
    (None, None, 4, None),  # neither: the whole mini-batch
])
def test_a_micro_batch_per_worker(per_gpu, global_size, workers, expected):
    assert micro_batch_per_worker(per_gpu, global_size, workers, "k") == expected


def test_a_micro_batch_that_does_not_divide_or_is_set_twice_is_refused():
    with pytest.raises(BatchSplitError, match=r"k \(6\) must be divisible by the 4 workers"):
        micro_batch_per_worker(None, 6, 4, "k")
    with pytest.raises(BatchSplitError, match="set only one of k \\(deprecated\\) and k_per_gpu"):
        micro_batch_per_worker(2, 8, 4, "k")
    assert issubclass(BatchSplitError, ValueError)
