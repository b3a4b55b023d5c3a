"""The one collector of finished trajectories: padding them into the rollout's output
DataProto with its metrics and timing, and the per-config facts every producer of
trajectories shares (sampling parameters, a request's response budget, the chat renderer).

The in-process engine (`AsyncRolloutEngine`, a `TrajectoryCollector` itself: its callers
collect through it), the sharded engine's driver (`ShardedRolloutEngine`) and agent mode
(`AgentRollout`) all finish their trajectories through a `TrajectoryCollector`; none builds
an engine only to collect.

    collector = TrajectoryCollector(RolloutConfig.from_config(rollout_section), tokenizer,
                                    chat_template_kwargs)
    n, params = collector.sampling_params(validate=False)
    out = collector.collect(requests, batch, wall_s)     # DataProto, padded, with metrics
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrl.models.chat import ChatRenderer
from agentrl.protocol import DataProto
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.rollout.output import PaddedRows, batch_timing, build_output, request_metrics
from agentrl.rollout.request import AsyncRolloutRequest


class TrajectoryCollector:
    """Pads and measures finished requests per the rollout's typed config
    (`RolloutConfig.from_config(cfg.actor_rollout_ref.rollout)`, engine_config.py)."""

    def __init__(self, config: RolloutConfig, tokenizer: Any,
                 chat_template_kwargs: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        if not isinstance(config, RolloutConfig):
            raise TypeError("TrajectoryCollector takes a RolloutConfig (RolloutConfig."
                            f"from_config(rollout_section)), got {type(config).__name__}")
        self.settings = config
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer, dict(chat_template_kwargs or {}))
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else tokenizer.eos_token_id

    def sampling_params(self, validate: bool) -> tuple[int, dict[str, Any]]:
        """`(n, sampling params)` from the config (val_kwargs when validating)."""
        source = self.settings.val_kwargs if validate else self.settings.sampling
        greedy = not source.do_sample or source.temperature == 0
        params: dict[str, Any] = {
            "temperature": 0.0 if greedy else float(source.temperature),
            "top_p": 1.0 if greedy else float(source.top_p),
            "top_k": -1 if greedy else int(source.top_k),
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if self.tokenizer.eos_token_id is not None:
            params["stop_token_ids"] = [self.tokenizer.eos_token_id]
        if self.settings.ignore_eos:
            params["ignore_eos"] = True
        return int(source.n), params

    def response_budget(self, req: AsyncRolloutRequest) -> tuple[int, str]:
        """Response tokens this request may use and the name of the binding limit."""
        response_length = self.settings.response_length
        settings = self.settings
        max_model_len = settings.max_model_len or (settings.prompt_length + response_length)
        by_model_len = max_model_len - req.prompt_length
        if response_length <= by_model_len:
            return response_length, "response_length"
        return by_model_len, "max_model_len"

    def padded_rows(self, keys: list[tuple[int, int]]) -> PaddedRows:
        """The output's padded rows for these (batch_data_id, rollout_offset) keys, in this
        config's shapes; their padding starts filling now (`collect` takes them)."""
        return PaddedRows(keys, self.settings.prompt_length, self.settings.response_length,
                          self.pad_token_id, bool(self.settings.calculate_log_probs))  # fmt: skip

    def collect(
        self,
        requests: list[AsyncRolloutRequest],
        batch: DataProto,
        wall_s: float,
        rows: PaddedRows | None = None,
    ) -> DataProto:
        """The output DataProto of finished requests, with metrics and timing (`rows`:
        their padded rows if written already)."""
        out = build_output(
            requests,
            batch,
            prompt_length=self.settings.prompt_length,
            response_length=self.settings.response_length,
            pad_token_id=self.pad_token_id,
            with_log_probs=self.settings.calculate_log_probs,
            rows=rows,
        )
        out.meta_info["metrics"] = request_metrics(requests)
        out.meta_info["timing"] = batch_timing(requests, wall_s)
        return out
