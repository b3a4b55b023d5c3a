"""The scoring stage's functions: uids, failed rollouts as their own group, the reward
(model and function) and ReMax's greedy baseline, on hand-made batches."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl.algos import compute_advantage
from agentrl.protocol import DataProto
from agentrl.trainer.scoring import greedy_baseline, isolate_failed, prompt_batch, score


def _group_batch(states):
    rewards = torch.zeros(len(states), 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.0])[: len(states)]
    mask = torch.ones(len(states), 3)
    for i, state in enumerate(states):
        if state == "failed":
            mask[i] = 0
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": ["a"] * len(states), "request_state": states},
    )


def test_failed_trajectories_leave_their_group_statistics():
    data = _group_batch(["completed", "completed", "completed", "failed"])
    assert isolate_failed(data) == 1
    assert list(data.non_tensor_batch["uid"]) == ["a", "a", "a", "a/failed-3"]
    adv = compute_advantage(data, "grpo").batch["advantages"]
    # the same as a group of the three finished samples alone: rewards 1, 0, 0.5
    alone = compute_advantage(_group_batch(["completed"] * 3), "grpo").batch["advantages"]
    torch.testing.assert_close(adv[:3], alone)
    assert adv[:3, 0].tolist() == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)  # std 0.5
    assert adv[3].abs().sum() == 0  # masked out of the loss
    assert isolate_failed(_group_batch(["completed", "completed"])) == 0


def test_prompt_batch_uids_are_the_step_and_row_and_carry_the_round():
    batch_dict = {"input_ids": torch.zeros(3, 2, dtype=torch.long),
                  "index": np.array([7, 8, 9], dtype=object)}  # fmt: skip
    first = prompt_batch(batch_dict, step=4, round_=0, temperature=0.7)
    assert list(first.non_tensor_batch["uid"]) == ["4-0", "4-1", "4-2"]
    assert first.meta_info == {"temperature": 0.7, "global_steps": 4}
    again = prompt_batch(batch_dict, step=4, round_=2, temperature=1.0)
    assert list(again.non_tensor_batch["uid"]) == ["4.2-0", "4.2-1", "4.2-2"]


class _RewardFn:
    def __init__(self, totals):
        self.totals = totals
        self.seen = []

    def __call__(self, data, return_dict=False):
        assert return_dict
        self.seen.append(data)
        tensor = torch.zeros(len(data), 2)
        tensor[:, -1] = torch.tensor(self.totals[: len(data)])
        return {"reward_tensor": tensor,
                "reward_extra_info": {"acc": [t > 0 for t in self.totals[: len(data)]]}}


class _RewardModel:
    def compute_rm_score(self, data):
        return DataProto.from_dict(tensors={"rm_scores": torch.full((len(data), 2), 0.5)})


def test_score_adds_the_reward_model_first_then_the_reward_and_its_extra_keys():
    data = DataProto.from_dict(tensors={"responses": torch.zeros(2, 2)})
    reward_fn = _RewardFn([1.0, 0.0])
    scored = score(data, reward_fn, _RewardModel())
    assert "rm_scores" in reward_fn.seen[0].batch.keys()  # the function saw the model's score
    assert scored.batch["token_level_scores"][:, -1].tolist() == [1.0, 0.0]
    assert list(scored.non_tensor_batch["reward_extra_info"]) == [{"acc": True}, {"acc": False}]
    plain = score(DataProto.from_dict(tensors={"responses": torch.zeros(2, 2)}), _RewardFn([0, 1]))
    assert "rm_scores" not in plain.batch.keys()


class _GreedyActor:
    def __init__(self):
        self.batches = []

    def generate_sequences(self, batch):
        self.batches.append(batch)
        return batch


def test_greedy_baseline_is_one_validation_sample_per_prompt_repeated_n_times():
    batch = DataProto.from_dict(tensors={"input_ids": torch.zeros(2, 3)},
                                meta_info={"temperature": 1.0})  # fmt: skip
    actor = _GreedyActor()
    baseline = greedy_baseline(actor, _RewardFn([1.0, 0.25]), batch, n_rows=6)
    assert baseline.tolist() == [1.0, 1.0, 1.0, 0.25, 0.25, 0.25]
    assert actor.batches[0].meta_info["validate"] is True  # val_kwargs: greedy, n = 1
    assert "validate" not in batch.meta_info  # the training batch is untouched


def test_an_unscored_sample_is_a_failed_row_never_a_zero_in_its_group():
    """A judge that failed on row 3 (SCORE_FAILED_KEY): the row leaves its group, trains
    nothing and counts in training/score_failed; the others' advantages are those of their
    group alone."""
    from agentrl.protocol import SCORE_FAILED_KEY
    from agentrl.trainer.metrics import _score_failed

    data = _group_batch(["completed"] * 4)
    data.batch["responses"] = torch.zeros(4, 3, dtype=torch.long)

    def judged(batch, return_dict):
        tensor = torch.zeros(4, 3)
        tensor[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.0])
        return {"reward_tensor": tensor, "reward_extra_info": {
            "judge_score": [1.0, 0.0, 0.5, None],
            SCORE_FAILED_KEY: [None, None, None, "judge: ReadTimeout"]}}

    out = score(data, judged)
    assert list(out.non_tensor_batch["request_state"]) == ["completed"] * 3 + ["failed"]
    assert out.non_tensor_batch["uid"][3] == "a/failed-3"
    assert out.batch["response_mask"][3].sum() == 0 and out.batch["token_level_scores"][3].sum() == 0
    assert _score_failed(out) == 1
    out.batch["token_level_rewards"] = out.batch["token_level_scores"]
    adv = compute_advantage(out, "grpo").batch["advantages"]
    alone = compute_advantage(_group_batch(["completed"] * 3), "grpo").batch["advantages"]
    torch.testing.assert_close(adv[:3], alone)
    assert adv[3].abs().sum() == 0


# ------------------------------------------------------------ infrastructure failures
# A step's rollout through the real engine with real tools whose services fail (a retriever
# killed mid-step, a sandbox that crashes, a tool that times out) and an LLM judge that
# answers HTTP 500; then the trainer's scoring stage and GRPO (tests/rollout fixtures).

ANSWERS = {  # conversation -> its model turns (the answer's number is the judge's score)
    0: ['<tool_call>{"name": "search", "arguments": {"query_list": ["Paris"]}}</tool_call>',
        "<answer>0.9</answer>"],
    1: ['<tool_call>{"name": "search", "arguments": {"query_list": ["Paris"]}}</tool_call>',
        '<tool_call>{"name": "search", "arguments": {"query_list": ["Rome"]}}</tool_call>',
        "<answer>1</answer>"],  # its second search finds the retriever killed
    2: ['<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(1)"}}</tool_call>',
        "<answer>0.2</answer>"],
    3: ['<tool_call>{"name": "code_interpreter", "arguments": {"code": "crash()"}}</tool_call>',
        "<answer>1</answer>"],  # the sandbox crashes (HTTP 500)
    4: ['<tool_call>{"name": "hang", "arguments": {"text": "x"}}</tool_call>',
        "<answer>1</answer>"],  # the tool times out (2.5 s: a loaded machine still answers a search within it)
    5: ["<answer>broken</answer>"],  # the judge answers HTTP 500
    6: ["<answer>0.7</answer>"],
    7: ["<answer>0.1</answer>"],
    8: ["<answer>0.6</answer>"],
    9: ['<tool_call>{"name": "hang", "arguments": {"text": "y"}}</tool_call>',
        "<answer>1</answer>"],
}
GROUPS = ["g1"] * 4 + ["g2"] * 4 + ["g3"] * 2  # g3 keeps one valid member: dropped
INFRA = {1: "search", 3: "code_interpreter", 4: "hang", 5: "judge", 9: "hang"}


def _services():
    """A real retriever, a sandbox that crashes on `crash()`, a judge that 500s on
    `broken` and otherwise scores the answer's number."""
    from envs.retriever.index import build_index
    from envs.retriever.sample import sample_corpus, write_corpus

    sandbox = FastAPI()

    @sandbox.post("/run_code")
    async def run_code(request: Request):
        body = await request.json()
        if "crash" in body["code"]:
            return JSONResponse({"detail": "worker died"}, status_code=500)
        return {"status": "Success", "message": "", "run_result": {
            "status": "Finished", "stdout": "1\n", "stderr": "", "return_code": 0,
            "execution_time": 0.01}}

    judge = FastAPI()

    @judge.post("/v1/chat/completions")
    async def chat(request: Request):
        prompt = (await request.json())["messages"][0]["content"]
        found = re.search(r"final answer: (\S+)", prompt)
        answer = found.group(1) if found else "0"  # a failed row has no answer: not an error
        if answer == "broken":
            return JSONResponse({"error": "boom"}, status_code=500)
        return {"choices": [{"message": {"role": "assistant", "content": f"Score: {answer}"}}]}

    return build_index, sample_corpus, write_corpus, sandbox, judge


def _infra_step(tiny_tokenizer, tmp_path, on_infra_error):
    """The scored batch of one step whose services fail as ANSWERS says (module comment)."""
    import contextlib

    from agentrl.config import load_config
    from agentrl.reward import load_reward_manager
    from agentrl.rollout import AsyncRolloutEngine
    from agentrl.testing.rollout import (
        ConversationScriptBackend,
        prompts_batch,
        rollout_config,
        run_batch,
    )
    from agentrl.trainer.scoring import settle_infra_failures
    from agentrl.utils.serving import serve_in_thread
    from envs.retriever.server import create_app
    from tests.rollout.test_engine_faults import HangingTool
    from tools.sandbox import SandboxTool
    from tools.search import SearchTool

    build_index, sample_corpus, write_corpus, sandbox_app, judge_app = _services()
    corpus = write_corpus(tmp_path / "corpus.jsonl", sample_corpus())
    with contextlib.ExitStack() as stack:
        retriever = serve_in_thread(create_app(build_index(corpus)))
        retriever_url = retriever.__enter__()
        sandbox_url = stack.enter_context(serve_in_thread(sandbox_app))
        judge_url = stack.enter_context(serve_in_thread(judge_app))

        class KillsTheRetriever(ConversationScriptBackend):
            """Every first turn searched while the retriever was up; it dies before the
            second turn (the engine generates in waves: rollout.deterministic)."""

            async def generate(self, input_ids, sampling_params, request_id):
                if "-t1-" in request_id and retriever.gen is not None:
                    retriever.__exit__(None, None, None)
                    retriever.gen = None
                return await super().generate(input_ids, sampling_params, request_id)

        no_retry = {"max_retries": 0}
        tools = {
            "search": SearchTool({"retrieval_service_url": f"{retriever_url}/retrieve",
                                  **no_retry}),
            "code_interpreter": SandboxTool({"sandbox_fusion_url": sandbox_url, **no_retry}),
            "hang": HangingTool("hang"),
        }
        scripts = {k: [t + "<|im_end|>" for t in turns] for k, turns in ANSWERS.items()}
        config = rollout_config("multi_turn.tool_timeout=2.5", "deterministic=true",
                                f"on_infra_error={on_infra_error}")
        engine = AsyncRolloutEngine(config, tiny_tokenizer,
                                    KillsTheRetriever(tiny_tokenizer, scripts), tools)
        batch = prompts_batch(len(ANSWERS), tools_kwargs={name: {} for name in tools})
        data = run_batch(engine, batch)
        data.non_tensor_batch["uid"] = np.array(GROUPS, dtype=object)
        isolate_failed(data)
        cfg = load_config(overrides=[
            "reward_model.judge.enable=true", f"reward_model.judge.url={judge_url}/v1",
            "reward_model.judge.model=judge", "reward_model.judge.max_retries=0"])
        judge = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tiny_tokenizer)
        data = score(data, judge)
        settle_infra_failures(data, on_infra_error, step=1)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    return data


def test_infrastructure_failures_carry_no_gradient_and_leave_their_groups(tiny_tokenizer,
                                                                          tmp_path):
    """on_infra_error=mask (the default): a retriever killed mid-step, a crashed sandbox, a
    tool timing out and a judge answering 500 fail their trajectories (zero response mask,
    advantage 0); each group's other advantages are GRPO's on its valid members alone, and
    a group left with one valid member trains nothing."""
    from agentrl.trainer.metrics import failure_metrics

    data = _infra_step(tiny_tokenizer, tmp_path, "mask")
    errors = data.non_tensor_batch["infra_error"]
    assert {i: e["kind"] for i, e in enumerate(errors) if e} == INFRA
    assert "cannot connect" in errors[1]["error"] or "RemoteProtocolError" in errors[1]["error"]
    assert "HTTP 500" in errors[3]["error"] and "timed out after 2.5 s" in errors[4]["error"]
    assert "HTTP 500" in errors[5]["error"]
    states = list(data.non_tensor_batch["request_state"])
    assert [i for i, s in enumerate(states) if s == "failed"] == sorted(INFRA)
    adv = compute_advantage(data, "grpo").batch["advantages"]
    mask = data.batch["response_mask"]
    for i in [*INFRA, 8]:  # the failed rows and the thin group's survivor: no gradient
        assert mask[i].sum() == 0 and adv[i].abs().sum() == 0
    scores = data.batch["token_level_scores"].sum(-1)
    assert scores[[0, 2, 6, 7]].tolist() == pytest.approx([0.9, 0.2, 0.7, 0.1])
    for rows in ([0, 2], [6, 7]):  # GRPO on the valid members alone
        alone = DataProto.from_dict(
            tensors={"token_level_rewards": data.batch["token_level_rewards"][rows],
                     "response_mask": data.batch["response_mask"][rows]},
            non_tensors={"uid": ["alone"] * len(rows)})
        expected = compute_advantage(alone, "grpo").batch["advantages"]
        torch.testing.assert_close(adv[rows], expected)
        assert expected.abs().sum() > 0
    metrics = failure_metrics(data)
    assert metrics == {"rollout/infra_failed": 5.0, "rollout/infra_failed/code_interpreter": 1.0,
                       "rollout/infra_failed/hang": 2.0, "rollout/infra_failed/judge": 1.0,
                       "rollout/infra_failed/search": 1.0, "reward/score_failed": 0.0}


def test_on_infra_error_zero_trains_them_and_raise_stops(tiny_tokenizer, tmp_path):
    """zero: the tools' errors reached the model and those trajectories train as scored
    (the judge's unscored row stays out, as before); raise: the step stops naming kinds."""
    from agentrl.trainer.scoring import InfraFailureError

    data = _infra_step(tiny_tokenizer, tmp_path, "zero")
    states = list(data.non_tensor_batch["request_state"])
    assert [i for i, s in enumerate(states) if s == "failed"] == [5]  # the judge's (score_failed)
    assert all(data.batch["response_mask"][i].sum() > 0 for i in (1, 3, 4, 8, 9))
    tool_texts = [m["content"] for m in data.non_tensor_batch["messages"][4] if m["role"] == "tool"]
    assert tool_texts == ["Error: tool 'hang' timed out after 2.5 s."]
    with pytest.raises(InfraFailureError, match=r"step 1: 5 trajectories hit infrastructure "
                       r"failures \(kinds: code_interpreter, hang, judge, search\)"):
        _infra_step(tiny_tokenizer, tmp_path, "raise")


def test_settle_infra_failures_on_a_scored_batch():
    """A scorer's infrastructure failure (its extra info's infra_error) is one too: masked,
    its group scored over the rest; the pure rule drops groups left with < 2 valid rows."""
    from agentrl.algos import thin_group_rows
    from agentrl.trainer.scoring import settle_infra_failures

    data = _group_batch(["completed"] * 4)
    data.batch["token_level_scores"] = data.batch["token_level_rewards"].clone()
    data.non_tensor_batch["reward_extra_info"] = np.array(
        [{}, {"infra_error": "sample 1: TimeoutError: verifier"}, {}, {}], dtype=object)
    assert settle_infra_failures(data, "mask", step=3) == 1
    assert data.non_tensor_batch["infra_error"][1] == {
        "kind": "scorer", "error": "sample 1: TimeoutError: verifier"}
    assert data.non_tensor_batch["uid"][1] == "a/failed-1"
    adv = compute_advantage(data, "grpo").batch["advantages"]
    alone = _group_batch(["completed"] * 3)
    alone.batch["token_level_rewards"][:, -1] = torch.tensor([1.0, 0.5, 0.0])
    torch.testing.assert_close(adv[[0, 2, 3]], compute_advantage(alone, "grpo").batch["advantages"])
    assert adv[1].abs().sum() == 0
    assert thin_group_rows(["a", "a", "b", "b", "c"], np.array([1, 0, 1, 1, 1], bool)).tolist() == [
        True, False, False, False, False]
