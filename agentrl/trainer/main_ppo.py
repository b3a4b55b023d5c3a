"""`python -m agentrl.trainer.main_ppo ARGS`: verl's entry point under its module name.

A verl run script changes `python3 -m verl.trainer.main_ppo` to this and nothing else; it
is `agentrl train ARGS` (agentrl/trainer/main.py, docs/verl.md).
"""

from __future__ import annotations

import sys

from agentrl.trainer import main as train_command
from agentrl.utils.command import main_of


def main() -> int:
    return main_of(train_command, "train")


if __name__ == "__main__":
    sys.exit(main())
