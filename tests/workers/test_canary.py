"""The canary after each weight sync, against three real `agentrl serve` servers (the hf
engine behind SGLang's HTTP API, in threads): one server is given wrong weights at a sync
(its engine perturbs them after loading), is drained within that sync while the rollout goes
on on the other two, is sent the weights again and re-admitted once its canary passes."""

from __future__ import annotations

import contextlib

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.protocol import DataProto
from agentrl.testing.workers import tiny_worker_config
from agentrl.workers.canary import CanaryDivergence
from agentrl.workers.rollout import HybridRollout
from agentrl.workers.rollout_settings import RolloutSettings


def _trained(model_dir, seed: int) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.02 * torch.randn(param.shape, generator=generator))
    return model


def _prompts() -> DataProto:
    messages = [[{"role": "user", "content": t}] for t in ("2+3=?", "hello", "4*5", "hi")]
    return DataProto.from_dict(non_tensors={"raw_prompt": messages}, meta_info={"validate": True})


def _corrupt_loads(backend, times: int) -> list[int]:
    """Make `backend` perturb its weights after each of its next `times` loads (an engine
    that does not hold what it was sent); returns the list its generate calls are counted in."""
    load, generate, left, calls = backend.update_weights, backend.generate, [times], []

    async def update_weights(source, weight_version=None):
        await load(source, weight_version)
        if left[0] > 0:
            left[0] -= 1
            with torch.no_grad():
                for param in backend.model.parameters():
                    param.mul_(1.3)

    async def counted(*args, **kwargs):
        calls.append(1)
        return await generate(*args, **kwargs)

    backend.update_weights, backend.generate = update_weights, counted
    return calls


@contextlib.contextmanager
def _three_servers(model_dir):
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app
    from agentrl.utils.serving import serve_in_thread

    backends = [HFBackend.from_pretrained(model_dir) for _ in range(3)]
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_in_thread(create_app(b, model_path=str(model_dir)),
                                                    startup_timeout=30)) for b in backends]
        yield urls, backends


def _rollout(model_dir, urls, tmp_path, *overrides) -> HybridRollout:
    config = tiny_worker_config(model_dir, [
        "data.max_prompt_length=40", "data.max_response_length=8",
        "actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.request_timeout=60",
        f"actor_rollout_ref.rollout.server_urls=[{','.join(urls)}]",
        "actor_rollout_ref.rollout.canary_prompts=[[5,17,40,9,2],[11,3,7]]",
        "actor_rollout_ref.rollout.canary_length=6", *overrides,
    ]).actor_rollout_ref  # fmt: skip
    return HybridRollout(RolloutSettings.from_config(config),
                         AutoTokenizer.from_pretrained(model_dir),
                         weights_dir=tmp_path / "weights")  # fmt: skip


@pytest.mark.parametrize("verify", ["every_sync", "off"])
def test_a_server_given_wrong_weights_is_drained_reloaded_and_readmitted(
        varied_model_dir, tmp_path, verify):  # fmt: skip
    with _three_servers(varied_model_dir) as (urls, backends):
        rollout = _rollout(varied_model_dir, urls, tmp_path,
                           f"actor_rollout_ref.rollout.verify_weights={verify}")
        try:
            rollout.update_weights(_trained(varied_model_dir, 1), step=1)  # calibrates
            clean = rollout.canary_metrics
            assert clean["rollout/canary/drained"] == 0
            assert clean["rollout/canary/logprob_gap_max"] < 1e-4  # fp32: the same numbers
            assert clean["rollout/canary/kl_topk"] < 1e-6  # agentrl serve answers top-k
            assert clean["rollout/canary/threshold"] == 0.02  # the floor
            assert {f"rollout/canary/logprob_gap_max/server{i}" for i in range(3)} <= set(clean)

            _corrupt_loads(backends[1], times=1)  # the sync's load; its reload is sound
            rollout.update_weights(_trained(varied_model_dir, 2), step=2)
            step2 = rollout.canary_metrics
            assert step2["rollout/canary/drained"] == 1
            assert step2["rollout/canary/readmitted"] == 1
            assert step2["rollout/canary/servers_out"] == 0
            if verify == "off":  # the canary itself saw it
                assert step2["rollout/canary/logprob_gap_max/server1"] > 0.02
            assert rollout.backend.drained() == []

            calls = _corrupt_loads(backends[1], times=2)  # the sync's load and the reload
            rollout.update_weights(_trained(varied_model_dir, 3), step=3)
            step3 = rollout.canary_metrics
            assert (step3["rollout/canary/drained"], step3["rollout/canary/servers_out"]) == (1, 1)
            assert rollout.backend.drained() == [urls[1]]
            calls.clear()  # its canary calls (agentrl serve scores through /generate)
            out = rollout.generate_sequences(_prompts())  # the rollout goes on, elsewhere
            assert len(out) == 4 and calls == []

            rollout.update_weights(_trained(varied_model_dir, 4), step=4)
            step4 = rollout.canary_metrics
            assert (step4["rollout/canary/drained"], step4["rollout/canary/readmitted"]) == (0, 1)
            assert rollout.backend.drained() == []
        finally:
            rollout.close()


def test_a_server_given_other_weights_after_a_sync_is_drained_before_the_rollout(
        varied_model_dir, tmp_path):  # fmt: skip
    """Wrong weights posted to one server between two syncs (its own weight route, as an
    operator's mistake would): the rollout's version check finds it before generating,
    drains it, sends it the sync's weights again, re-scores it and re-admits it; the next
    sync's metrics count it."""
    import httpx

    wrong = tmp_path / "wrong"
    _trained(varied_model_dir, 9).save_pretrained(wrong)
    with _three_servers(varied_model_dir) as (urls, backends):
        rollout = _rollout(varied_model_dir, urls, tmp_path)
        try:
            trained = _trained(varied_model_dir, 1)
            rollout.update_weights(trained, step=1)
            httpx.post(f"{urls[2]}/update_weights_from_disk", json={"model_path": str(wrong)},
                       timeout=60).raise_for_status()  # fmt: skip
            assert backends[2].weight_version != "1"
            out = rollout.generate_sequences(_prompts())
            assert len(out) == 4
            assert backends[2].weight_version == "1"  # reloaded with the sync's weights
            served = backends[2].model.state_dict()
            assert all(torch.equal(served[k], v) for k, v in trained.state_dict().items())
            assert rollout.backend.drained() == []  # re-admitted: its canary passes
            rollout.update_weights(trained, step=2)
            assert rollout.canary_metrics["rollout/canary/drained"] == 1
            assert rollout.canary_metrics["rollout/canary/readmitted"] == 1
        finally:
            rollout.close()


def test_with_every_server_diverging_on_divergence_decides(varied_model_dir, tmp_path):
    with _three_servers(varied_model_dir) as (urls, backends):
        rollout = _rollout(varied_model_dir, urls[:1], tmp_path,
                           "actor_rollout_ref.rollout.verify_weights=off")
        try:
            rollout.update_weights(_trained(varied_model_dir, 1), step=1)
            _corrupt_loads(backends[0], times=2)
            with pytest.raises(CanaryDivergence, match="no rollout server matches.*on_divergence"):
                rollout.update_weights(_trained(varied_model_dir, 2), step=2)
        finally:
            rollout.close()


class _Servers:
    """A stand-in backend: each server answers the trainer's own log-probs plus its offset
    (``score_on`` raises NotImplementedError with ``unsupported``)."""

    def __init__(self, model, offsets: dict[str, float], unsupported: bool = False) -> None:
        self.model, self.offsets, self.unsupported = model, offsets, unsupported

    def canary_servers(self) -> list[str]:
        return list(self.offsets)

    async def score_on(self, server, ids, top_k=0, request_id=""):
        from agentrl.rollout.backends.base import BackendError
        from agentrl.workers.canary import trainer_canary

        if self.unsupported:
            raise NotImplementedError("this API does not score prompts")
        if self.offsets[server] is None:
            raise BackendError(f"{server}/generate: timed out")
        log_probs = trainer_canary(self.model, [ids], 0).log_probs[0]
        return [v + self.offsets[server] for v in log_probs], None


class _Loop:
    def run(self, coro):
        import asyncio

        return asyncio.run(coro)


def _watch(model_dir, backend, **settings):
    from agentrl.workers.canary import CanarySettings, CanaryWatch

    settings = CanarySettings(prompts=([5, 17, 40], [9, 2]), length=4, top_k=0, **settings)
    return CanaryWatch(settings, backend, _Loop(), AutoTokenizer.from_pretrained(model_dir))


def test_every_n_runs_at_syncs_1_and_1_plus_n_and_warn_trains_on(tiny_model_dir, caplog):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    backend = _Servers(model, {"s0": 0.0})
    watch = _watch(tiny_model_dir, backend, mode="every_n", every_n=2, on_divergence="warn")
    ran = [bool(watch.after_sync(model, n)) for n in range(1, 5)]
    assert ran == [True, False, True, False]
    backend.offsets["s0"] = 0.5  # the one server diverges: nothing to drain to
    metrics = watch.after_sync(model, 5)
    assert metrics["rollout/canary/logprob_gap_max"] == pytest.approx(0.5, abs=1e-4)
    assert metrics["rollout/canary/drained"] == 0
    assert "training goes on (actor_rollout_ref.rollout.on_divergence=warn)" in caplog.text


def test_a_server_whose_canary_call_fails_is_not_judged(tiny_model_dir, caplog):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    backend = _Servers(model, {"s0": 0.0})
    watch = _watch(tiny_model_dir, backend)  # on_divergence: stop
    assert watch.after_sync(model, 1)["rollout/canary/unscored"] == 0
    backend.offsets["s0"] = None  # busy: its calls time out
    busy = watch.after_sync(model, 2)  # no stop, no drain, no gap to report
    assert busy["rollout/canary/unscored"] == 1 and set(busy) == {
        "rollout/canary/unscored", "timing/canary_s"}
    assert "did not score the canary: s0/generate: timed out" in caplog.text
    backend.offsets["s0"] = 0.0
    assert watch.after_sync(model, 3)["rollout/canary/drained"] == 0


def test_a_backend_that_cannot_score_prompts_runs_no_canary(tiny_model_dir, caplog):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    watch = _watch(tiny_model_dir, _Servers(model, {"s0": 0.0}, unsupported=True))
    assert watch.after_sync(model, 1) == {} and not watch.enabled
    assert "no canary on this backend" in caplog.text


@pytest.mark.slow
def test_a_clean_25_step_run_on_three_agentrl_serve_servers_drains_nothing(tmp_path):
    """The issue's false-alarm check: GRPO on the smoke's task (nano model), the rollout on
    three `agentrl serve` servers, the canary after each of its 25 syncs."""
    from agentrl.models.tiny import make_tiny_model
    from agentrl.smoke import run_smoke

    model_dir = tmp_path / "run" / "model"  # where the smoke finds (or makes) its model
    make_tiny_model(model_dir, size="nano", seed=0)
    with _three_servers(model_dir) as (urls, _):
        history = run_smoke(tmp_path / "run", steps=25, size="nano", overrides=[
            "actor_rollout_ref.rollout.name=sglang", "trainer.logger=[file]", "trainer.total_epochs=2",
            f"actor_rollout_ref.rollout.server_urls=[{','.join(urls)}]"])  # fmt: skip
    assert len(history) == 25
    assert all(m["rollout/weights_verified"] == 3 for m in history)
    assert sum(m["rollout/canary/drained"] for m in history) == 0
    assert all(m["rollout/canary/servers_out"] == 0 for m in history)
    worst = max(m["rollout/canary/logprob_gap_max"] for m in history)
    assert worst < history[0]["rollout/canary/threshold"], worst
