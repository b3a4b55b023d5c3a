"""Per-turn cost of appending a turn: delta tokenization vs re-tokenizing the conversation.

    python bench/tokenization_overhead.py                     # tiny offline tokenizer
    python bench/tokenization_overhead.py --tokenizer PATH    # any HF tokenizer with a template

A conversation of N turns (assistant tool call + tool response) is built; the cost of
appending turn N is measured both ways:

- delta: what the rollout engine does (agentrl.models.chat.ChatRenderer.delta_text +
  encode): render a fixed three-message base plus the new messages, tokenize the suffix;
- full: render and tokenize the whole conversation again (what a naive rollout does).

Prints the median time per appended turn at 2, 8 and 32 turns and the ratio full/delta.
Target: the delta cost stays flat as the conversation grows (full grows linearly).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from transformers import AutoTokenizer

from agentrl.models.chat import ChatRenderer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


def conversation(turns: int) -> list[dict]:
    messages = [{"role": "user", "content": "Who wrote the book that the film was based on?"}]
    for t in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {t}: I will search.",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {
                            "name": "search",
                            "arguments": {"query": f"film book author {t}"},
                        },
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "content": f"Doc {t}: The novel was written by "
                f"an author born in 18{t % 100:02d}, first published in a magazine. " * 3,
            }
        )
    return messages


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (template compilation)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(renderer: ChatRenderer, turns: int, repeats: int) -> tuple[float, float]:
    messages = conversation(turns)
    new_turn = messages[-1:]  # the last tool response (and the next generation prompt)

    def delta() -> list[int]:
        return renderer.encode(renderer.delta_text(new_turn))

    def full() -> list[int]:
        return renderer.encode(renderer.render(messages, True, TOOLS))

    full_ids = full()
    prefix_ids = renderer.encode(renderer.render(messages[:-1], False, TOOLS))
    assert full_ids[: len(prefix_ids)] == prefix_ids, "the template is not prefix-stable"
    return median_seconds(delta, repeats), median_seconds(full, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir (default: tiny model)")
    parser.add_argument("--turns", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    path = args.tokenizer
    if path is None:
        from agentrl.models.tiny import make_tiny_model

        path = make_tiny_model(Path(tempfile.mkdtemp()) / "tiny", size="tiny", seed=0)
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(path))
    print(f"{'turns':>6} {'delta ms/turn':>14} {'full ms/turn':>13} {'full/delta':>11}")
    results = []
    line: dict[str, float] = {}
    for turns in args.turns:
        delta, full = measure(renderer, turns, args.repeats)
        results.append(delta)
        print(f"{turns:>6} {delta * 1e3:>14.3f} {full * 1e3:>13.3f} {full / delta:>11.1f}")
        line |= {f"delta_ms_{turns}": round(delta * 1e3, 4), f"full_ms_{turns}": round(full * 1e3, 4),
                 f"full_over_delta_{turns}": round(full / delta, 2)}  # fmt: skip
    line["delta_last_over_first"] = round(results[-1] / results[0], 3)
    print(
        f"delta cost at {args.turns[-1]} turns / at {args.turns[0]} turns: "
        f"{results[-1] / results[0]:.2f} (target: ~1, flat)"
    )
    print(json.dumps(line))  # one JSON line (bench/repeat.py reads it)


if __name__ == "__main__":
    main()
