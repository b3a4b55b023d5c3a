"""Deprecated: moved to agentrl.testing.rollout."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.testing.rollout")
