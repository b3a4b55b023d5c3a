"""The scripted backend: a trajectory's k-th call answers with line k of the replies file,
tokenized exactly; its plugin's config checks; the rollout engine driven by it."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentrl.rollout.backends import BackendError
from agentrl.rollout.backends.factory import create_backend
from agentrl.rollout.backends.registry import backend_plugin, backend_problems, weight_sync_of
from agentrl.rollout.backends.scripted import ScriptedBackend, read_replies
from agentrl.testing.rollout import call_text, make_tools, prompts_batch, rollout_config, run_batch


def _replies(tmp_path, *lines) -> str:
    path = tmp_path / "replies.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return str(path)


def _generate(backend, request_id, params=None):
    params = {"max_new_tokens": 100, **(params or {})}
    return asyncio.run(backend.generate([1, 2, 3], params, request_id))


def test_read_replies_takes_strings_and_text_objects_and_names_bad_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('"one"\n\n{"text": "two", "note": 1}\n')
    assert read_replies(path) == ["one", "two"]
    path.write_text('"one"\n{"content": "x"}\n')
    with pytest.raises(ValueError, match=r"r.jsonl:2: a reply must be a JSON string"):
        read_replies(path)
    path.write_text("not json\n")
    with pytest.raises(ValueError, match=r"r.jsonl:1: not JSON"):
        read_replies(path)
    with pytest.raises(ValueError, match="engine_kwargs.replies: no file"):
        read_replies(tmp_path / "missing.jsonl")


def test_each_trajectory_gets_line_k_on_its_kth_call(tiny_tokenizer, tmp_path):
    backend = ScriptedBackend.from_file(_replies(tmp_path, "first", {"text": "second"}),
                                        tiny_tokenizer)
    first = _generate(backend, "ab-0-0-t0-a0")
    assert first.output_ids == tiny_tokenizer.encode("first", add_special_tokens=False)
    assert first.finish_reason == "stop" and first.output_log_probs == [0.0] * len(
        first.output_ids)
    # another trajectory starts at line 0; a retried attempt of turn 1 gets line 1 again
    assert _generate(backend, "ab-1-0-t0-a0").text == "first"
    assert _generate(backend, "ab-0-0-t1-a0").text == "second"
    assert _generate(backend, "ab-0-0-t1-a1").text == "second"
    # the gateway's ids have the same shape, side calls their own trajectory
    assert _generate(backend, "episode-3-t1-a0").text == "second"
    assert _generate(backend, "episode-3~side-t0-a0").text == "first"
    # an id of another shape is its own trajectory, lines in call order
    assert [_generate(backend, "plain").text for _ in range(2)] == ["first", "second"]
    with pytest.raises(BackendError, match=r"trajectory 'plain' asked for reply 3 but "
                                           r".*replies.jsonl has 2"):
        _generate(backend, "plain")
    assert [rid for rid, _ in backend.outputs][:2] == ["ab-0-0-t0-a0", "ab-1-0-t0-a0"]


def test_a_stop_token_is_appended_and_max_new_tokens_cuts(tiny_tokenizer):
    backend = ScriptedBackend(["hello world"], tiny_tokenizer)
    ids = tiny_tokenizer.encode("hello world", add_special_tokens=False)
    eos = tiny_tokenizer.eos_token_id
    out = _generate(backend, "a-t0-a0", {"stop_token_ids": [eos]})
    assert out.output_ids == [*ids, eos] and out.finish_reason == "stop"
    ended = ScriptedBackend([tiny_tokenizer.decode([*ids, eos])], tiny_tokenizer)
    assert _generate(ended, "a-t0-a0", {"stop_token_ids": [eos]}).output_ids == [*ids, eos]
    cut = _generate(backend, "b-t0-a0", {"max_new_tokens": 2})
    assert cut.output_ids == ids[:2] and cut.finish_reason == "length"


def test_the_plugin_checks_replies_and_builds_the_backend(tiny_tokenizer, tmp_path):
    plugin = backend_plugin("scripted")
    assert backend_problems({"name": "scripted", "engine_kwargs": {}}) == [
        "actor_rollout_ref.rollout.engine_kwargs.replies is required by rollout.name=scripted: "
        "the JSONL file of assistant texts"]
    missing = str(tmp_path / "nope.jsonl")
    assert plugin.config_problems({"engine_kwargs": {"replies": missing, "seed": 1}}) == [
        "actor_rollout_ref.rollout.engine_kwargs has seed: the scripted backend takes only "
        "replies",
        f"actor_rollout_ref.rollout.engine_kwargs.replies is {missing!r}: no such file"]
    path = _replies(tmp_path, "hi")
    backend = create_backend({"name": "scripted", "engine_kwargs": {"replies": path},
                              "server_urls": []}, None, tiny_tokenizer)  # fmt: skip
    assert isinstance(backend, ScriptedBackend) and backend.replies == ["hi"]
    assert weight_sync_of(backend) == "state_dict"
    asyncio.run(backend.update_weights({}, weight_version="7"))
    assert backend.weight_version == 7 and asyncio.run(backend.verify_weights({})) == 0
    assert _generate(backend, "x-t0-a0").weight_version == 7


def test_the_config_validator_names_a_missing_replies_file():
    from agentrl.config import load_config

    with pytest.raises(ValueError, match="engine_kwargs.replies is required"):
        load_config(overrides=["actor_rollout_ref.rollout.name=scripted"])


def test_the_rollout_engine_driven_by_replies_records_them_token_exact(tiny_tokenizer,
                                                                       tmp_path):
    from agentrl.rollout.engine import AsyncRolloutEngine

    path = _replies(tmp_path, call_text("echo", "hi") + "<|im_end|>", "done<|im_end|>")
    backend = ScriptedBackend.from_file(path, tiny_tokenizer)
    collected = []
    run_batch(AsyncRolloutEngine(rollout_config(), tiny_tokenizer, backend, make_tools()),
        prompts_batch(2, tools_kwargs={"echo": {}}), collected)
    assert len(collected) == 2
    for request in collected:
        trained = [t for t, m in zip(request.input_ids, request.loss_mask, strict=True) if m]
        outputs = [ids for rid, ids in backend.outputs if rid.startswith(request.request_id)]
        assert len(outputs) == 2 and trained == outputs[0] + outputs[1]
        assert tiny_tokenizer.decode(outputs[1]).startswith("done")
