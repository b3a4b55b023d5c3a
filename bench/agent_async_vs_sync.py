"""Agent mode's training steps per minute in sync, one_step_off and async training, and
held-out accuracy after the same number of steps: bench/async_vs_sync.py with the calculator
written as an agent (examples/agents/calculator_agent.py through the gateway, agent mode)
whose tool calls take a heavy-tailed time (bench/latency_agent.py).

    python bench/agent_async_vs_sync.py                         # seed 0, 25 steps per mode
    python bench/agent_async_vs_sync.py --seeds 0 1 --out-dir outputs/agent_async_vs_sync
    python bench/agent_async_vs_sync.py --modes sync async --max-staleness 2

Everything else is bench/async_vs_sync.py's: the quickstart's SFT warm start once per seed,
GRPO with the quickstart's recipe per mode, greedy held-out accuracy on 256 problems (the
engine's calculator path: the same skill), steps per minute over the training loop's step
times. Prints a table per seed and one JSON line with ``sync_steps_per_min``,
``one_step_off_steps_per_min``, ``async_steps_per_min``, ``async_over_sync``, each seed's
numbers, ``agent_function`` and ``versions``. Timings are only right on an otherwise idle
machine; bench/repeat.py runs it several times, each a fresh process.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import async_vs_sync
from repeat import versions

ROOT = Path(__file__).resolve().parent.parent
AGENT = f"{ROOT / 'bench' / 'latency_agent.py'}:run"
AGENT_MODE = (f"actor_rollout_ref.rollout.agent_function={AGENT}",
              "actor_rollout_ref.rollout.multi_turn.enable=false")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--modes", nargs="+", default=list(async_vs_sync.MODES),
                        choices=async_vs_sync.MODES)
    parser.add_argument("--max-staleness", type=int, default=2, help="async mode's bound")
    parser.add_argument("--out-dir", type=Path, default=Path("outputs/agent_async_vs_sync"))
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every mode's run (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    sys.path.insert(0, str(ROOT))  # tools.calculator
    modes = tuple(args.modes)
    results = [async_vs_sync.run_seed(args.out_dir.resolve() / f"seed_{seed}", seed, args.steps,
                                      modes, args.max_staleness, AGENT_MODE + tuple(args.override))
               for seed in args.seeds]  # fmt: skip
    for result in results:
        print(async_vs_sync.table(result, modes) + "\n")
    line = async_vs_sync.summary(results, modes)
    line["agent_function"] = AGENT
    line["overrides"] = list(args.override)
    line["versions"] = versions()
    line["seeds"] = results
    print(json.dumps(line, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
