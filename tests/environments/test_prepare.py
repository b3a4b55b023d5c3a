"""From an environment to a rollout: `prepare_environment` writes the files, and the
overrides it prints roll out through the real engine (`agentrl generate`) with the
environment's own scoring: an oracle model scores 1, a model that cannot play scores 0."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from agentrl.config import load_config
from agentrl.environments import prepare_environment
from agentrl.generate import generate
from agentrl.rollout.backends import GenerationOutput


class _Backend:
    """Answers with `reply(conversation text)`."""

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply = tokenizer, reply

    async def generate(self, input_ids, sampling_params, request_id):
        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        out = self.reply(text) + "<|im_end|>"
        ids = self.tokenizer.encode(out, add_special_tokens=False)
        return GenerationOutput(ids, out, "stop", [-1.0] * len(ids))

    async def abort(self, request_id):
        return None


def _generate(tmp_path, model_dir, prepared, backend, *overrides):
    args = [o for o in prepared.overrides if not o.startswith("data.train_files")]
    cfg = load_config(overrides=[
        *[o.replace("data.val_files=", "data.path=") for o in args],
        f"data.output_path={tmp_path / 'out.jsonl'}",
        f"actor_rollout_ref.model.path={model_dir}",
        "data.max_prompt_length=1024", "data.max_response_length=512",
        "actor_rollout_ref.rollout.do_sample=false", "actor_rollout_ref.rollout.n=1",
        *overrides,
    ])  # fmt: skip
    summary = generate(cfg, backend=backend)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return summary, rows


def test_reasoning_gym_rolls_out_and_scores_with_its_own_function(tmp_path, tiny_model_dir,
                                                                 tiny_tokenizer):
    pytest.importorskip("reasoning_gym")
    prepared = prepare_environment("reasoning_gym:basic_arithmetic", tmp_path / "rg", size=30,
                                   test_size=12, seed=1)
    assert prepared.configs == {} and prepared.overrides[0].startswith("data.train_files=")
    test = pd.read_parquet(prepared.test)
    answers = {r["extra_info"]["question"]: r["reward_model"]["ground_truth"]
               for r in test.to_dict("records")}
    wrong = set(list(answers)[:4])

    def oracle(text):
        question = next(q for q in answers if q in text)
        return f"<answer>{'nope' if question in wrong else answers[question]}</answer>"

    summary, rows = _generate(tmp_path, tiny_model_dir, prepared,
                              _Backend(tiny_tokenizer, oracle))
    assert len(rows) == 12 and sorted(r["score"] for r in rows) == [0.0] * 4 + [1.0] * 8
    assert summary["score/mean"] == pytest.approx(8 / 12)


def _binary_search(text):
    """Plays GuessTheNumber by the game's hints in the conversation so far."""
    low, high = 1, 20
    moves = r"<\|im_start\|>assistant\n<answer>\[(\d+)\]</answer>.*?target number is (\w+)"
    for guess, hint in re.findall(moves, text, re.S):
        low, high = (int(guess) + 1, high) if hint == "higher" else (low, int(guess) - 1)
    return f"<answer>[{(low + high) // 2}]</answer>"


@pytest.mark.parametrize(("player", "score"), [(_binary_search, 1.0), (lambda t: "hmm", 0.0)])
def test_a_textarena_game_is_played_over_turns(tmp_path, tiny_model_dir, tiny_tokenizer,
                                               player, score):
    pytest.importorskip("textarena")
    prepared = prepare_environment("textarena:GuessTheNumber-v0", tmp_path / "ta", size=3,
                                   test_size=4, seed=0, allow_shared_prompts=True)
    interaction = yaml.safe_load(prepared.configs["interaction"].read_text())
    assert interaction["interaction"][0]["name"] == "textarena"
    test = pd.read_parquet(prepared.test)
    assert all(s >= 1_000_000 for s in test["extra_info"].map(lambda e: e["seed"]))
    summary, rows = _generate(
        tmp_path, tiny_model_dir, prepared, _Backend(tiny_tokenizer, player),
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=12",
        "actor_rollout_ref.rollout.multi_turn.max_user_turns=12",
    )  # fmt: skip
    assert [r["score"] for r in rows] == [score] * 4
    assert all(r["state"] == "completed" for r in rows)
    turns = [r["num_turns"] for r in rows]
    assert all(t > 2 for t in turns)  # several moves, the game answering each
    assert any("[GAME]" in m["content"] for m in rows[0]["messages"][3:] if m["role"] == "user")


def _guess_by_hints(text):
    """Plays the OpenEnv test environment by its hints in the conversation so far."""
    low, high = 1, 20
    for guess, hint in re.findall(r"(\d+) is wrong: go (higher|lower)", text):
        low, high = (int(guess) + 1, high) if hint == "higher" else (low, int(guess) - 1)
    return f"<answer>{(low + high) // 2}</answer>"


def test_an_openenv_server_is_played_and_a_broken_episode_fails_alone(tmp_path, tiny_model_dir,
                                                                     tiny_tokenizer, monkeypatch,
                                                                     caplog):
    pytest.importorskip("openenv.core")
    env_dir = Path(__file__).parents[1] / "interactions"  # openenv_guess_env.py
    monkeypatch.syspath_prepend(str(env_dir))
    monkeypatch.setenv("PYTHONPATH", str(env_dir))
    prepared = prepare_environment("openenv:openenv_guess_env", tmp_path / "oe", size=2,
                                   test_size=6, seed=0, allow_shared_prompts=True)
    test = pd.read_parquet(prepared.test)
    assert set(test["data_source"]) == {"openenv/GuessEnvironment"}
    started = []

    def player(text):  # every other episode's first move makes the server raise
        if text.count("<|im_start|>assistant") == 1:
            started.append(text)
            if len(started) % 2:
                return "<answer>raise</answer>"
        return _guess_by_hints(text)

    summary, rows = _generate(tmp_path, tiny_model_dir, prepared,
                              _Backend(tiny_tokenizer, player),
                              "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=8",
                              "actor_rollout_ref.rollout.multi_turn.max_user_turns=8")
    failed = [r for r in rows if r["state"] == "failed"]
    played = [r for r in rows if r["state"] == "completed"]
    assert len(failed) == 3 and len(played) == 3 and summary["failed"] == 3
    assert all(r["metrics"]["interaction_errors"] == 1 for r in failed)
    reasons = [r.getMessage() for r in caplog.records if "failed: interaction" in r.getMessage()]
    assert len(reasons) == 3 and all("RuntimeError: Server error: the number machine broke"
                                     in reason for reason in reasons)
    for row in played:  # the return: -0.1 per wrong guess, 1.0 for the right one
        rewards = row["reward_scores"]["user_turn_rewards"]
        assert rewards[-1] == 1.0 and all(r == -0.1 for r in rewards[:-1])
        assert row["score"] == pytest.approx(sum(rewards)) and row["num_turns"] > 2


def _add_with_the_tool(text):
    """Calls the vf-adder environment's add tool on the question, then answers its result."""
    results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", text, re.S)
    if results:
        return f"<answer>{results[-1]}</answer>"
    a, b = re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1]
    call = {"name": "add", "arguments": {"a": int(a), "b": int(b)}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


@pytest.mark.parametrize(("env", "player", "turns"), [
    ("vf-adder", _add_with_the_tool, [2]), ("vf-guess", _guess_by_hints, range(1, 6))])
def test_a_verifiers_environment_is_played_and_scored_by_its_rubric(tmp_path, tiny_model_dir,
                                                                   tiny_tokenizer, monkeypatch,
                                                                   env, player, turns):
    pytest.importorskip("verifiers")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "fixtures"))  # vf_*.py
    prepared = prepare_environment(f"verifiers:{env}", tmp_path / "vf", size=2, test_size=3,
                                   seed=0)
    assert ("tools" in prepared.configs) == (env == "vf-adder")
    summary, rows = _generate(tmp_path, tiny_model_dir, prepared,
                              _Backend(tiny_tokenizer, player),
                              "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=10",
                              "actor_rollout_ref.rollout.multi_turn.max_user_turns=10")
    assert len(rows) == 3 and all(r["state"] == "completed" for r in rows)
    for row in rows:
        guesses = sum(m["role"] == "assistant" for m in row["messages"])
        assert guesses in turns
        best = 1.0 if env == "vf-adder" else 1.0 - 0.1 * (guesses - 1)  # the rubric's own
        assert row["score"] == pytest.approx(best)
    if env == "vf-adder":
        assert summary["tool_calls/mean"] == 1.0 and summary["tool_errors"] == 0


def _answer_and_call_again(text):
    """Writes the right sum in the answer tags and calls the add tool on every turn: only the
    environment's max_turns (4) can end the episode."""
    a, b = re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1]
    call = {"name": "add", "arguments": {"a": int(a), "b": int(b)}}
    return f"<answer>{int(a) + int(b)}</answer>\n<tool_call>\n{json.dumps(call)}\n</tool_call>"


def test_a_tool_environments_max_turns_ends_an_episode_of_tool_turns(tmp_path, tiny_model_dir,
                                                                     tiny_tokenizer,
                                                                     monkeypatch):  # fmt: skip
    """verifiers stops a ToolEnv at max_turns even when every turn called a tool, and its
    rubric scores the answer given: agentrl consults that stop rule after tool turns too."""
    pytest.importorskip("verifiers")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "fixtures"))  # vf_adder.py
    prepared = prepare_environment("verifiers:vf-adder", tmp_path / "vf", size=2, test_size=3,
                                   seed=0)  # fmt: skip
    _, rows = _generate(tmp_path, tiny_model_dir, prepared,
                        _Backend(tiny_tokenizer, _answer_and_call_again),
                        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=10",
                        "actor_rollout_ref.rollout.multi_turn.max_user_turns=10")
    assert len(rows) == 3
    for row in rows:
        assert row["state"] == "completed"
        assert sum(m["role"] == "assistant" for m in row["messages"]) == 4  # the env's max_turns
        assert row["score"] == pytest.approx(1.0)  # the rubric's own: the answer is right


def test_nothing_is_written_for_a_bad_spec_or_size(tmp_path):
    with pytest.raises(ValueError, match="supported forms"):
        prepare_environment("gym:CartPole-v1", tmp_path / "a")
    with pytest.raises(ValueError, match="--size and --test-size must be >= 1"):
        prepare_environment("reasoning_gym:basic_arithmetic", tmp_path / "b", size=0)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
