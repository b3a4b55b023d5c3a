"""`agentrl env prepare SPEC --out DIR`: a foreign environment as the files of a run.

    agentrl env prepare reasoning_gym:basic_arithmetic --out data/rg --size 2000 --seed 0
    agentrl env prepare textarena:Blackjack-v0 --out data/blackjack --size 500
    agentrl env prepare openenv:my_env.server.app --out data/my_env --size 100
    agentrl env prepare verifiers:my-env --out data/my_env --size 500

It writes DIR/train.parquet and DIR/test.parquet (verl rows that share no item, so no
prompt; an environment with too few distinct items is refused, saying how many it has; a
game whose prompt is the same for every seed, its setup hidden, as GuessTheNumber-v0's, is
refused unless --allow-shared-prompts, with which train and test share that prompt but no
game) and the interaction and tool configs when the environment needs them, then prints the
`agentrl train` overrides that use them (docs/environments.md). An environment it cannot
prepare is one line on stderr naming why, exit status 2 (a message of several lines, such
as a child server's traceback, is cut to its first line and its last: `one_line`).
"""

from __future__ import annotations

import argparse
import sys

from agentrl.environments.spec import SPEC_FORMS
from agentrl.utils.answer_tags import ANSWER_TAG
from agentrl.utils.command import debug_enabled


def one_line(err: BaseException) -> str:
    """An error's message on one line: its first line and, when there are more, its last
    (a child's traceback ends with the exception that stopped it)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip(" *=-")]
    if not lines:
        return type(err).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0].rstrip(':')}: ... {lines[-1]}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    prep = parser
    prep.add_argument("action", choices=["prepare"],
                      help="prepare: write DIR/train.parquet, DIR/test.parquet and the configs "
                           "the environment needs")
    forms = ", ".join(form for form, _ in SPEC_FORMS.values())
    prep.add_argument("spec", metavar="SPEC", help=f"the environment: {forms}")
    prep.add_argument("--out", required=True, help="the directory to write")
    prep.add_argument("--size", type=int, default=1000, help="training items (default 1000)")
    prep.add_argument("--test-size", type=int, default=200,
                      help="held-out items, never in training (default 200)")
    prep.add_argument("--seed", type=int, default=0, help="which items (default 0)")
    prep.add_argument("--answer-tag", default=ANSWER_TAG,
                      help="the tag the final answer or move goes in: a tag name, as in "
                           "<TAG></TAG> (default answer)")
    prep.add_argument("--allow-shared-prompts", action="store_true",
                      help="prepare a game whose prompt is the same for every seed, its setup "
                           "hidden (GuessTheNumber, Mastermind, Bandit, Minesweeper): train "
                           "and test then share the prompt but no game (refused without it)")


def run(args: argparse.Namespace) -> int:
    from agentrl.environments.prepare import prepare_environment

    try:
        prepared = prepare_environment(args.spec, args.out, size=args.size,
                                       test_size=args.test_size, seed=args.seed,
                                       answer_tag=args.answer_tag,
                                       allow_shared_prompts=args.allow_shared_prompts)  # fmt: skip
    except (ValueError, ImportError, OSError) as err:  # OSError: --out failed while writing
        sys.stderr.write(f"agentrl env prepare: {err if debug_enabled() else one_line(err)}\n")
        return 2
    sys.stdout.write(f"wrote {prepared.train} and {prepared.test}"
                     + "".join(f" and {p}" for p in prepared.configs.values())
                     + "\ntrain with:\n  agentrl train " + " \\\n    ".join(prepared.overrides)
                     + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "env"))
