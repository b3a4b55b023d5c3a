"""`agentrl gateway --model MODEL_DIR --port P [key=value ...]`: serve the OpenAI-compatible
gateway (agentrl/gateway/server.py) in front of the configured backend.

The backend is `actor_rollout_ref.rollout` of the config (`hf`: the model in this process;
`sglang`: servers), the tool-call format `multi_turn.format`, the default completion budget
`data.max_response_length`. Agents use `http://HOST:P/sessions/<episode id>/v1` as their
OpenAI base URL, and `DELETE /sessions/<episode id>` when they have read its record.
Request bodies are bounded (`--max-body-bytes`, `--body-timeout`). With
`actor_rollout_ref.rollout.multi_turn.tool_config_path` (MCP servers included) agents may
list and call those tools at `/sessions/<episode id>/v1/tools` (agentrl/gateway/tools.py).

A bad config, a --model that is no model directory or whose tokenizer does not load, an
address it cannot listen on and a tool config that does not load are refused before the
model loads: one message on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.config import load_config
from agentrl.utils.command import report_error
from agentrl.utils.http_limits import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES

if TYPE_CHECKING:
    from agentrl.gateway.gateway_settings import GatewaySettings

logger = logging.getLogger(__name__)


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (0-65535)")
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="Hugging Face model directory")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8300, help="port (default 8300)")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                        help="largest request body; larger ones get a 413 (default 8 MiB)")
    parser.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT,
                        help="seconds a request body may take to arrive; then a 408 (default 30)")
    parser.add_argument("overrides", nargs="*", help="config overrides key.sub=value")


def check_address(host: str, port: int) -> None:
    """ValueError when this process cannot listen on HOST:PORT (in use, no such address),
    found before the model loads."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as err:
        raise ValueError(f"--host {host} --port {port}: cannot listen there "
                         f"({err.strerror or err})") from err


def check_model_dir(model: str) -> None:
    if not (Path(model) / "config.json").is_file():
        raise ValueError(f"--model {model} is not a Hugging Face model directory (no "
                         "config.json)")


def run(args: argparse.Namespace) -> int:
    from agentrl.gateway.gateway_settings import GatewaySettings
    from agentrl.models.tokenizer import load_tokenizer
    from agentrl.rollout.assembly import configured_tools
    from agentrl.rollout.engine_config import RolloutConfigError

    try:  # every refusal before the backend loads the model: one message, exit 2
        cfg = load_config(overrides=[*args.overrides, f"actor_rollout_ref.model.path={args.model}"])
        settings = GatewaySettings.from_config(cfg, args)
        check_model_dir(args.model)
        check_address(args.host, args.port)
        model = cfg.actor_rollout_ref.model
        try:
            tokenizer = load_tokenizer(args.model, trust_remote_code=bool(model.trust_remote_code),
                                       chat_template=model.custom_chat_template)
        except (OSError, ValueError) as err:  # transformers' own, over many lines
            raise ValueError(f"--model {args.model}: cannot load its tokenizer: "
                             + " ".join(str(err).split())) from err
        try:
            tools = configured_tools(settings.backend["multi_turn"])
        except ValueError as err:
            raise ValueError(f"actor_rollout_ref.rollout.multi_turn.tool_config_path: {err}") \
                from err
    except (ValueError, RolloutConfigError) as err:  # a ConfigError, a tool config's error
        return report_error(err)
    return serve(settings, tokenizer, tools)


def serve(settings: GatewaySettings, tokenizer: Any, tools: dict) -> int:
    """Load the backend and serve the gateway until stopped."""
    import uvicorn

    from agentrl.gateway.server import create_app
    from agentrl.rollout.backends.factory import create_backend

    backend = create_backend(settings.backend, settings.model_path, tokenizer, seed=settings.seed)
    app = create_app(
        backend, tokenizer, model_name=settings.model_name,
        tool_format=settings.multi_turn.format,
        chat_template_kwargs=settings.chat_template_kwargs,
        default_max_tokens=settings.default_max_tokens,
        max_body_bytes=settings.max_body_bytes, body_timeout=settings.body_timeout,
        tools=tools, multi_turn=settings.multi_turn,
    )  # fmt: skip
    if tools:
        logger.info("tools for agents: %s (/sessions/<id>/v1/tools)", ", ".join(tools))
    logger.info("gateway on http://%s:%d/sessions/<id>/v1", settings.host, settings.port)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")
    return 0


if __name__ == "__main__":
    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "gateway"))
