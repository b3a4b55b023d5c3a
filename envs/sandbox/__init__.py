"""The code sandbox server: runs Python under resource limits, SandboxFusion's HTTP API.

    agentrl sandbox --port 8080                       # serve
    from envs.sandbox import SandboxConfig, create_app

Modules: ``config`` (the limits), ``launcher`` (the child that builds the cage and execs
the code), ``runner`` (supervision from the event loop), ``isolation`` (start-up probe of
what the machine allows), ``server`` (FastAPI), ``cli``. See docs/sandbox.md.
"""

from envs.sandbox.config import SandboxConfig
from envs.sandbox.server import create_app

__all__ = ["SandboxConfig", "create_app"]
