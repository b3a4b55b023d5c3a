"""The OpenAI-compatible gateway (`agentrl gateway`): agent code written against the
OpenAI chat API runs against the policy, and every call is recorded token-exact per
session (agentrl/gateway/server.py, agentrl/gateway/sessions.py)."""

from agentrl.gateway.server import create_app
from agentrl.gateway.sessions import Segment, Session

__all__ = ["Segment", "Session", "create_app"]
