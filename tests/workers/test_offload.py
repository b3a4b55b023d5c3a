"""Offload (``fsdp_config.param_offload`` / ``optimizer_offload``) and the order of moves
around generation and update in the colocated (hybrid) worker.

On a CPU worker the device is the CPU, so nothing really moves; what these tests check is
which moves happen, in which order, and that offloading changes no number. The memory
they save on a GPU is measured by bench/gpu_step.py (docs/workers.md).
"""

from __future__ import annotations

import pytest
import torch

from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
from agentrl.protocol import DataProto
from agentrl.testing.workers import tiny_worker_config
from agentrl.workers import ActorRolloutRefWorker, CriticWorker
from agentrl.workers.offload import Residency, move_optimizer_state

P, R = 32, 8
SIZES = [f"data.max_prompt_length={P}", f"data.max_response_length={R}"]
OFFLOAD = [
    "actor_rollout_ref.actor.fsdp_config.param_offload=true",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    "actor_rollout_ref.ref.fsdp_config.param_offload=true",
]


def _prompts() -> DataProto:
    messages = [[{"role": "user", "content": t}] for t in ("what is 2+3?", "hello", "a b", "c")]
    return DataProto.from_dict(non_tensors={"raw_prompt": messages}, meta_info={"validate": True})


def test_residency_moves_only_what_the_keys_ask_and_returns_after_errors():
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    cpu = torch.device("cpu")

    nothing = Residency(model, optimizer, cpu)
    nothing.offload()
    with nothing.on_device(optimizer=True):
        pass
    assert nothing.moves == [] and not nothing.offloads

    both = Residency(model, optimizer, cpu, params=True, optimizer_state=True, name="actor")
    both.offload()
    both.offload()  # already there: no second move
    with pytest.raises(RuntimeError, match="boom"), both.on_device():
        raise RuntimeError("boom")
    assert both.moves == [
        ("actor.optimizer", "cpu"), ("actor.params", "cpu"),
        ("actor.params", "device"), ("actor.params", "cpu"),  # back after the error
    ]
    both.moves.clear()
    with both.on_device(optimizer=True):
        both.offload(params=False)  # the optimizer state leaves first
        assert both.describe() == {"params_on_device": True, "optimizer_on_device": False}
    assert both.moves == [
        ("actor.params", "device"), ("actor.optimizer", "device"),
        ("actor.optimizer", "cpu"), ("actor.params", "cpu"),
    ]
    # a reference model has no optimizer: optimizer_offload is moot
    assert not Residency(model, None, cpu, optimizer_state=True).optimizer_state


def test_optimizer_state_moves_but_scalars_stay():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = optimizer.state[model.weight]
    before = {k: v.clone() for k, v in state.items()}
    step = state["step"]
    move_optimizer_state(optimizer, "cpu")
    assert state["step"] is step  # AdamW's step counter is left where the optimizer put it
    for key, value in before.items():
        torch.testing.assert_close(state[key], value)


def _record_sleep_and_wake(backend, events: list) -> None:
    """Log the backend's release/resume calls into ``events`` (then make them)."""
    release, resume = backend.release_memory, backend.resume_memory

    async def released():
        events.append(("rollout", "release"))
        await release()

    async def resumed():
        events.append(("rollout", "resume"))
        await resume()

    backend.release_memory, backend.resume_memory = released, resumed


def _trajectories(group) -> DataProto:
    out = group.generate_sequences(_prompts())
    data = out.select(
        batch_keys=["prompts", "responses", "input_ids", "attention_mask", "position_ids",
                    "response_mask"],
        deepcopy=True,
    )
    data.batch["advantages"] = torch.linspace(-1, 1, len(data))[:, None] * data.batch[
        "response_mask"
    ]
    return data


def _step(group, data: DataProto) -> tuple[torch.Tensor, dict]:
    data = data.select(deepcopy=True)  # union adds to the batch in place
    data = data.union(group.compute_log_prob(data))
    data = data.union(group.compute_ref_log_prob(data))
    metrics = group.update_actor(data).meta_info["metrics"]
    return group.compute_log_prob(data).batch["old_log_probs"], metrics


def test_hybrid_worker_offloads_around_generation_and_update(varied_model_dir):
    overrides = [*SIZES, "actor_rollout_ref.actor.use_kl_loss=true",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=4", "data.train_batch_size=4"]
    results = {}
    for name, extra in (("resident", []), ("offload", OFFLOAD)):
        cfg = tiny_worker_config(varied_model_dir, [*overrides, *extra])
        spec = WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref,
                          role="actor_rollout_ref", seed=0)
        with InProcessWorkerGroup(spec) as group:
            group.init_model()
            worker = group.worker()
            events: list[tuple[str, str]] = []
            assert worker.actor_residency.moves == (
                [("actor.params", "cpu")] if extra else []
            )  # after init the GPU is the rollout's (the optimizer state does not exist yet)
            worker.actor_residency.moves = events
            worker.ref_residency.moves = events
            rollout = worker.rollout
            rollout.release_after_generation = True  # what a GPU does; a no-op call on CPU
            _record_sleep_and_wake(rollout.backend, events)
            data = _trajectories(group)
            log_probs, metrics = _step(group, data)
            results[name] = (data, log_probs, metrics["actor/pg_loss"])
            expected = [("rollout", "release")]
            if extra:
                expected += [
                    ("actor.params", "device"), ("actor.params", "cpu"),  # old log-probs
                    ("ref.params", "device"), ("ref.params", "cpu"),  # ref log-probs
                    ("actor.params", "device"),  # update ...
                    # (the optimizer state is created by the first step, on the device)
                    ("actor.optimizer", "cpu"),  # ... its state leaves before the engine wakes
                    ("rollout", "resume"), ("actor.params", "cpu"),  # weight sync, then out
                    ("actor.params", "device"), ("actor.params", "cpu"),  # log-probs after
                ]
            else:
                expected += [("rollout", "resume")]
            assert events == expected, name
            events.clear()
            _step(group, data)
            if extra:  # from the second update on, the optimizer state comes back first
                assert events[4:8] == [
                    ("actor.params", "device"), ("actor.optimizer", "device"),
                    ("actor.optimizer", "cpu"), ("actor.params", "cpu"),
                ]
    (d0, lp0, loss0), (d1, lp1, loss1) = results["resident"], results["offload"]
    assert torch.equal(d0.batch["responses"], d1.batch["responses"])
    torch.testing.assert_close(lp0, lp1, atol=0, rtol=0)  # offloading changes no number
    assert loss0 == loss1


def test_critic_offloads_between_uses(tiny_model_dir):
    cfg = tiny_worker_config(tiny_model_dir, [
        *SIZES, "critic.model.fsdp_config.param_offload=true",
        "critic.model.fsdp_config.optimizer_offload=true", "critic.ppo_mini_batch_size=4",
        "data.train_batch_size=4",
    ])
    from agentrl.testing.workers import make_trajectory_batch

    data = make_trajectory_batch(4, P, R, vocab_size=500, seed=0)
    with InProcessWorkerGroup(WorkerSpec(CriticWorker, cfg.critic, seed=0)) as group:
        group.init_model()
        residency = group.worker().residency
        assert residency.moves == [("critic.params", "cpu")]
        data = data.union(group.compute_values(data))
        data.batch["returns"] = torch.ones_like(data.batch["values"])
        group.update_critic(data)
        group.update_critic(data)
        assert residency.moves[1:] == [
            ("critic.params", "device"), ("critic.params", "cpu"),  # values
            ("critic.params", "device"), ("critic.optimizer", "cpu"), ("critic.params", "cpu"),
            ("critic.params", "device"), ("critic.optimizer", "device"),
            ("critic.optimizer", "cpu"), ("critic.params", "cpu"),
        ]
