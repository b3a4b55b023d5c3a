"""`agentrl report RUN_DIR`: write RUN_DIR/report.html (plots and trajectory viewer).

    agentrl report outputs/smoke
    agentrl report outputs/quickstart --max-per-step 32

Exit status 2, with the reason on stderr, when RUN_DIR is not a run directory.
"""

from __future__ import annotations

import argparse
import logging
import sys

from agentrl.report.run_dir import ReportError
from agentrl.report.writer import DEFAULT_MAX_PER_STEP, write_report

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        help="an `agentrl train` run directory "
        "(trainer.default_local_dir) or a quickstart output directory",
    )
    parser.add_argument(
        "--max-per-step",
        type=int,
        default=DEFAULT_MAX_PER_STEP,
        help=f"trajectories per step and source in the viewer (default {DEFAULT_MAX_PER_STEP})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        path = write_report(args.run_dir, max_per_step=args.max_per_step)
    except ReportError as err:
        sys.stderr.write(f"agentrl report: {err}\n")
        return 2
    logger.info("report: %s", path)
    return 0


if __name__ == "__main__":
    import sys

    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "report"))
