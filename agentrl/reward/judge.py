"""LLM-judge rewards: a judge model grades each trajectory behind a rate-limited client.

    reward_model:
      judge:
        enable: true
        url: http://127.0.0.1:30000/v1      # any OpenAI-compatible endpoint (SGLang,
        model: judge                        #   agentrl serve, a hosted API)
        api_key_env: JUDGE_API_KEY          # the variable's name; the key is never in a config

For every sample the judge receives one user message, ``prompt_template`` filled with the
trajectory (``{question}``: the first user message; ``{conversation}``: every message as
``role: text``; ``{tool_calls}``: the calls the model made, one a line; ``{answer}``: the
last ``<answer>`` of the response, else its last assistant turn; ``{response}``: the decoded
response; ``{ground_truth}``), and its reply is parsed (``score_parser``):

- ``number``: ``Score: X`` (the last one), or a reply that is only a number; X must lie in
  ``score_range`` [lo, hi] and is mapped to [0, 1];
- ``label``: the last of ``labels``' words in the reply (whole word, any case) gives its
  score.

Calls are bounded by ``max_concurrency`` in flight, ``requests_per_minute`` and
``tokens_per_minute`` (a token estimate of characters / 4 of the prompt plus
``max_tokens``), each with ``timeout`` seconds; a timeout, a lost connection, a 429 (its
``Retry-After`` honoured) or a 5xx is retried up to ``max_retries`` times with exponential
backoff. A sample whose judge still failed (those errors, another 4xx, or a reply the
parser cannot read) is not scored: its result carries ``score_failed`` with the reason, and
the trainer takes it out of its group's statistics and trains nothing on it
(``training/score_failed``), as a failed rollout. When that failure was the judge service's
(timeouts, lost connections, 429 or 5xx until the retries ran out) the result also carries
``infra_error`` (kind ``judge``): an infrastructure failure, counted in
``rollout/infra_failed/judge`` and handled per ``rollout.on_infra_error`` (docs/rewards.md). The final score is
``weight * judge + rule_weight * rule`` (``rule``: the data source's ``compute_score``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.protocol import INFRA_ERROR_KEY, SCORE_FAILED_KEY
from agentrl.reward.base import Sample, ScoreFailure, register_reward_manager
from agentrl.reward.managers import NaiveRewardManager
from agentrl.utils.aio import run_sync
from agentrl.utils.answer_tags import extract_answer

logger = logging.getLogger(__name__)

SCORE_PARSERS = ("number", "label")
PLACEHOLDERS = ("question", "conversation", "tool_calls", "answer", "response", "ground_truth")
DEFAULT_TEMPLATE = """You grade an AI assistant's answer against a reference answer.

The conversation:
{conversation}

The tool calls the assistant made:
{tool_calls}

The assistant's final answer: {answer}
The reference answer: {ground_truth}

Judge whether the final answer is correct and fully answers the question. Reply with one
line: `Score: X`, where X is 1 if it is correct and 0 if it is not."""
RETRY_STATUS = (429, 500, 502, 503, 504)
MAX_BACKOFF_S = 8.0


class JudgeError(RuntimeError):
    """The judge could not score a sample (the reason is the message); ``infra`` when the
    judge service failed (agentrl/utils/infra.py), not the sample's reply."""

    def __init__(self, message: str, infra: bool = False) -> None:
        super().__init__(message)
        self.infra = infra


@dataclass(frozen=True)
class JudgeSettings:
    """``reward_model.judge`` (module docstring); ``from_config`` checks every field. Every
    field's default is in agentrl/config/ppo_trainer.yaml, and only there."""

    url: str
    model: str
    api_key_env: str | None
    prompt_template: str
    score_parser: str
    labels: dict[str, float]
    score_range: tuple[float, float]
    weight: float
    rule_weight: float
    max_concurrency: int
    requests_per_minute: float | None
    tokens_per_minute: float | None
    timeout: float
    max_retries: int
    max_tokens: int
    temperature: float

    @classmethod
    def from_config(cls, judge: Mapping[str, Any]) -> JudgeSettings:
        problems = judge_problems(judge)
        if problems:
            raise ValueError("; ".join(problems))
        template = judge.get("prompt_template") or DEFAULT_TEMPLATE
        if template.endswith(".txt") and "\n" not in template:
            template = Path(template).expanduser().read_text()
        lo, hi = judge["score_range"]
        return cls(
            url=str(judge["url"]).rstrip("/"), model=str(judge["model"]),
            api_key_env=judge["api_key_env"] or None, prompt_template=template,
            score_parser=str(judge["score_parser"]),
            labels={str(k).lower(): float(v) for k, v in (judge["labels"] or {}).items()},
            score_range=(float(lo), float(hi)), weight=float(judge["weight"]),
            rule_weight=float(judge["rule_weight"]),
            max_concurrency=int(judge["max_concurrency"]),
            requests_per_minute=_optional(judge["requests_per_minute"]),
            tokens_per_minute=_optional(judge["tokens_per_minute"]),
            timeout=float(judge["timeout"]),
            max_retries=int(judge["max_retries"]),
            max_tokens=int(judge["max_tokens"]),
            temperature=float(judge["temperature"]),
        )  # fmt: skip

    def api_key(self) -> str | None:
        """The key from the environment variable ``api_key_env`` names (an error if unset)."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise JudgeError(f"reward_model.judge.api_key_env names {self.api_key_env}, "
                             "which is not set in the environment")
        return key


def _optional(value: Any) -> float | None:
    return None if value in (None, 0) else float(value)


def judge_problems(judge: Mapping[str, Any]) -> list[str]:
    """What is wrong with an enabled ``reward_model.judge`` (the validator's check)."""
    key = "reward_model.judge"
    missing = [name for name in JudgeSettings.__dataclass_fields__ if name not in judge]
    if missing:  # a section of the loaded config has every key (their defaults: the YAML)
        return [f"{key}.{name} is missing" for name in missing]
    problems = [f"{key}.{name} must be set when {key}.enable is true"
                for name in ("url", "model") if not judge.get(name)]
    parser = judge["score_parser"]
    if parser not in SCORE_PARSERS:
        problems.append(f"{key}.score_parser is {parser!r}; choose one of {SCORE_PARSERS}")
    if parser == "label" and not judge.get("labels"):
        problems.append(f"{key}.labels must map the judge's labels to scores "
                        "(score_parser: label)")
    score_range = judge["score_range"] or ()
    if len(score_range) != 2 or not float(score_range[0]) < float(score_range[1]):
        problems.append(f"{key}.score_range must be [lo, hi] with lo < hi")
    for name in ("max_concurrency", "max_tokens"):
        if judge.get(name) is not None and int(judge[name]) < 1:
            problems.append(f"{key}.{name} must be >= 1")
    for name in ("requests_per_minute", "tokens_per_minute", "timeout", "max_retries"):
        if judge.get(name) is not None and float(judge[name]) < 0:
            problems.append(f"{key}.{name} must be >= 0")
    api_key = str(judge.get("api_key_env") or "")
    if api_key.startswith(("sk-", "sk_")) or len(api_key) > 64:
        problems.append(f"{key}.api_key_env names the environment variable that holds the "
                        "key, not the key itself")
    template = judge.get("prompt_template")
    if template and not (str(template).endswith(".txt") and "\n" not in str(template)):
        try:
            render_template(str(template), dict.fromkeys(PLACEHOLDERS, ""))
        except (KeyError, IndexError, ValueError) as err:
            problems.append(f"{key}.prompt_template: {err!r}; its placeholders are "
                            f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
    return problems


def render_template(template: str, fields: Mapping[str, str]) -> str:
    """``template`` with its ``{placeholders}`` filled (KeyError names an unknown one)."""
    return template.format_map(dict(fields))


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def prompt_fields(sample: Sample, messages: Sequence[Mapping[str, Any]] | None) -> dict[str, str]:
    """The template's fields for one sample (see the module docstring)."""
    messages = list(messages or [])
    question = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    calls = [f"{c.get('function', c).get('name')}({c.get('function', c).get('arguments')})"
             for m in messages if m.get("role") == "assistant"
             for c in m.get("tool_calls") or []]  # fmt: skip
    last_turn = next((_text(m.get("content")) for m in reversed(messages)
                      if m.get("role") == "assistant"), sample.response_str)  # fmt: skip
    answer = extract_answer(sample.response_str)
    conversation = "\n".join(f"{m.get('role')}: {_text(m.get('content'))}" for m in messages)
    return {
        "question": question, "conversation": conversation or sample.response_str,
        "tool_calls": "\n".join(calls) or "(none)",
        "answer": answer if answer is not None else last_turn.strip(),
        "response": sample.response_str, "ground_truth": str(sample.ground_truth),
    }  # fmt: skip


def parse_score(text: str, settings: JudgeSettings) -> float:
    """The judge's reply as a score in [0, 1] (JudgeError naming what it could not read)."""
    if settings.score_parser == "label":
        words = "|".join(re.escape(label) for label in settings.labels)
        found = re.findall(rf"\b({words})\b", text, re.IGNORECASE)
        if not found:
            raise JudgeError(f"the judge's reply has none of the labels "
                             f"{sorted(settings.labels)}: {text[:200]!r}")
        return settings.labels[found[-1].lower()]
    found = re.findall(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", text, re.IGNORECASE)
    value = found[-1] if found else text.strip().rstrip(".")
    try:
        number = float(value)
    except ValueError:
        raise JudgeError(f"the judge's reply has no 'Score: X' and is not a number: "
                         f"{text[:200]!r}") from None
    lo, hi = settings.score_range
    if not lo <= number <= hi or math.isnan(number):
        raise JudgeError(f"the judge's score {number:g} is outside score_range [{lo:g}, {hi:g}]")
    return (number - lo) / (hi - lo)


class RateLimiter:
    """Concurrency, requests per minute and tokens per minute, over a sliding minute.
    ``clock`` / ``sleep`` are injectable for tests."""

    def __init__(self, max_concurrency: int, requests_per_minute: float | None,
                 tokens_per_minute: float | None, *,
                 sent: deque[tuple[float, int]] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:  # fmt: skip
        self.slots = asyncio.Semaphore(max_concurrency)
        self.rpm, self.tpm = requests_per_minute, tokens_per_minute
        self.clock, self.sleep = clock, sleep
        # (when, tokens) of the requests within the last minute; given, it carries over
        # from an earlier limiter (each batch's limiter lives on that batch's event loop)
        self.sent: deque[tuple[float, int]] = deque() if sent is None else sent
        self.lock = asyncio.Lock()

    async def admit(self, tokens: int) -> None:
        """Wait until a request of ``tokens`` fits the per-minute limits, then count it."""
        async with self.lock:
            while True:
                now = self.clock()
                while self.sent and now - self.sent[0][0] >= 60.0:
                    self.sent.popleft()
                used = sum(t for _, t in self.sent)
                if (self.rpm is None or len(self.sent) < self.rpm) and (
                        self.tpm is None or not self.sent or used + tokens <= self.tpm):
                    self.sent.append((now, tokens))
                    return
                await self.sleep(max(60.0 - (now - self.sent[0][0]), 0.01))


class JudgeClient:
    """Scores prompts with the judge endpoint under the settings' limits and retries."""

    def __init__(self, settings: JudgeSettings, http: Any, limiter: RateLimiter) -> None:
        self.settings, self.http, self.limiter = settings, http, limiter
        key = settings.api_key()
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retries = 0  # every retry of this client's calls

    async def grade(self, prompt: str) -> tuple[float, str]:
        """``(score in [0, 1], the judge's reply)``; JudgeError when it cannot be had."""
        s = self.settings
        body = {"model": s.model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": s.max_tokens, "temperature": s.temperature}
        tokens = len(prompt) // 4 + s.max_tokens
        last = "no attempt"
        for attempt in range(s.max_retries + 1):
            if attempt:
                self.retries += 1
            try:
                return await self._attempt(body, tokens)
            except _Retryable as err:
                last = str(err)
                if attempt < s.max_retries:
                    await asyncio.sleep(max(min(0.5 * 2**attempt, MAX_BACKOFF_S), err.wait))
        raise JudgeError(f"{last} (after {s.max_retries} retries)", infra=True)

    async def _attempt(self, body: dict[str, Any], tokens: int) -> tuple[float, str]:
        import httpx

        s = self.settings
        await self.limiter.admit(tokens)
        try:
            async with self.limiter.slots:
                reply = await self.http.post(f"{s.url}/chat/completions", json=body,
                                             headers=self.headers, timeout=s.timeout)
        except httpx.TimeoutException as err:
            raise _Retryable(f"{type(err).__name__} after {s.timeout:g} s") from err
        except httpx.TransportError as err:
            raise _Retryable(f"{type(err).__name__}: {err}") from err
        if reply.status_code in RETRY_STATUS:
            raise _Retryable(f"HTTP {reply.status_code}: {reply.text[:200]}", _retry_after(reply))
        if reply.status_code != 200:
            raise JudgeError(f"HTTP {reply.status_code}: {reply.text[:200]}")
        try:
            text = reply.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(f"the judge's reply is not a chat completion: "
                             f"{reply.text[:200]!r}") from None
        return parse_score(text, s), text


class _Retryable(Exception):
    """A failed attempt worth another (timeout, lost connection, 429, 5xx)."""

    def __init__(self, message: str, wait: float = 0.0) -> None:
        super().__init__(message)
        self.wait = wait


def _retry_after(reply: Any) -> float:
    try:
        return min(float(reply.headers.get("retry-after", 0)), 60.0)
    except ValueError:
        return 0.0


@register_reward_manager("judge")
class JudgeRewardManager(NaiveRewardManager):
    """The naive manager whose score is the judge's (weighted with the rule score): see the
    module docstring. ``judge`` is the ``reward_model.judge`` mapping."""

    def __init__(self, tokenizer: Any, *, judge: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.settings = JudgeSettings.from_config(judge)
        self._messages: list[Any] = []
        self._sent: deque[tuple[float, int]] = deque()  # the limits hold across batches

    def decode(self, data: Any) -> list[Sample]:
        samples = super().decode(data)
        messages = data.non_tensor_batch.get("messages")
        self._messages = list(messages) if messages is not None else [None] * len(samples)
        return samples

    def score(self, samples: Sequence[Sample]) -> list[Any]:
        rules = (super().score(samples) if self.settings.rule_weight
                 else [0.0] * len(samples))  # fmt: skip
        return run_sync(self._score_all(samples, rules))

    async def _score_all(self, samples: Sequence[Sample], rules: list[Any]) -> list[Any]:
        import httpx

        s = self.settings
        limiter = RateLimiter(s.max_concurrency, s.requests_per_minute, s.tokens_per_minute,
                              sent=self._sent)
        async with httpx.AsyncClient() as http:
            client = JudgeClient(s, http, limiter)
            results = await asyncio.gather(*(
                self._one(client, sample, self._messages[sample.index], rule)
                for sample, rule in zip(samples, rules, strict=True)))
        failed = [r[SCORE_FAILED_KEY] for r in results
                  if isinstance(r, Mapping) and SCORE_FAILED_KEY in r]  # fmt: skip
        if failed:
            logger.warning("the judge failed on %d of %d samples (they do not train); first: %s",
                           len(failed), len(results), failed[0])
        if client.retries:
            logger.info("judge: %d retries in this batch", client.retries)
        return results

    async def _one(self, client: JudgeClient, sample: Sample, messages: Any,
                   rule: Any) -> dict[str, Any] | ScoreFailure:  # fmt: skip
        if isinstance(rule, ScoreFailure):  # the rule's score function raised
            return rule
        rule_score = float(rule["score"]) if isinstance(rule, Mapping) else float(rule)
        prompt = render_template(self.settings.prompt_template, prompt_fields(sample, messages))
        try:
            judged, _ = await client.grade(prompt)
        except JudgeError as err:
            failed = {"score": 0.0, SCORE_FAILED_KEY: f"judge: {err}", "rule_score": rule_score}
            if err.infra:
                failed[INFRA_ERROR_KEY] = {"kind": "judge", "error": str(err)}
            return failed
        total = self.settings.weight * judged + self.settings.rule_weight * rule_score
        return {"score": total, "judge_score": judged, "rule_score": rule_score}


__all__ = ["DEFAULT_TEMPLATE", "JudgeClient", "JudgeError", "JudgeRewardManager",
           "JudgeSettings", "RateLimiter", "judge_problems", "parse_score", "prompt_fields",
           "render_template"]
