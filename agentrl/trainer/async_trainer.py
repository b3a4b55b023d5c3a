"""Deprecated: moved to agentrl.trainer.off_policy."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.trainer.off_policy")
