"""`python -m agentrl.quickstart ARGS`: the same as `agentrl quickstart ARGS`."""

import sys

import agentrl.quickstart as quickstart_command
from agentrl.utils.command import main_of

sys.exit(main_of(quickstart_command, "quickstart"))
