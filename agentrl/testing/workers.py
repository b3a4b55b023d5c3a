"""Synthetic trajectory batches and small configs for worker tests and benchmarks.

    batch = make_trajectory_batch(8, prompt_length=16, response_length=32, vocab_size=1000)
    cfg = tiny_worker_config(model_dir, ["actor_rollout_ref.actor.ppo_mini_batch_size=4"])

A batch has the layout the rollout engine returns: left-padded prompts, right-padded
responses whose ``response_mask`` is 0 on "tool" spans (multi-turn) and on padding, plus
``advantages``. Lengths are drawn between the given bounds, so a batch can have the length
variance of multi-turn rollouts (``min_response_fraction=0.25``: a 4x spread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.protocol import DataProto


def make_trajectory_batch(
    n: int,
    prompt_length: int,
    response_length: int,
    vocab_size: int,
    seed: int = 0,
    min_prompt_fraction: float = 0.5,
    min_response_fraction: float = 0.25,
    tool_spans: bool = True,
) -> DataProto:
    """``n`` random trajectories (see the module docstring); token ids avoid id 0 (pad)."""
    rng = np.random.default_rng(seed)
    P, R = prompt_length, response_length
    prompt_lens = rng.integers(max(1, int(P * min_prompt_fraction)), P + 1, size=n)
    response_lens = rng.integers(max(1, int(R * min_response_fraction)), R + 1, size=n)
    prompts = torch.zeros((n, P), dtype=torch.long)
    responses = torch.zeros((n, R), dtype=torch.long)
    prompt_mask = torch.zeros((n, P), dtype=torch.long)
    response_attention = torch.zeros((n, R), dtype=torch.long)
    response_mask = torch.zeros((n, R), dtype=torch.long)
    for i in range(n):
        p, r = int(prompt_lens[i]), int(response_lens[i])
        prompts[i, P - p :] = torch.from_numpy(rng.integers(1, vocab_size, size=p))
        prompt_mask[i, P - p :] = 1
        responses[i, :r] = torch.from_numpy(rng.integers(1, vocab_size, size=r))
        response_attention[i, :r] = 1
        response_mask[i, :r] = 1
        if tool_spans and r >= 6:  # a tool response in the middle: not the model's tokens
            start = int(rng.integers(1, r // 2))
            response_mask[i, start : start + max(1, r // 4)] = 0
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)  # (n, P + R)
    advantages = torch.from_numpy(rng.normal(size=(n, R)).astype(np.float32)) * response_mask
    return _trajectories(prompts, responses, attention_mask, response_mask, advantages,
                         [str(i // 2) for i in range(n)])


def _trajectories(prompts: torch.Tensor, responses: torch.Tensor, attention_mask: torch.Tensor,
                  response_mask: torch.Tensor, advantages: torch.Tensor,
                  uids: list[str]) -> DataProto:  # fmt: skip
    """The batch of the engine's layout from its padded parts (``input_ids`` and
    ``position_ids`` derived)."""
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": torch.clamp(attention_mask.cumsum(-1) - 1, min=0),
            "response_mask": response_mask,
            "advantages": advantages,
        },
        non_tensors={"uid": uids},
    )


def batch_from_rows(rows: Sequence[tuple[Sequence[int], Sequence[int]]], seed: int = 0) -> DataProto:
    """A trajectory batch of given rows, each ``(prompt ids, response ids)``: prompts
    left-padded and responses right-padded to the longest, ``response_mask`` 1 on every
    response token, random ``advantages`` on them, and the rows' ``uid`` (row index)."""
    n = len(rows)
    P = max(len(p) for p, _ in rows)
    R = max(len(r) for _, r in rows)
    prompts = torch.zeros((n, P), dtype=torch.long)
    responses = torch.zeros((n, R), dtype=torch.long)
    attention_mask = torch.zeros((n, P + R), dtype=torch.long)
    for i, (prompt, response) in enumerate(rows):
        prompts[i, P - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
        responses[i, : len(response)] = torch.as_tensor(list(response), dtype=torch.long)
        attention_mask[i, P - len(prompt) : P + len(response)] = 1
    response_mask = attention_mask[:, P:].clone()
    generator = torch.Generator().manual_seed(seed)
    advantages = torch.randn((n, R), generator=generator) * response_mask
    return _trajectories(prompts, responses, attention_mask, response_mask, advantages,
                         [str(i) for i in range(n)])


def grpo_group_rows(n: int, prompt_length: int, response_length: int, vocab_size: int,
                    seed: int = 0) -> list[tuple[list[int], list[int]]]:  # fmt: skip
    """``n`` rows of one GRPO group: one prompt, ``n`` random responses (lengths between
    half and all of ``response_length``)."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, vocab_size, size=prompt_length).tolist()
    lengths = rng.integers(max(1, response_length // 2), response_length + 1, size=n)
    return [(prompt, rng.integers(1, vocab_size, size=int(k)).tolist()) for k in lengths]


def forked_session_rows(segments: int, prompt_length: int, turn_length: int, vocab_size: int,
                        seed: int = 0) -> list[tuple[list[int], list[int]]]:  # fmt: skip
    """The rows of one agent session whose history is rewritten ``segments - 1`` times: a
    segment's prompt is its parent's tokens up to a branch point (past the parent's
    prompt, inside its response) plus an edited turn; each row's response is
    ``turn_length`` x 4 tokens. Each fork branches from the segment before it."""
    rng = np.random.default_rng(seed)
    rows = [(rng.integers(1, vocab_size, size=prompt_length).tolist(),
             rng.integers(1, vocab_size, size=4 * turn_length).tolist())]  # fmt: skip
    for _ in range(segments - 1):
        prompt, response = rows[-1]
        history = prompt + response
        branch = len(prompt) + int(rng.integers(turn_length, 3 * turn_length))
        edited = rng.integers(1, vocab_size, size=turn_length).tolist()
        rows.append((history[:branch] + edited,
                     rng.integers(1, vocab_size, size=4 * turn_length).tolist()))  # fmt: skip
    return rows


def tiny_worker_config(model_dir: str | Path, overrides: Sequence[str] = ()) -> Any:
    """The full validated config for a tiny model with single-process-friendly sizes."""
    from agentrl.config import load_config

    return load_config(
        overrides=[
            f"actor_rollout_ref.model.path={model_dir}",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.n_gpus_per_node=1",
            *overrides,
        ]
    )


def assert_missing_key_named(build: Callable[[dict[str, Any]], Any], tree: dict[str, Any],
                             key: str, path: str) -> None:  # fmt: skip
    """Delete the dotted `key` from `tree` (a plain section) and check that `build(tree)`
    (a settings `from_config`) raises `RolloutConfigError` naming `path.key` in full."""
    from agentrl.rollout.engine_config import RolloutConfigError

    *parents, name = key.split(".")
    node = tree
    for parent in parents:
        node = node[parent]
    del node[name]
    try:
        build(tree)
    except RolloutConfigError as err:
        assert str(err).startswith(f"{path}.{key} is missing"), str(err)
    else:
        raise AssertionError(f"{path}.{key} missing, yet {build} raised nothing")


def reference_log_probs(model: Any, data: DataProto) -> torch.Tensor:
    """Response log-probs (B, R) from one plain forward pass of an unsharded HF causal LM
    over the whole padded batch: the single-process reference, 0 on response padding."""
    from agentrl.algos import logprobs_from_logits

    batch = data.batch
    response_length = batch["responses"].shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits  # (B, P + R, V)
    logits = logits[:, -response_length - 1 : -1].float()  # (B, R, V)
    log_probs = logprobs_from_logits(logits, batch["responses"])
    return log_probs * batch["attention_mask"][:, -response_length:]


def greedy_continuations(model: Any, data: DataProto, max_new_tokens: int) -> list[list[int]]:
    """For every rollout row, the unsharded model's own greedy continuation of its prompt
    (unpadded, one row at a time, not stopping at EOS)."""
    prompt_length = data.batch["prompts"].shape[1]
    out = []
    with torch.no_grad():
        for i in range(len(data)):
            valid = data.batch["attention_mask"][i, :prompt_length].bool()
            ids = data.batch["prompts"][i][valid][None]  # (1, p)
            generated = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
            out.append(generated[0, ids.shape[1] :].tolist())
    return out


def response_tokens(data: DataProto) -> list[list[int]]:
    """Each row's response ids without padding."""
    lengths = data.batch["attention_mask"][:, -data.batch["responses"].shape[1] :].sum(-1)
    return [data.batch["responses"][i, : int(n)].tolist() for i, n in enumerate(lengths)]


def shared_prefix_rank(rank: int, world_size: int, store: str, model_dir: str,
                       out_dir: str) -> None:  # fmt: skip
    """One rank of the sharded shared-prefix check (``torch.multiprocessing.spawn`` target).

    Shards the tiny model with FSDP2 over ``world_size`` gloo ranks; each rank takes a GRPO
    group of its own (and a forked session on rank 0), computes response log-probs and
    entropy flat and with shared prefixes (several forwards before one backward), and
    writes ``{out_dir}/rank{r}.json``: the largest log-prob difference, the largest
    difference of the full (gathered) gradients, and the passes each path ran."""
    import json

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from agentrl.workers.forward import response_log_probs
    from agentrl.workers.fsdp import device_mesh, shard_model

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size)  # fmt: skip
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir).train()
        shard_model(model, device_mesh(world_size, torch.device("cpu")), None)
        vocab = model.config.vocab_size
        rows = grpo_group_rows(4, 40 + 4 * rank, 8, vocab, seed=rank)
        if rank == 0:
            rows += forked_session_rows(3, 24, 16, vocab, seed=9)
        batch = batch_from_rows(rows).batch
        passes: list[int] = []
        model.model.register_forward_pre_hook(lambda *_: passes.append(1))
        results = []
        for shared in (False, True):
            passes.clear()
            model.zero_grad(set_to_none=True)
            log_probs, entropy = response_log_probs(model, batch, entropy=True, entropy_grad=True,
                                                    shared_prefix=shared)  # fmt: skip
            weights = torch.linspace(-1, 1, log_probs.numel()).reshape(log_probs.shape)
            (log_probs * weights + 0.1 * entropy).sum().backward()
            grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
            results.append((log_probs.detach(), grads, len(passes)))
        (flat, flat_grads, flat_passes), (shared, shared_grads, shared_passes) = results
        grad_diff = max(float((shared_grads[n] - g).abs().max() / max(g.abs().max(), 1e-3))
                        for n, g in flat_grads.items())  # fmt: skip
        with open(Path(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"log_prob_diff": float((shared - flat).abs().max()),
                       "relative_grad_diff": grad_diff, "flat_passes": flat_passes,
                       "shared_passes": shared_passes}, f)  # fmt: skip
    finally:
        dist.destroy_process_group()


def bucketed_sync_rank(
    rank: int, world_size: int, store: str, model_dir: str, bucket_bytes: int, out_dir: str,
    serve_url: str | None = None,
) -> None:
    """One rank of the sharded weight-sync check (``torch.multiprocessing.spawn`` target).

    Shards the model with FSDP2 over ``world_size`` gloo ranks, changes the actor's weights,
    streams them with ``iter_full_weights`` into this rank's own hf engine, and writes
    ``{out_dir}/rank{r}.json``: whether the engine's weights equal the actor's gathered
    ones, the bytes of every bucket, the largest tensor, the names sent, and how many
    tensors of earlier buckets were still alive when each bucket arrived. With
    ``serve_url`` rank 0 then has that server (``agentrl serve`` or SGLang) load the
    exported shards through the SGLang client's ``update_weights`` (weight version "1").
    """
    import asyncio
    import gc
    import json
    import weakref

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from agentrl.config import load_config
    from agentrl.rollout.backends.factory import create_backend, prompt_scorer
    from agentrl.workers.checkpoint import export_hf
    from agentrl.workers.fsdp import device_mesh, full_state_dict, iter_full_weights, shard_model

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size)
    try:
        torch.manual_seed(0)
        actor = AutoModelForCausalLM.from_pretrained(model_dir)
        shard_model(actor, device_mesh(world_size, torch.device("cpu")), None)
        with torch.no_grad():
            for param in actor.parameters():  # each rank changes its own shard
                param.mul_(1.5).add_(0.01)
        rollout = load_config(overrides=["actor_rollout_ref.rollout.engine_kwargs.device=cpu"])
        # the default backend (the embedded engine), as a rollout builds it
        engine = create_backend(rollout.actor_rollout_ref.rollout, model_dir, None)
        earlier: list[weakref.ref] = []
        alive, sizes, names = [], [], []
        largest = 0
        for bucket in iter_full_weights(actor, bucket_bytes):
            gc.collect()
            alive.append(sum(ref() is not None for ref in earlier))
            sizes.append(sum(t.numel() * t.element_size() for t in bucket.values()))
            largest = max([largest, *(t.numel() * t.element_size() for t in bucket.values())])
            names += list(bucket)
            asyncio.run(engine.update_weights(bucket, weight_version="1"))
            earlier += [weakref.ref(t) for t in bucket.values()]
            del bucket
        expected = full_state_dict(actor)
        got = engine.model.state_dict()
        equal = all(torch.equal(got[k], v) for k, v in expected.items())
        result = {"equal": equal, "sizes": sizes, "largest": largest, "names": names,
                  "alive": alive, "n_expected": len(expected),
                  "tied": torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"])}
        # the SGLang path: rank 0 writes a shard per bucket; a fresh load reads the actor
        export = Path(out_dir, "export")
        export_hf(export, actor, bucket_bytes=bucket_bytes)
        if rank == 0:
            loaded = AutoModelForCausalLM.from_pretrained(export).state_dict()
            result["export_equal"] = all(torch.equal(loaded[k], v) for k, v in expected.items())
            result["export_shards"] = len(list(export.glob("model-*-of-*.safetensors")))
            if serve_url is not None:
                async def push() -> None:
                    client = prompt_scorer([serve_url], 60)  # an agentrl serve client
                    try:
                        await client.update_weights(str(export), weight_version="1")
                    finally:
                        await client.aclose()

                asyncio.run(push())
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def launched_servers_rank(
    rank: int, world_size: int, store: str, model_dir: str, out_dir: str,
    overrides: list[str], fake_gpus: list[str] | None = None, blind: bool = False,
) -> None:
    """One rank of the check of servers the ranks launch (``torch.multiprocessing.spawn``
    target): join ``world_size`` gloo ranks on one node, build a ``HybridRollout`` with the
    config ``overrides`` (``rollout.name=sglang``, ``server_urls`` empty, a
    ``launch_command``), change the FSDP2-sharded actor's weights and sync them (step 1).
    Writes ``{out_dir}/rank{r}.json``: the rank's server URLs, whether it sends them the
    weights, its weights directory, and the weight version each server reports. ``fake_gpus``
    stands for the GPU each rank would have (CUDA_VISIBLE_DEVICES names); ``blind``: no rank
    but 0 sees files in ``rollout.weights_dir`` (as on another node without the mount); a
    start that fails writes ``{"error": ...}``."""
    import json
    import os

    import httpx
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.workers import rollout_servers
    from agentrl.workers.fsdp import device_mesh, shard_model
    from agentrl.workers.rollout import HybridRollout
    from agentrl.workers.rollout_settings import RolloutSettings

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size))  # fmt: skip
    if fake_gpus is not None:
        rollout_servers.rank_gpus = lambda: [fake_gpus[rank]]
    if blind and rank > 0:
        rollout_servers._sees = lambda path: False
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size)  # fmt: skip
    result: dict[str, Any] = {}
    try:
        config = tiny_worker_config(model_dir, overrides).actor_rollout_ref
        actor = AutoModelForCausalLM.from_pretrained(model_dir)
        shard_model(actor, device_mesh(world_size, torch.device("cpu")), None)
        with torch.no_grad():
            for param in actor.parameters():
                param.mul_(1.5).add_(0.01)
        try:
            rollout = HybridRollout(RolloutSettings.from_config(config),
                                    AutoTokenizer.from_pretrained(model_dir))
        except ValueError as exc:
            result = {"error": str(exc)}
            return
        try:
            rollout.update_weights(actor, step=1)
            urls = list(rollout.backend.server_urls)
            result = {
                "urls": urls,
                "sends": bool(rollout.disk_sync.sends),
                "weights_dir": str(rollout.weights_dir),
                "versions": [httpx.get(f"{u}/get_weight_version", timeout=30).json()
                             ["weight_version"] for u in urls],  # fmt: skip
            }
            dist.barrier()  # every rank asked before any server stops
        finally:
            rollout.close()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
        dist.destroy_process_group()
