"""`python -m agentrl.quickstart ARGS`: the same as `agentrl quickstart ARGS`."""

import sys

from agentrl.cli import run_command

sys.exit(run_command("quickstart"))
