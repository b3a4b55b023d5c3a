"""``agentrl sandbox``: serve the resource-limited Python sandbox (SandboxFusion's API).

    agentrl sandbox --host 127.0.0.1 --port 8080 --max-concurrent 8 --memory-limit-mb 512

Every field of ``SandboxConfig`` is an option (``max_processes`` -> ``--max-processes``;
booleans as ``--network-namespace/--no-network-namespace`` pairs), with its documentation
as help. The server logs what isolation the machine allows when it starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging

from envs.sandbox.config import SandboxConfig

logger = logging.getLogger(__name__)

_TYPES = {"int": int, "float": float, "str": str}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    for f in dataclasses.fields(SandboxConfig):
        option = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(
                option,
                action=argparse.BooleanOptionalAction,
                default=f.default,
                help=f"{f.metadata['help']} (default {f.default})",
            )
        else:
            parser.add_argument(
                option,
                type=_TYPES[f.type],
                default=f.default,
                help=f"{f.metadata['help']} (default {f.default!r})",
            )


def sandbox_config_from_args(args: argparse.Namespace) -> SandboxConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(SandboxConfig)}
    return SandboxConfig(**values).validate()


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from envs.sandbox.server import create_app

    app = create_app(sandbox_config_from_args(args))
    logger.info("sandbox listening on http://%s:%d", args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    import sys

    from agentrl.cli import run_command

    sys.exit(run_command("sandbox"))
