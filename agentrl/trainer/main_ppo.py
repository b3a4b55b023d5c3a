"""`python -m agentrl.trainer.main_ppo ARGS`: verl's entry point under its module name.

A verl run script changes `python3 -m verl.trainer.main_ppo` to this and nothing else; it
is `agentrl train ARGS` (agentrl/trainer/main.py, docs/verl.md).
"""

from __future__ import annotations

import sys

from agentrl.cli import run_command


def main() -> int:
    return run_command("train")


if __name__ == "__main__":
    sys.exit(main())
