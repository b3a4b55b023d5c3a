"""Deprecated: moved to agentrl.models.chat."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.models.chat")
