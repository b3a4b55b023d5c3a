"""Deprecated: moved to agentrl.trainer.producer."""

from agentrl.utils.deprecation import moved_module

moved_module(__name__, "agentrl.trainer.producer")
