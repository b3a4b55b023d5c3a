"""Deprecated: moved to agentrl.tasks.quickstart."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.tasks.quickstart")
