"""The update loop: any micro-batch cut gives the gradient of the whole mini-batch's loss."""

from __future__ import annotations

import copy

import pytest
import torch

from agentrl.algos import LOSS_AGG_MODES, agg_loss
from agentrl.protocol import DataProto
from agentrl.workers.micro_batch import MicroBatching
from agentrl.workers.update import (
    MicroResult,
    UpdateSettings,
    loss_weight,
    mini_batches,
    run_update,
)


def _data(n: int = 8, t: int = 5, seed: int = 0) -> DataProto:
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(n, t, generator=g) > 0.3).long()
    mask[0] = 0  # a fully masked row (a failed sample)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    attention = (torch.arange(t)[None, :] < lengths[:, None]).long()
    return DataProto.from_dict(
        tensors={
            "x": torch.randn(n, t, 3, generator=g),
            "target": torch.randn(n, t, generator=g),
            "response_mask": mask * attention,
            "responses": torch.zeros(n, t, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(n, 2, dtype=torch.long), attention], dim=1),
        }
    )


def _loss(model: torch.nn.Module, mode: str):
    def micro_loss(micro: DataProto) -> MicroResult:
        pred = model(micro.batch["x"]).squeeze(-1)  # (b, t)
        loss = agg_loss((pred - micro.batch["target"]) ** 2, micro.batch["response_mask"], mode)
        return MicroResult(
            loss, losses={"test/loss": loss.item()}, stats={"test/pred": pred.mean().item()}
        )

    return micro_loss


def _train(batching: MicroBatching, mode: str, data: DataProto, mini: int = 8):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    settings = UpdateSettings(
        mini_batch_size=mini, batching=batching, grad_clip=100.0, loss_agg_mode=mode
    )
    metrics = run_update(model, optimizer, data, settings, _loss(model, mode), prefix="test")
    return torch.cat([p.detach().flatten() for p in model.parameters()]), metrics


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batching_does_not_change_the_update(mode):
    data = _data()
    whole, whole_metrics = _train(MicroBatching(), mode, data)
    for batching in (
        MicroBatching(micro_batch_size=1),
        MicroBatching(micro_batch_size=3),
        MicroBatching(use_dynamic_bsz=True, max_token_len=14),
    ):
        params, metrics = _train(batching, mode, data)
        torch.testing.assert_close(params, whole, atol=1e-6, rtol=0)
        assert metrics["test/loss"] == pytest.approx(whole_metrics["test/loss"], abs=1e-6)
    # and it is the plain gradient step on the whole batch
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    start = copy.deepcopy(model)
    _loss(model, mode)(data).loss.backward()
    expected = torch.cat(
        [
            (p - 0.1 * q.grad).detach().flatten()
            for p, q in zip(start.parameters(), model.parameters(), strict=True)
        ]
    )
    torch.testing.assert_close(whole, expected, atol=1e-6, rtol=0)


def test_loss_weights_by_mode():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert loss_weight("token-mean", mask, tokens=6, sequences=4) == 0.5
    assert loss_weight("seq-mean-token-mean", mask, tokens=6, sequences=4) == 0.5
    assert loss_weight("seq-mean-token-sum", mask, tokens=6, sequences=8) == 0.25
    assert loss_weight("seq-mean-token-sum-norm", mask, tokens=6, sequences=4) == 1.0


def test_mini_batches_cover_the_batch_once_per_epoch():
    data = _data(8)
    plain = mini_batches(data, UpdateSettings(mini_batch_size=4), epoch=0)
    assert [len(m) for m in plain] == [4, 4]
    assert torch.equal(plain[1].batch["x"], data.batch["x"][4:])
    shuffled = UpdateSettings(mini_batch_size=4, shuffle=True, seed=5)
    first = mini_batches(data, shuffled, epoch=0)
    assert torch.equal(first[0].batch["x"], mini_batches(data, shuffled, 0)[0].batch["x"])
    rows = torch.cat([m.batch["target"] for m in first])
    assert sorted(rows[:, 0].tolist()) == sorted(data.batch["target"][:, 0].tolist())
    assert not torch.equal(rows, data.batch["target"])
    # a new permutation every training step, the same one for the same step
    orders = {
        step: tuple(torch.cat([m.batch["x"] for m in mini_batches(data, shuffled, 0, step)])
                    .flatten().tolist())
        for step in range(4)
    }  # fmt: skip
    assert len(set(orders.values())) > 1
    assert orders[2] == tuple(
        torch.cat([m.batch["x"] for m in mini_batches(data, shuffled, 0, 2)]).flatten().tolist()
    )
    with pytest.raises(
        ValueError,
        match="batch of 8 trajectories is not a multiple of the per-rank mini-batch of 3",
    ):
        mini_batches(data, UpdateSettings(mini_batch_size=3), epoch=0)


def test_epochs_and_mini_batches_average_the_metrics():
    data = _data(8)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    settings = UpdateSettings(mini_batch_size=4, epochs=3)
    metrics = run_update(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        data,
        settings,
        _loss(model, "token-mean"),
        prefix="test",
    )
    # lr 0: the six steps see the same model, so the mean is over two distinct mini-batches
    first, second = (
        agg_loss(
            (model(m.batch["x"]).squeeze(-1) - m.batch["target"]) ** 2,
            m.batch["response_mask"],
            "token-mean",
        ).item()
        for m in (data[:4], data[4:])
    )
    assert metrics["test/loss"] == pytest.approx((first + second) / 2, abs=1e-6)
    assert metrics["test/grad_norm"] > 0
    assert set(metrics) == {"test/loss", "test/pred", "test/grad_norm"}


def test_a_non_finite_gradient_skips_the_step():
    data = _data(4)
    model = torch.nn.Linear(3, 1)
    before = [p.detach().clone() for p in model.parameters()]

    def bad_loss(micro: DataProto) -> MicroResult:
        return MicroResult(model(micro.batch["x"]).sum() * float("nan"))

    metrics = run_update(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        data,
        UpdateSettings(mini_batch_size=4),
        bad_loss,
        prefix="test",
    )
    assert metrics["test/grad_norm"] != metrics["test/grad_norm"]  # NaN
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


class _CountedReads(torch.Tensor):
    """A tensor that counts its reads to the host (``item``, ``float``, ``tolist``): the
    syncs a GPU would pay. Results of ops on it stay of this class."""

    reads = 0

    def item(self):
        type(self).reads += 1
        return super().item()

    def __float__(self):
        type(self).reads += 1
        return super().__float__()

    def tolist(self):
        type(self).reads += 1
        return super().tolist()


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_device_metrics_are_not_read_to_the_host_micro_batch_by_micro_batch(micro_batches):
    data = _data(8)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)

    def tensor_loss(micro: DataProto) -> MicroResult:
        pred = model(micro.batch["x"]).squeeze(-1)
        loss = agg_loss(
            (pred - micro.batch["target"]) ** 2, micro.batch["response_mask"], "token-mean"
        )
        return MicroResult(
            loss,
            losses={"test/loss": loss.detach().as_subclass(_CountedReads)},
            stats={"test/pred": pred.mean().detach().as_subclass(_CountedReads)},
        )

    _CountedReads.reads = 0
    settings = UpdateSettings(
        mini_batch_size=4, batching=MicroBatching(micro_batch_size=4 // micro_batches)
    )
    metrics = run_update(
        model, torch.optim.SGD(model.parameters(), lr=0.0), data, settings, tensor_loss, "test"
    )
    assert _CountedReads.reads == 0  # stacked with the grad norm and read once per step
    torch.manual_seed(0)
    reference = torch.nn.Linear(3, 1)  # the same numbers as a loss that returns floats
    expected = run_update(
        reference,
        torch.optim.SGD(reference.parameters(), lr=0.0),
        data,
        settings,
        _loss(reference, "token-mean"),
        "test",
    )
    assert metrics == pytest.approx(expected, abs=1e-6)
