"""Time per GRPO step: agentrl with default settings beside a minimal hand-written loop.

    python bench/grpo_step.py                 # quickstart task, 16 prompts x 8, 3 steps each
    python bench/grpo_step.py --steps 1 --sft-steps 100   # quick check

Both run the calculator quickstart's task on the same SFT-warm-started nano model (the
quickstart's data and SFT, shortened: ``--sft-steps``), the same 16 prompts x 8 samples per
step, up to 3 model turns of at most 48 new tokens, the same calculator, the same reward:

- **agentrl**: ``PPOTrainer.train_step`` with the library's defaults; the config sets only
  what the task needs (paths, batch, n, turns, lengths, the tool). Stages from its
  ``timing_s/*`` metrics.
- **reference**: the loop a person writes by hand. Per turn: every live conversation
  re-rendered with the chat template, left-padded, one ``model.generate`` call (plain
  sampling at temperature 1); tool calls parsed with a regex and run through
  ``tools.calculator.evaluate``. Then GRPO advantages and one padded forward/backward over
  the whole batch with one AdamW step (the update is on-policy, so no old-log-prob pass).

It prints one JSON line: ``agentrl_step_s``, ``reference_step_s``, ``ratio`` (agentrl over
reference), and the stages of each (``generation_ratio``: agentrl's rollout over the
reference's sampling). Targets (issue 15): ratio <= 1.3, generation_ratio <= 1.2. Run it
alone on the machine: timings taken beside another job are wrong.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

logger = logging.getLogger("bench.grpo_step")
TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def prepare(out: Path, sft_steps: int, seed: int) -> tuple[Path, Path, Path]:
    """(SFT model dir, train parquet, tool config): the quickstart's data and SFT."""
    from agentrl.quickstart import run_quickstart, settings_for
    from agentrl.tasks.quickstart import recipe_file

    run_quickstart(out, settings_for("calculator", steps=0, control=False, sft_steps=sft_steps,
                                     sft_check=0, n_train=256, n_test=16, seed=seed))
    return (out / "model_sft", out / "data" / "train.parquet",
            recipe_file("quickstart", "calculator_tool.yaml"))


def agentrl_overrides(model: Path, train: Path, tools: Path, run_dir: Path, args) -> list[str]:
    """What the task needs and nothing else: every other key keeps its default."""
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={train}",
        "data.val_files=null",
        f"data.train_batch_size={args.prompts}",
        "data.max_prompt_length=96",
        "data.max_response_length=160",
        f"actor_rollout_ref.rollout.n={args.n}",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "actor_rollout_ref.rollout.multi_turn.max_new_tokens_per_turn=48",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",  # one optimizer step
        "algorithm.adv_estimator=grpo",
        "reward_model.tool_reward_weight=0.0",
        "trainer.device=cpu",
        "trainer.logger=[]",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        f"trainer.total_training_steps={args.steps + 1}",
        f"trainer.seed={args.seed}",
        f"trainer.default_local_dir={run_dir}",
    ]


def time_agentrl(overrides: list[str], steps: int) -> tuple[list[dict[str, float]], list]:
    """Timed steps, and each step's row indices (the reference replays the same batches)."""
    from agentrl.config import load_config
    from agentrl.trainer.ppo_trainer import PPOTrainer

    records, batches_seen = [], []
    with PPOTrainer(load_config(overrides=overrides)) as trainer:
        trainer.init_workers()
        batches = trainer.batches()
        for step in range(steps + 1):  # the first is a warm-up
            trainer.global_steps += 1
            batch = next(batches)
            batches_seen.append([int(i) for i in batch["index"]])
            metrics = trainer.train_step(batch)
            record = {k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("timing_s/")}
            record["score"] = metrics.get("critic/score/mean", 0.0)
            logger.info("agentrl step %d: %.2f s (gen %.2f)", step, record["step"], record["gen"])
            if step:
                records.append(record)
    return records, batches_seen


class ReferenceLoop:
    """The minimal loop (module docstring), on its own copy of the model."""

    def __init__(self, model_dir: Path, tools: Path, rows: list[dict], args) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from agentrl.tools import load_tool_schemas

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-6)
        self.schemas = load_tool_schemas(tools)
        self.rows, self.args = rows, args
        self.eos = [self.tokenizer.convert_tokens_to_ids("<|im_end|>"), self.tokenizer.pad_token_id]
        torch.manual_seed(args.seed)

    def render(self, messages: list[dict], generation: bool) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages, tools=self.schemas, add_generation_prompt=generation, tokenize=True)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    def step(self, batch_rows: list[dict]) -> dict[str, float]:
        from agentrl.reward.score import default_compute_score
        from tools.calculator import evaluate, format_result

        started = time.perf_counter()
        rows = [row for row in batch_rows for _ in range(self.args.n)]
        # token ids and loss mask per conversation, grown turn by turn (no re-rendering)
        ids = [self.render([dict(m) for m in row["prompt"]], True) for row in rows]
        masks = [[0] * len(x) for x in ids]
        last_text = [""] * len(rows)
        done = [False] * len(rows)
        pad, eos = self.tokenizer.pad_token_id, set(self.eos)
        for _ in range(3):
            live = [i for i, d in enumerate(done) if not d]
            if not live:
                break
            width = max(len(ids[i]) for i in live)
            batch = torch.tensor([[pad] * (width - len(ids[i])) + ids[i] for i in live])
            attention = torch.tensor([[0] * (width - len(ids[i])) + [1] * len(ids[i])
                                      for i in live])
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=batch, attention_mask=attention, do_sample=True,
                    temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=48,
                    eos_token_id=self.eos, pad_token_id=pad)
            for j, i in enumerate(live):
                new = out[j, width:].tolist()
                end = next((k + 1 for k, t in enumerate(new) if t in eos), len(new))
                new = new[:end]
                ids[i] += new
                masks[i] += [1] * len(new)
                text = self.tokenizer.decode(new, skip_special_tokens=True)
                last_text[i] = text
                match = TOOL_CALL.search(text)
                if match is None:
                    done[i] = True
                    continue
                try:
                    call = json.loads(match.group(1))
                    result = format_result(evaluate(str(call["arguments"]["expression"])))
                except Exception as err:  # noqa: BLE001 - the model's call was bad
                    result = f"Error: {err}"
                # the chat template's tool turn, written out by hand as a minimal loop does
                tool = self.tokenizer.encode(
                    f"\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response>"
                    "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
                ids[i] += tool
                masks[i] += [0] * len(tool)
        generated = time.perf_counter()
        rewards = torch.tensor([
            float(default_compute_score(row["data_source"], text,
                                        row["reward_model"]["ground_truth"]) or 0.0)
            for row, text in zip(rows, last_text, strict=True)
        ])
        groups = rewards.view(-1, self.args.n)
        advantages = ((groups - groups.mean(-1, keepdim=True))
                      / (groups.std(-1, keepdim=True) + 1e-6)).flatten()
        sequences = ids
        width = max(len(s) for s in sequences)
        ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
        attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
        loss_mask = torch.tensor([m + [0] * (width - len(m)) for m in masks])[:, 1:].float()
        logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        log_probs = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        loss = -(advantages[:, None] * log_probs * loss_mask).sum() / loss_mask.sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        ended = time.perf_counter()
        return {"gen": generated - started, "train": ended - generated, "step": ended - started,
                "score": float(rewards.mean())}


def time_reference(model_dir: Path, tools: Path, train: Path, batches: list[list[int]],
                   args) -> list[dict[str, float]]:
    import datasets

    rows = list(datasets.load_dataset("parquet", data_files=str(train), split="train"))
    by_index = {int(row["extra_info"]["index"]): row for row in rows}
    loop = ReferenceLoop(model_dir, tools, rows, args)
    records = []
    for step, indices in enumerate(batches):  # agentrl's batches, in its order
        record = loop.step([by_index[i] for i in indices])
        logger.info("reference step %d: %.2f s (gen %.2f)", step, record["step"], record["gen"])
        if step:
            records.append(record)
    return records


def mean(records: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.fmean(r[k] for r in records) for k in records[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed steps each (after a warm-up)")
    parser.add_argument("--sft-steps", type=int, default=1100,
                        help="the quickstart's SFT: the model calls the tool and answers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(torch.get_num_threads())
    with tempfile.TemporaryDirectory(prefix="agentrl_grpo_step_") as tmp:
        tmp_path = Path(tmp)
        model, train, tools = prepare(tmp_path / "qs", args.sft_steps, args.seed)
        records, batches = time_agentrl(
            agentrl_overrides(model, train, tools, tmp_path / "rl", args), args.steps)
        agentrl = mean(records)
        reference = mean(time_reference(model, tools, train, batches, args))
    result = {
        "bench": "grpo_step",
        "agentrl_step_s": agentrl["step"],
        "reference_step_s": reference["step"],
        "ratio": agentrl["step"] / reference["step"],
        "generation_ratio": agentrl["gen"] / reference["gen"],
        "agentrl_stages_s": agentrl,
        "reference_stages_s": reference,
        "prompts": args.prompts, "n": args.n, "steps": args.steps, "threads": torch.get_num_threads(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
