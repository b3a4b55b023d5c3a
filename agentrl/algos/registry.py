"""Deprecated: moved to agentrl.utils.registry."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.utils.registry")
