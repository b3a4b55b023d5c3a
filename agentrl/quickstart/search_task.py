"""Deprecated: moved to agentrl.tasks.search_task."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.tasks.search_task")
