"""`agentrl trajectories`: write a run's sessions in the open trajectory format, or check a file.

    agentrl trajectories export RUN_OR_DUMP_DIR --out FILE.jsonl [--source validation]
    agentrl trajectories validate FILE.jsonl

`export` reads the trainer's dumps (``trainer.rollout_data_dir``) of a run directory, or a
dump directory itself, and writes one session tree per line (agentrl/trajectories/export.py,
docs/trajectories.md); `validate` checks a file against the format's JSON Schema and rules.
A directory without dumps or a file that does not match is one line on stderr naming what is
wrong, exit status 2. The file trains with `agentrl sft --trajectories FILE.jsonl`.
"""

from __future__ import annotations

import argparse
import sys

ACTIONS = ("export", "validate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS,
                        help="export: a run's dumps as a trajectory file; validate: check a file")
    parser.add_argument("path", metavar="PATH",
                        help="export: the run or dump directory; validate: the .jsonl file")
    parser.add_argument("--out", default=None, help="export: the .jsonl file to write")
    parser.add_argument("--source", default="rollouts", choices=["rollouts", "validation"],
                        help="export: the run's training rollouts (default) or validation dumps")


def run(args: argparse.Namespace) -> int:
    from agentrl.trajectories.export import TrajectoryExportError, export_trajectories
    from agentrl.trajectories.format import TrajectoryFormatError, read_trajectories

    try:
        if args.action == "validate":
            trajectories = read_trajectories(args.path)
            segments = sum(len(t["segments"]) for t in trajectories)
            sys.stdout.write(f"{args.path}: {len(trajectories)} sessions, {segments} segments, "
                             "all match the trajectory format\n")
            return 0
        if not args.out:
            raise TrajectoryExportError("agentrl trajectories export needs --out FILE.jsonl")
        summary = export_trajectories(args.path, args.out, args.source)
    except (TrajectoryExportError, TrajectoryFormatError) as err:
        sys.stderr.write(f"agentrl trajectories {args.action}: {err}\n")
        return 2
    sys.stdout.write(f"wrote {summary['sessions']} sessions ({summary['segments']} segments, "
                     f"{summary['policy_tokens']} policy tokens) from {summary['files']} dump "
                     f"files to {summary['out']}\n")
    return 0


if __name__ == "__main__":
    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "trajectories"))
