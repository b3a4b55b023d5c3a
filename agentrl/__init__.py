"""agentrl: reinforcement learning for multi-turn, tool-using language models.

One asyncio rollout engine (one state machine per sample) against an inference
engine, pluggable tools, and one trainer (GRPO, PPO and relatives) on FSDP2 + Ray.
See README.md for the two commands that set up and run it.
"""

__version__ = "0.1.0.dev0"

from agentrl import compat as _compat
from agentrl import verl_compat as _verl_compat  # noqa: F401  (registers with the plugin loader)

_compat.install()  # old module paths keep working (agentrl/compat.py: MOVED_MODULES)
