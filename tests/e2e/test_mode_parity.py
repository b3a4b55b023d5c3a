"""Sync and off-policy parity: ``trainer.mode`` sync, one_step_off and async put the same
trajectories into the actor update.

Each mode trains 2 steps of 2 prompts x n=2 of the arithmetic data against one scripted
model, and the test compares, per prompt, what reached the update: the prompt, the turns,
the tool outputs, the reward, the loss mask and the response ids; and it checks that every
prompt of the data order is trained exactly once, with n samples, in every mode.

Why a scripted *server*: the off-policy modes roll out in a process of their own (the
producer, a Ray actor) that reaches its inference servers over HTTP, so no backend object
can be handed to them. The scripted model is therefore served with SGLang's HTTP API
(``agentrl serve``'s app over a scripted backend, in a thread of this process) and every
mode, sync included, reaches it through ``rollout.name=sglang`` and ``server_urls``: the
three runs differ in ``trainer.mode`` only. The model is a pure function of the
conversation and the sample index (sample 0 calls the calculator with the question's
expression, then answers with what the tool returned; sample 1 answers 0 at once), so its
outputs do not depend on the weights or on timing. The tool is the calculator with rewards
(a step reward per call, a final reward per call made), weighted into the score, so the
tool rewards travel with the trajectories too (the tool configs name it in this file by
path, so the producer's process loads it too); it and the reward function are
deterministic. Every mode must then produce identical trajectories.

The seam is what the trainer records of the batch that reached the update: the trajectory
dump of ``trainer.rollout_data_dir`` (agentrl/trainer/dump.py), which every mode writes
from the batch it passed to ``update_actor``. Not compared: which step trains which prompt
(an off-policy step takes the first groups to finish, from any batch in flight) and the
policy versions of the tokens (the off-policy modes may generate step 2's batch under
version 0).

    pytest tests/e2e/test_mode_parity.py     # slow: about 35 s on 2 CPU cores
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.rollout.backends import GenerationOutput
from agentrl.rollout.backends.serve import create_app
from agentrl.trainer import run_train
from agentrl.utils.serving import serve_in_thread
from tools.calculator import DEFAULT_SCHEMA, CalculatorTool

MODES = ("sync", "one_step_off", "async")
STEPS, BATCH, N = 2, 2, 2
END = "<|im_end|>"
DIRECT_ANSWER = "<answer>0</answer>"
# the engine's call ids: {batch}-{row}-{sample}-t{turn}-a{attempt}
_CALL_ID = re.compile(r"-(\d+)-t\d+-a\d+$")
_QUESTION = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def expression(question: str) -> str:
    """The scripted model's reading of an easy arithmetic problem: its two numbers,
    divided when something is shared equally, else multiplied."""
    a, b = re.findall(r"\d+(?:\.\d+)?", question)[:2]
    return f"{a} / {b}" if "equally" in question else f"{a} * {b}"


def tool_call(question: str) -> str:
    call = {"name": "calculator", "arguments": {"expression": expression(question)}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def scripted_turn(conversation: str, sample: int) -> str:
    """The model turn (without its end token) that follows ``conversation``."""
    if sample != 0:
        return DIRECT_ANSWER
    observations = _TOOL_RESPONSE.findall(conversation)
    if observations:
        return f"<answer>{observations[-1]}</answer>"
    return tool_call(_QUESTION.search(conversation).group(1))


class ScriptedServerBackend:
    """The backend ``create_app`` serves: the scripted model. It reports the weight version
    it was last sent with every generation, as the off-policy producer requires."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad_token_id
        self.end_id = tokenizer.convert_tokens_to_ids(END)
        self.weight_version = "0"
        self.num_running = 0

    async def generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> GenerationOutput:
        call = _CALL_ID.search(request_id)  # None: the server's health check
        text = (
            ""
            if call is None
            else scripted_turn(self.tokenizer.decode(input_ids), int(call.group(1)))
        )
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.end_id]
        budget = int(sampling_params["max_new_tokens"])
        reason = "stop" if len(ids) <= budget else "length"
        ids = ids[:budget]
        meta = {"finish_reason": {"type": reason}, "weight_version": self.weight_version}
        return GenerationOutput(ids, text, reason, [-0.5] * len(ids), meta)

    async def update_weights(self, source: Any, weight_version: str | None = None) -> None:
        self.weight_version = str(weight_version)

    async def abort(self, request_id: str) -> None:
        return None

    async def abort_all(self) -> None:
        return None

    async def release_memory(self) -> None:
        return None

    async def resume_memory(self) -> None:
        return None


class RewardingCalculator(CalculatorTool):
    """The calculator with rewards: STEP_REWARD per call, and FINAL_REWARD per call made
    when the trajectory ends (``calc_reward``), so the two samples' tool rewards differ."""

    STEP_REWARD, FINAL_REWARD = 0.25, 0.5

    def __init__(self, config: dict, tool_schema: Any = None) -> None:
        super().__init__(config, tool_schema)
        self.calls: Counter[str] = Counter()

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> tuple:
        response, _, metrics = await super().execute(instance_id, parameters, **kwargs)
        self.calls[instance_id] += 1
        return response, self.STEP_REWARD, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return self.FINAL_REWARD * self.calls[instance_id]

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self.calls.pop(instance_id, None)
        await super().release(instance_id, **kwargs)


def train(make_config, mode: str, tokenizer: Any, model_dir: Path, out: Path) -> list[dict]:
    """Train ``mode`` for STEPS steps against a fresh scripted server; the dumped rows."""
    tools = out / "tools.yaml"
    out.mkdir(parents=True)
    tools.write_text(yaml.safe_dump({"tools": [{
        "class_name": f"{Path(__file__)}:RewardingCalculator",
        "config": {"type": "native"}, "tool_schema": DEFAULT_SCHEMA,
    }]}))  # fmt: skip
    app = create_app(ScriptedServerBackend(tokenizer), model_path=str(model_dir))
    with serve_in_thread(app) as url:
        run_train(make_config(
            f"trainer.mode={mode}", f"trainer.total_training_steps={STEPS}",
            f"data.train_batch_size={BATCH}", f"actor_rollout_ref.rollout.n={N}",
            "actor_rollout_ref.rollout.name=sglang",
            f"actor_rollout_ref.rollout.server_urls=[{url}]",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
            "reward_model.tool_reward_weight=1.0", "reward_model.step_reward_weight=1.0",
            "data.max_response_length=128", "trainer.logger=[file]",
            f"trainer.default_local_dir={out / 'ckpt'}",
            f"trainer.rollout_data_dir={out / 'rollouts'}",
        ))  # fmt: skip
    return [
        json.loads(line)
        for step in range(1, STEPS + 1)
        for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()
    ]


def question_of(row: dict) -> str:
    return next(m["content"] for m in row["messages"] if m["role"] == "user")


def tool_outputs(row: dict) -> list[str]:
    return [m["content"] for m in row["messages"] if m["role"] == "tool"]


def trajectory(row: dict) -> dict:
    """What the update trained of one row, policy versions and step left out."""
    keys = (
        "input",
        "prompt_ids",
        "response_ids",
        "loss_mask",
        "score",
        "acc",
        "tool_reward",
        "step_reward",
        "num_turns",
        "finish_reason",
        "request_state",
        "tool_calls",
    )
    return {**{k: row[k] for k in keys}, "tool_outputs": tool_outputs(row)}


def check_group(rows: list[dict], tokenizer: Any) -> None:
    """A prompt's two samples are the scripted ones: the call, its observation (not
    trained) and the answer that uses it, rewarded; and the direct answer, not rewarded."""

    def encode(text: str) -> list[int]:  # a model turn's ids, its end token included
        return [
            *tokenizer.encode(text, add_special_tokens=False),
            tokenizer.convert_tokens_to_ids(END),
        ]

    direct, with_tool = sorted(rows, key=lambda r: r["num_turns"])
    assert direct["num_turns"] == 2 and tool_outputs(direct) == []  # prompt, answer
    assert direct["response_ids"] == encode(DIRECT_ANSWER)
    assert direct["loss_mask"] == [1] * len(direct["response_ids"])
    assert (direct["acc"], direct["tool_reward"], direct["step_reward"]) == (0.0, 0.0, 0.0)

    question = question_of(with_tool)
    a, op, b = expression(question).split()
    [observation] = tool_outputs(with_tool)
    value = float(a) / float(b) if op == "/" else float(a) * float(b)
    assert float(observation) == pytest.approx(value, rel=1e-9)
    assert with_tool["num_turns"] == 4  # prompt, call, observation, answer
    spans = [
        (m, [t for _, t in g])
        for m, g in itertools.groupby(
            zip(with_tool["loss_mask"], with_tool["response_ids"], strict=True), key=lambda p: p[0]
        )
    ]
    assert [m for m, _ in spans] == [1, 0, 1]  # model turn, tool observation, model turn
    (_, call), (_, tool_tokens), (_, answer) = spans
    assert call == encode(tool_call(question))
    assert f"<tool_response>\n{observation}\n</tool_response>" in tokenizer.decode(tool_tokens)
    assert answer == encode(f"<answer>{observation}</answer>")
    assert with_tool["acc"] == 1.0  # the answer built on the observation is right
    assert with_tool["tool_reward"] == RewardingCalculator.FINAL_REWARD
    assert with_tool["step_reward"] == RewardingCalculator.STEP_REWARD
    # the score: compute_score's (acc + 0.1 x plain-text share) plus both tool rewards
    assert with_tool["score"] - direct["score"] == pytest.approx(1.75, abs=0.1)


@pytest.mark.slow
def test_sync_one_step_off_and_async_train_the_same_trajectories(
    make_config, tiny_model_dir, tiny_tokenizer, tmp_path, ray_cluster
):
    # ray_cluster: the off-policy runs find Ray up and put their producers there, instead
    # of each starting and stopping a Ray of its own
    rows = {mode: train(make_config, mode, tiny_tokenizer, tiny_model_dir, tmp_path / mode)
            for mode in MODES}  # fmt: skip
    expected = {f"{b}-{i}": N for b in range(1, STEPS + 1) for i in range(BATCH)}
    for mode, mode_rows in rows.items():
        for step in range(1, STEPS + 1):
            counts = Counter(r["uid"] for r in mode_rows if r["step"] == step)
            assert list(counts.values()) == [N] * BATCH, (mode, step, counts)
        assert Counter(r["uid"] for r in mode_rows) == expected, mode  # each prompt once
    for step in range(1, STEPS + 1):  # sync trains loader batch s at step s
        assert {r["uid"] for r in rows["sync"] if r["step"] == step} == {
            f"{step}-{i}" for i in range(BATCH)
        }

    by_uid = {
        mode: {uid: sorted((trajectory(r) for r in mode_rows if r["uid"] == uid),
                           key=lambda t: t["num_turns"])
               for uid in expected}
        for mode, mode_rows in rows.items()
    }  # fmt: skip
    for uid in expected:
        check_group([r for r in rows["sync"] if r["uid"] == uid], tiny_tokenizer)
        for mode in MODES[1:]:
            assert by_uid[mode][uid] == by_uid["sync"][uid], (mode, uid)
    questions = {question_of(r) for r in rows["sync"]}
    assert len(questions) == len(expected)  # four different prompts
