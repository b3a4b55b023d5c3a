"""`require(condition, message)`: a contract check of the plugin test kits
(agentrl/tools/testing.py, agentrl/interactions/testing.py) that holds under
``python -O`` too, where ``assert`` is stripped."""

from __future__ import annotations


def require(condition: object, message: str) -> None:
    """AssertionError(message) unless ``condition`` is true."""
    if not condition:
        raise AssertionError(message)


__all__ = ["require"]
