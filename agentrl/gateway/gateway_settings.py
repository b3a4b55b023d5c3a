"""GatewaySettings: what `agentrl gateway` serves with, typed, made once from the validated
config and the command's flags.

    settings = GatewaySettings.from_config(cfg, args)    # gateway/cli.py, after load_config
    serve(settings, tokenizer, tools)

The gateway's own keys are the rollout's: `actor_rollout_ref.rollout` (its backend plugin's
keys, `multi_turn.format` the tool-call parser, `multi_turn`'s tool limits),
`data.max_response_length` (the default completion budget),
`data.apply_chat_template_kwargs`, `trainer.seed` (the hf sampler's). As in
`RolloutConfig`, no field has a default and a key the tree lacks is a `RolloutConfigError`
naming it in full (`data.max_response_length`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentrl.rollout.engine_config import MultiTurnConfig, RolloutConfig, required


@dataclass(frozen=True)
class GatewaySettings:
    """The served model, the address and body limits (flags), and the config's keys."""

    model_path: str  # --model: a Hugging Face model directory
    model_name: str  # what /v1/models lists: the directory's name
    host: str  # --host
    port: int  # --port
    max_body_bytes: int  # --max-body-bytes
    body_timeout: float  # --body-timeout
    default_max_tokens: int  # data.max_response_length
    chat_template_kwargs: dict[str, Any]  # data.apply_chat_template_kwargs
    seed: int  # trainer.seed
    multi_turn: MultiTurnConfig  # rollout.multi_turn: the parser, the tools' limits
    # actor_rollout_ref.rollout resolved, for the backend plugin, which reads its own keys
    # (rollout/backends/registry.py: a plugin's `create(cfg, ...)` takes the section)
    backend: Mapping[str, Any]

    @classmethod
    def from_config(cls, cfg: DictConfig, args: argparse.Namespace) -> GatewaySettings:
        """From the validated tree (`load_config`) and the parsed flags of `agentrl gateway`."""
        tree: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
        data = required(tree, "data", "")
        rollout = required(required(tree, "actor_rollout_ref", ""), "rollout", "actor_rollout_ref")
        return cls(
            model_path=str(args.model),
            model_name=Path(args.model).name,
            host=str(args.host),
            port=int(args.port),
            max_body_bytes=int(args.max_body_bytes),
            body_timeout=float(args.body_timeout),
            default_max_tokens=int(required(data, "max_response_length", "data")),
            chat_template_kwargs=dict(required(data, "apply_chat_template_kwargs", "data") or {}),
            seed=int(required(required(tree, "trainer", ""), "seed", "trainer")),
            multi_turn=RolloutConfig.from_config(rollout).multi_turn,
            backend=dict(rollout),
        )  # fmt: skip


__all__ = ["GatewaySettings"]
