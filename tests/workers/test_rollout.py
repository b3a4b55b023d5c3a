"""HybridRollout: the engine on the worker's event loop, and weight sync by backend kind.

The sglang path runs against a real server: `agentrl serve`'s app (the hf engine behind
SGLang's HTTP API) on a loopback port, which loads the exported directory through
/update_weights_from_disk as SGLang does.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.protocol import DataProto
from agentrl.testing.workers import greedy_continuations, response_tokens, tiny_worker_config
from agentrl.workers.rollout import HybridRollout, LoopThread
from agentrl.workers.rollout_settings import RolloutSettings

P, R = 40, 10


def _prompts() -> DataProto:
    messages = [[{"role": "user", "content": text}] for text in ("2+3=?", "hello there")]
    return DataProto.from_dict(non_tensors={"raw_prompt": messages}, meta_info={"validate": True})


def _perturbed(model_dir) -> torch.nn.Module:
    """The model with different weights (as after some training)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    return model


def _config(model_dir, *overrides):
    return RolloutSettings.from_config(tiny_worker_config(
        model_dir, [f"data.max_prompt_length={P}", f"data.max_response_length={R}", *overrides]
    ).actor_rollout_ref)


def test_loop_thread_runs_coroutines_and_cancels_leftovers():
    loop = LoopThread()

    async def add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    async def start_forever() -> asyncio.Task:
        return asyncio.ensure_future(asyncio.sleep(3600))

    assert loop.run(add(2, 3)) == 5
    forever = loop.run(start_forever())
    loop.close()
    assert forever.cancelled() and loop.loop.is_closed()
    loop.close()  # twice is fine


def test_hf_backend_gets_the_state_dict_in_place(varied_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    rollout = HybridRollout(_config(varied_model_dir), tokenizer)
    try:
        assert rollout.weight_sync == "tensors"
        trained = _perturbed(varied_model_dir)
        rollout.update_weights(trained, step=7)
        assert rollout.backend.weight_version == "7"
        assert rollout.weights_verified == 1  # every_sync by default
        engine_weights = rollout.backend.model.state_dict()
        assert all(torch.equal(engine_weights[k], v) for k, v in trained.state_dict().items())
        out = rollout.generate_sequences(_prompts())
        assert all(
            t == g[: len(t)]
            for t, g in zip(
                response_tokens(out), greedy_continuations(trained, out, R), strict=True
            )
        )
    finally:
        rollout.close()


def test_sglang_servers_load_the_exported_directory(varied_model_dir, tmp_path):
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app
    from agentrl.utils.serving import serve_in_thread

    server_backend = HFBackend.from_pretrained(varied_model_dir)
    app = create_app(server_backend, model_path=str(varied_model_dir))
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    with serve_in_thread(app, startup_timeout=30) as url:
        config = _config(
            varied_model_dir,
            "actor_rollout_ref.rollout.name=sglang",
            f"actor_rollout_ref.rollout.server_urls=[{url}]",
            "actor_rollout_ref.rollout.request_timeout=60",
        )
        rollout = HybridRollout(config, tokenizer, weights_dir=tmp_path / "weights")
        try:
            assert rollout.weight_sync == "disk"
            original = AutoModelForCausalLM.from_pretrained(varied_model_dir)
            before = rollout.generate_sequences(_prompts())
            assert all(
                t == g[: len(t)]
                for t, g in zip(
                    response_tokens(before), greedy_continuations(original, before, R), strict=True
                )
            )

            trained = _perturbed(varied_model_dir)
            rollout.update_weights(trained, step=1)
            assert rollout.weights_verified == 1  # the one server, through /get_weights_by_name
            rollout.update_weights(trained, step=2)
            assert [p.name for p in (tmp_path / "weights").iterdir()] == ["step_2"]
            assert server_backend.weight_version == "2"
            served = server_backend.model.state_dict()
            assert all(torch.equal(served[k], v) for k, v in trained.state_dict().items())
            after = rollout.generate_sequences(_prompts())
            assert response_tokens(after) != response_tokens(before)
            assert all(
                t == g[: len(t)]
                for t, g in zip(
                    response_tokens(after), greedy_continuations(trained, after, R), strict=True
                )
            )
        finally:
            rollout.close()
    assert (tmp_path / "weights").is_dir()  # a directory it was given is not removed


@pytest.mark.slow
def test_engine_workers_roll_out_from_the_same_servers(varied_model_dir, tmp_path):
    pytest.importorskip("ray")
    from agentrl.distributed.testing import ray_session
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app
    from agentrl.utils.serving import serve_in_thread

    server_backend = HFBackend.from_pretrained(varied_model_dir)
    app = create_app(server_backend, model_path=str(varied_model_dir))
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    prompts = DataProto.from_dict(non_tensors={"raw_prompt": [
        [{"role": "user", "content": text}] for text in ("2+3=?", "hello there", "a b c")
    ]}, meta_info={"validate": True})
    with ray_session(num_cpus=2), serve_in_thread(app, startup_timeout=30) as url:
        config = _config(
            varied_model_dir,
            "actor_rollout_ref.rollout.name=sglang",
            f"actor_rollout_ref.rollout.server_urls=[{url}]",
            "actor_rollout_ref.rollout.request_timeout=60",
            "actor_rollout_ref.rollout.engine_workers=2",
        )
        rollout = HybridRollout(config, tokenizer, weights_dir=tmp_path / "weights")
        try:
            assert rollout.engine_kind == "sharded" and len(rollout.engine.workers) == 2
            before = rollout.generate_sequences(prompts)
            assert before.meta_info["metrics"]["rollout/requests"] == 3
            original = AutoModelForCausalLM.from_pretrained(varied_model_dir)
            assert all(t == g[: len(t)] for t, g in zip(
                response_tokens(before), greedy_continuations(original, before, R), strict=True))
            trained = _perturbed(varied_model_dir)
            rollout.update_weights(trained, step=1)  # the servers' weights: every worker's
            after = rollout.generate_sequences(prompts)
            assert all(t == g[: len(t)] for t, g in zip(
                response_tokens(after), greedy_continuations(trained, after, R), strict=True))
        finally:
            rollout.close()


@pytest.mark.parametrize("mode, verified", [("first_sync", [1, 0]), ("off", [0, 0])])
def test_verify_weights_modes(varied_model_dir, mode, verified):
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    config = _config(varied_model_dir, f"actor_rollout_ref.rollout.verify_weights={mode}")
    rollout = HybridRollout(config, tokenizer)
    try:
        trained = _perturbed(varied_model_dir)
        seen = []
        for step in (1, 2):
            rollout.update_weights(trained, step=step)
            seen.append(rollout.weights_verified)
        assert seen == verified
    finally:
        rollout.close()


def test_a_run_stops_when_the_engine_does_not_hold_the_weights(tmp_path, monkeypatch):
    """One tensor of the engine goes wrong after its update: the run stops, naming it."""
    from agentrl.distributed.worker import WorkerError
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.smoke import run_smoke

    update = HFBackend.update_weights

    async def corrupting_update(self, source, weight_version=None):
        await update(self, source, weight_version)
        if "model.norm.weight" in source:
            with torch.no_grad():
                self.model.model.norm.weight[0] += 0.5

    monkeypatch.setattr(HFBackend, "update_weights", corrupting_update)
    with pytest.raises(WorkerError, match="WeightMismatchError: rollout server hf \\(in process\\) "
                                          "does not hold the weights it was sent: tensor "
                                          "'model.norm.weight' differs"):
        run_smoke(tmp_path, steps=1, seed=0)
    assert not (tmp_path / "global_step_1").exists()  # it stopped before a checkpoint


def test_a_backend_with_its_own_transfer_gets_every_weight_once_per_sync(varied_model_dir,
                                                                        monkeypatch):  # fmt: skip
    """`weight_sync = "transfer"` (vLLM's NCCL/IPC): the backend's transfer is made once, at
    the first sync, with every gathered weight; each sync sends them labelled with the step
    (here the stand-in copies them into the in-process engine, as a server would receive
    them), and closing the rollout closes it."""
    from agentrl.rollout.backends.hf import HFBackend

    made = []

    class Transfer:
        def __init__(self, backend, weights, rank):
            self.backend, self.weights, self.rank = backend, weights, rank
            self.sent, self.closed = [], False

        def send(self, version, verify=False):
            state = dict(self.weights())
            asyncio.run_coroutine_threadsafe(
                self.backend.update_weights(state, weight_version=version), loop).result()
            self.sent.append((version, verify, len(state)))
            return 7 if verify else 0

        def close(self):
            self.closed = True

    def weight_transfer(self, weights, rank):
        made.append(Transfer(self, weights, rank))
        return made[-1]

    monkeypatch.setattr(HFBackend, "weight_sync", "transfer")
    monkeypatch.setattr(HFBackend, "weight_transfer", weight_transfer, raising=False)
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    rollout = HybridRollout(_config(varied_model_dir,
                                    "actor_rollout_ref.rollout.verify_weights=first_sync"),
                            tokenizer)  # fmt: skip
    loop = rollout.event_loop()
    try:
        assert rollout.weight_sync == "transfer"
        trained = _perturbed(varied_model_dir)
        seen = []
        for step in (1, 2):
            rollout.update_weights(trained, step=step)
            seen.append(rollout.weights_verified)
        (transfer,) = made
        tensors = len(dict(trained.state_dict()))  # every weight, the tied head once
        assert transfer.rank == 0 and seen == [7, 0]
        assert [(v, verify) for v, verify, _ in transfer.sent] == [("1", True), ("2", False)]
        assert transfer.sent[0][2] in (tensors, tensors - 1)
        after = rollout.generate_sequences(_prompts())
        assert all(t == g[: len(t)] for t, g in zip(
            response_tokens(after), greedy_continuations(trained, after, R), strict=True))
    finally:
        rollout.close()
    assert transfer.closed and rollout.transfer is None
