"""The `agentrl` command line.

Each sub-command lives in its own module, which exposes
`add_arguments(parser: argparse.ArgumentParser) -> None` and
`run(args: argparse.Namespace) -> int`. Modules are imported only when their command
runs, so `agentrl --help` stays fast and one command's heavy imports never slow another.

    agentrl config [--config recipe.yaml | --config-path DIR --config-name NAME] [key=value ...]
    agentrl make-tiny-model OUT_DIR [--size nano|tiny|small|medium|large] [--seed 0]
    agentrl smoke [--out-dir outputs/smoke]
    agentrl serve --model PATH --port P
    agentrl train [--config recipe.yaml | --config-path DIR --config-name NAME] [key=value ...]
    agentrl sft --model PATH --data DATA --out-dir DIR     (or --trajectories FILE.jsonl)
    agentrl quickstart --out-dir outputs/quickstart
    agentrl generate --config X.yaml data.path=IN.parquet data.output_path=OUT.jsonl
    agentrl report RUN_DIR
    agentrl trajectories export RUN_OR_DUMP_DIR --out FILE.jsonl
    agentrl export CHECKPOINT_DIR --out DIR [--adapter]
    agentrl gateway --model MODEL_DIR --port P [key=value ...]
    agentrl env prepare SPEC --out DIR [--size N] [--test-size M] [--seed S]
    agentrl doctor
    agentrl COMMAND --help

A command refuses bad input (a config key, a path, an option's value) before it starts any
work: one message on stderr, exit status 2, no traceback (`--debug` shows it).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from agentrl.utils.command import DEBUG_HELP, configure_logging, enable_debug, run_command_module

# command name -> (module implementing it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "config": ("agentrl.config.cli", "print the resolved config (defaults <- recipe <- overrides)"),
    "make-tiny-model": ("agentrl.models.cli", "write a tiny Qwen2 model + tokenizer, offline"),
    "smoke": ("agentrl.smoke",
              "train a random tiny model a few steps on CPU through the real stack (a check)"),
    "train": ("agentrl.trainer.main", "train with PPO/GRPO and relatives (verl's main_ppo)"),
    "sft": ("agentrl.sft_cli", "supervised fine-tuning on multi-turn tool conversations"),
    "quickstart": ("agentrl.quickstart",
                   "the main job: SFT + GRPO a small model to use a calculator on CPU, with a "
                   "before/after report (other tasks: --task, see its --help)"),
    "generate": ("agentrl.generate",
                 "roll out a dataset with tools and interactions (no training), write jsonl"),
    "export": ("agentrl.trainer.export",
               "write a run's checkpoint as a Hugging Face model folder with its tokenizer"),
    "report": ("agentrl.report.cli",
               "write RUN_DIR/report.html: training plots and a trajectory viewer"),
    "trajectories": ("agentrl.trajectories.cli",
                     "export a run's agent sessions as trajectory trees (the open format, "
                     "docs/trajectories.md) or validate such a file"),
    "serve": ("agentrl.rollout.backends.serve_cli",
              "serve a model with the hf engine behind SGLang's HTTP API"),
    "gateway": ("agentrl.gateway.cli",
                "an OpenAI-compatible endpoint in front of the policy that records every call"),
    "env": ("agentrl.environments.cli",
            "prepare another library's environment (reasoning-gym, TextArena, OpenEnv, "
            "verifiers) as the data and configs of a run"),
    "doctor": ("agentrl.doctor",
               "list the optional parts (node, agent CLIs, bwrap, episode cgroups, vLLM env, "
               "Chromium, env packages)"),
    "retriever": ("envs.retriever.cli", "serve a BM25 (or dense) retrieval index, Search-R1 API"),
    "sandbox": ("envs.sandbox.cli", "serve a resource-limited Python sandbox, SandboxFusion API"),
}


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentrl", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    # Parse only the global part first; the command's own parser takes the rest.
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    configure_logging(args.log_level)
    if args.debug:
        enable_debug()
    module_name, help_text = COMMANDS[args.command]
    module = importlib.import_module(module_name)
    return run_command_module(module, args.command, rest, description=help_text)


def run_command(command: str, argv: Sequence[str] | None = None) -> int:
    """`python -m MODULE ARGS` for a command's module: the same as `agentrl COMMAND ARGS`."""
    return main([command, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
