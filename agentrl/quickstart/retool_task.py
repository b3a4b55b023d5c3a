"""Deprecated: moved to agentrl.tasks.retool_task."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.tasks.retool_task")
