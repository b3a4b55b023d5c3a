"""The LLM judge: its prompt, its parser, its rate limits, and a scripted endpoint that is
slow, rate-limits (429) and answers garbage: failures are marked, never scored 0; and a real
local judge (the tiny model behind `agentrl serve`'s chat route)."""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from omegaconf import OmegaConf

from agentrl.config import ConfigError, load_config
from agentrl.protocol import SCORE_FAILED_KEY
from agentrl.reward import load_reward_manager
from agentrl.reward.base import Sample
from agentrl.reward.judge import (
    JudgeError,
    JudgeRewardManager,
    JudgeSettings,
    RateLimiter,
    judge_problems,
    parse_score,
    prompt_fields,
    render_template,
)
from agentrl.utils.serving import serve_in_thread

# the defaults of reward_model.judge (agentrl/config/ppo_trainer.yaml) and a judge
DEFAULTS = OmegaConf.to_container(load_config().reward_model.judge, resolve=True)
BASE = {**DEFAULTS, "url": "http://127.0.0.1:9/v1", "model": "judge"}


def _settings(**overrides) -> JudgeSettings:
    return JudgeSettings.from_config({**BASE, **overrides})


@pytest.mark.parametrize(("reply", "score"), [
    ("Score: 1", 1.0), ("The answer is right.\nscore = 0", 0.0), ("0.5", 0.5),
    ("Score: 0\nOn reflection... Score: 1", 1.0),
])  # fmt: skip
def test_the_number_parser_reads_the_last_score(reply, score):
    assert parse_score(reply, _settings()) == score


def test_a_scale_maps_to_zero_one_and_out_of_range_or_garbage_is_named():
    ten = _settings(score_range=[0, 10])
    assert parse_score("Score: 7", ten) == pytest.approx(0.7)
    with pytest.raises(JudgeError, match="outside score_range"):
        parse_score("Score: 11", ten)
    with pytest.raises(JudgeError, match="no 'Score: X'"):
        parse_score("I think it is fine", ten)


def test_the_label_parser_takes_the_last_label_word():
    labels = _settings(score_parser="label", labels={"CORRECT": 1.0, "incorrect": 0.0})
    assert parse_score("Verdict: correct", labels) == 1.0
    assert parse_score("not correct, so: INCORRECT", labels) == 0.0
    with pytest.raises(JudgeError, match="none of the labels"):
        parse_score("maybe", labels)


def test_the_prompt_carries_the_trajectory_and_the_ground_truth():
    sample = Sample(index=0, data_source="x", ground_truth="42", extra_info={},
                    response_str="it is <answer>42</answer>", response_length=5,
                    last_position=4, tool_reward=0.0)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 6*7?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"function": {"name": "calculator", "arguments": {"expression": "6*7"}}}]},
                {"role": "tool", "content": "42"},
                {"role": "assistant", "content": "it is <answer>42</answer>"}]
    fields = prompt_fields(sample, messages)
    assert fields["question"] == "What is 6*7?" and fields["answer"] == "42"
    assert fields["tool_calls"] == "calculator({'expression': '6*7'})"
    assert "tool: 42" in fields["conversation"] and fields["ground_truth"] == "42"
    assert "42" in render_template(_settings().prompt_template, fields)


def test_bad_settings_are_named():
    assert judge_problems({"url": "u"})[0] == "reward_model.judge.model is missing"
    assert judge_problems(DEFAULTS) == [
        "reward_model.judge.url must be set when reward_model.judge.enable is true",
        "reward_model.judge.model must be set when reward_model.judge.enable is true"]
    problems = " | ".join(judge_problems({**BASE, "score_parser": "label",
                                          "api_key_env": "sk-abc123",
                                          "prompt_template": "{question} {nope}"}))
    assert "labels must map" in problems and "not the key itself" in problems
    assert "'nope'" in problems and "{ground_truth}" in problems
    with pytest.raises(ConfigError, match="cannot both score"):
        load_config(overrides=["reward_model.judge.enable=true", "reward_model.enable=true",
                               "reward_model.model.path=x", "reward_model.judge.url=u",
                               "reward_model.judge.model=m"])


def test_the_key_comes_from_the_named_variable(monkeypatch):
    monkeypatch.delenv("MY_JUDGE_KEY", raising=False)
    with pytest.raises(JudgeError, match="MY_JUDGE_KEY, which is not set"):
        _settings(api_key_env="MY_JUDGE_KEY").api_key()
    monkeypatch.setenv("MY_JUDGE_KEY", "secret")
    assert _settings(api_key_env="MY_JUDGE_KEY").api_key() == "secret"


def test_requests_and_tokens_per_minute_hold_over_a_sliding_minute():
    clock = [0.0]

    async def sleep(seconds: float) -> None:
        clock[0] += seconds

    async def admit_all(limiter, tokens, n):
        times = []
        for _ in range(n):
            await limiter.admit(tokens)
            times.append(clock[0])
        return times

    rpm = RateLimiter(4, requests_per_minute=2, tokens_per_minute=None, clock=lambda: clock[0],
                      sleep=sleep)
    assert asyncio.run(admit_all(rpm, 10, 5)) == [0.0, 0.0, 60.0, 60.0, 120.0]
    clock[0] = 0.0
    tpm = RateLimiter(4, requests_per_minute=None, tokens_per_minute=250,
                      clock=lambda: clock[0], sleep=sleep)
    assert asyncio.run(admit_all(tpm, 100, 4)) == [0.0, 0.0, 60.0, 60.0]
    # the next batch's limiter (a new event loop) continues the same minute
    clock[0] = 0.0
    first = RateLimiter(4, requests_per_minute=2, tokens_per_minute=None,
                        clock=lambda: clock[0], sleep=sleep)
    assert asyncio.run(admit_all(first, 10, 2)) == [0.0, 0.0]
    second = RateLimiter(4, requests_per_minute=2, tokens_per_minute=None, sent=first.sent,
                         clock=lambda: clock[0], sleep=sleep)
    assert asyncio.run(admit_all(second, 10, 1)) == [60.0]


class _Endpoint:
    """A scripted judge: the answer under judgment says how to behave."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.auth: list[str | None] = []
        self.app = FastAPI()

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.auth.append(request.headers.get("authorization"))
            prompt = body["messages"][0]["content"]
            kind = next(k for k in ("slow", "limited", "garbage", "broken", "right", "wrong")
                        if f"<answer>{k}</answer>" in prompt)
            self.calls[kind] = self.calls.get(kind, 0) + 1
            if kind == "slow":
                await asyncio.sleep(2.0)
            if kind == "limited" and self.calls[kind] <= 2:
                return JSONResponse({"error": "slow down"}, status_code=429,
                                    headers={"Retry-After": "0"})
            if kind == "broken":
                return JSONResponse({"error": "boom"}, status_code=500)
            text = {"garbage": "I like turtles", "wrong": "Score: 0"}.get(kind, "Score: 1")
            return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def test_a_scripted_judge_scores_and_marks_its_failures(rollout_batch, tiny_tokenizer,
                                                       monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "k-123")
    endpoint = _Endpoint()
    kinds = ["right", "wrong", "limited", "slow", "garbage", "broken"]
    built = rollout_batch([dict(prompt=f"q{i}", segments=[(f"<answer>{k}</answer>", 1)],
                                data_source="agentrl/arithmetic", ground_truth="right")
                           for i, k in enumerate(kinds)])
    with serve_in_thread(endpoint.app) as url:
        cfg = load_config(overrides=[
            "reward_model.judge.enable=true", f"reward_model.judge.url={url}/v1",
            "reward_model.judge.model=judge", "reward_model.judge.api_key_env=JUDGE_KEY",
            "reward_model.judge.timeout=0.5", "reward_model.judge.max_retries=2",
            "reward_model.judge.max_concurrency=3"])
        manager = load_reward_manager(cfg.reward_model, cfg.custom_reward_function,
                                      tiny_tokenizer)
        assert isinstance(manager, JudgeRewardManager)
        started = time.perf_counter()
        out = manager(built.data, return_dict=True)
        elapsed = time.perf_counter() - started
    info = out["reward_extra_info"]
    scores = out["reward_tensor"].sum(-1).tolist()
    assert scores[:3] == [1.0, 0.0, 1.0]  # the 429s were retried (Retry-After: 0)
    assert info["judge_score"][:3] == [1.0, 0.0, 1.0]
    failed = info[SCORE_FAILED_KEY]
    assert failed[:3] == [None, None, None]
    assert "ReadTimeout after 0.5 s (after 2 retries)" in failed[3]
    assert "no 'Score: X'" in failed[4] and "HTTP 500" in failed[5]
    # the timeout and the 500s are the judge service's failures, the unreadable reply is not
    infra = info["infra_error"]
    assert [e and e["kind"] for e in infra] == [None, None, None, "judge", None, "judge"]
    assert "HTTP 500" in infra[5]["error"]
    assert endpoint.calls == {"right": 1, "wrong": 1, "limited": 3, "slow": 3, "garbage": 1,
                              "broken": 3}
    assert set(endpoint.auth) == {"Bearer k-123"}  # the key from the named variable
    assert elapsed < 10  # timeouts and backoff bounded


def test_judge_and_rule_scores_combine_by_weight(rollout_batch, tiny_tokenizer):
    endpoint = _Endpoint()
    built = rollout_batch([
        dict(prompt="q0", segments=[("<answer>wrong</answer>", 1)],
             data_source="agentrl/arithmetic", ground_truth="7"),  # judge 0, rule 0
        dict(prompt="q1", segments=[("<answer>right</answer> so <answer>7</answer>", 1)],
             data_source="agentrl/arithmetic", ground_truth="7"),  # judge 1, rule 1
    ])  # fmt: skip
    with serve_in_thread(endpoint.app) as url:
        manager = JudgeRewardManager(tiny_tokenizer, judge={
            **BASE, "url": f"{url}/v1", "weight": 0.5, "rule_weight": 2.0})
        out = manager(built.data, return_dict=True)
    assert out["reward_tensor"].sum(-1).tolist() == [0.0, 2.5]
    assert out["reward_extra_info"]["rule_score"] == [0.0, 1.0]


def test_a_local_judge_model_behind_agentrl_serve(rollout_batch, tiny_tokenizer, tiny_model_dir):
    """The real path: the tiny model as the judge, through `agentrl serve`'s OpenAI chat
    route. Its replies are noise: each sample is either scored in [0, 1] or marked failed
    with the parser's reason, never silently 0."""
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app

    backend = HFBackend.from_pretrained(str(tiny_model_dir), tiny_tokenizer, seed=0)
    built = rollout_batch([dict(prompt=f"q{i}", segments=[(f"<answer>{i}</answer>", 1)],
                                data_source="agentrl/arithmetic", ground_truth=str(i))
                           for i in range(4)])
    with serve_in_thread(create_app(backend, model_path=str(tiny_model_dir))) as url:
        manager = JudgeRewardManager(tiny_tokenizer, judge={
            **BASE, "url": f"{url}/v1", "max_tokens": 8, "score_parser": "label",
            "labels": {"a": 1.0, "the": 0.0}})
        out = manager(built.data, return_dict=True)
    info = out["reward_extra_info"]
    judged = info.get("judge_score", [None] * 4)
    failed = info.get(SCORE_FAILED_KEY, [None] * 4)
    for score, reason in zip(judged, failed, strict=True):
        assert (score in (0.0, 1.0)) != bool(reason)  # scored, or failed with the reason
        assert reason is None or "none of the labels" in reason  # a real reply, unreadable
