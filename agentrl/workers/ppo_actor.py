"""The policy's two jobs on a (sharded) model: log-probs of trajectories, and the PPO update.

    actor = PPOActor(model, optimizer, ActorSettings.from_config(actor_cfg), mini_batch_size=64,
                     seed=0)
    log_probs, entropys = actor.compute_log_prob(data, batching, temperature=1.0)
    metrics = actor.update_policy(data, temperature=1.0)

``update_policy`` minimises, per mini-batch (Schulman et al. 2017, PPO; Shao et al. 2024,
GRPO, for the KL loss):

    policy_loss(old_log_probs, log_probs, advantages, response_mask)   # actor.policy_loss.loss_mode
      - entropy_coeff * agg(entropy)                                    # when entropy_coeff != 0
      + kl_loss_coef * agg(kl(log_probs, ref_log_prob))                 # when use_kl_loss

with ``agg`` = ``actor.loss_agg_mode`` and the micro-batch weighting of
``agentrl.workers.update``. The batch holds ``input_ids``, ``attention_mask``,
``position_ids``, ``responses``, ``response_mask`` (1 on the model's own tokens, 0 on tool
output and padding), ``old_log_probs``, ``advantages`` and, when used, ``ref_log_prob``
and ``rollout_log_probs`` (for the rollout correction).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from agentrl.algos import agg_loss, get_policy_loss_fn, kl_penalty
from agentrl.protocol import DataProto
from agentrl.workers.actor_settings import ActorSettings
from agentrl.workers.forward import model_device, response_log_probs
from agentrl.workers.micro_batch import MicroBatching, plan_micro_batches
from agentrl.workers.update import MicroResult, UpdateSettings, mini_batch_rows, run_update

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")
FUSED_KEYS = ("own_old_log_probs", "row_index")  # the fused old log-probs' bookkeeping


def micro_batching(
    use_dynamic_bsz: bool | None,
    micro_batch_size: int | None,
    max_token_len: int,
    shared_prefix: bool = False,
) -> MicroBatching:
    """MicroBatching from the three config keys every worker section has (and whether rows
    sharing a prefix are kept together). ``use_dynamic_bsz`` null (the default) means by
    token budget unless a micro-batch size is set."""
    dynamic = micro_batch_size is None if use_dynamic_bsz is None else bool(use_dynamic_bsz)
    return MicroBatching(dynamic, micro_batch_size, int(max_token_len), bool(shared_prefix))


def require_keys(data: DataProto, keys: tuple[str, ...] | list[str], what: str) -> None:
    """Raise KeyError naming the tensors ``what`` needs that ``data`` lacks."""
    have = set(data.batch.keys()) if data.batch is not None else set()
    missing = [k for k in keys if k not in have]
    if missing:
        raise KeyError(f"{what} needs data.batch keys {missing}; it has {sorted(have)}")


def model_inputs(data: DataProto, extra: tuple[str, ...] = ()) -> DataProto:
    """Only the tensors a forward pass (plus ``extra``) reads; position_ids when present."""
    keys = [k for k in (*MODEL_INPUTS, *extra) if k in data.batch.keys()]
    return data.select(batch_keys=keys, non_tensor_batch_keys=[], meta_info_keys=[])


@torch.no_grad()
def micro_batched_forward(
    model: torch.nn.Module, data: DataProto, batching: MicroBatching, forward: Any
) -> list[torch.Tensor]:
    """Run ``forward(model, micro_batch) -> tuple of (b, R) tensors`` over the micro-batches
    and put the rows back in ``data``'s order; returns one (B, R) CPU tensor per output.

    The results stay on the model's device until the last micro-batch and come to the host
    in one transfer per output: no host sync between micro-batches."""
    device = model_device(model)  # batches arrive on the CPU; each micro-batch moves alone
    rows_done: list[int] = []
    results: list[tuple[torch.Tensor, ...]] = []
    for rows in plan_micro_batches(data, batching):
        if len(rows) == 0:  # keeps the ranks' collectives aligned; the result is unused
            forward(model, data[[0]].to(device).batch)
            continue
        results.append(tuple(r.detach() for r in forward(model, data[rows].to(device).batch)))
        rows_done.extend(rows)
    if not results:
        raise ValueError("cannot compute log-probs of an empty batch")
    index = torch.as_tensor(rows_done)
    outputs = []
    for parts in zip(*results, strict=True):
        gathered = torch.cat(parts).cpu()  # (rows done, R): the pass's one transfer
        out = torch.zeros((len(data), gathered.shape[1]), dtype=gathered.dtype)
        out[index] = gathered
        outputs.append(out)
    return outputs


class PPOActor:
    """Log-probs and PPO updates of one model with its optimizer (``config``:
    ``ActorSettings.from_config(actor_rollout_ref.actor)``, actor_settings.py);
    ``mini_batch_size`` is per rank, in trajectories."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        config: ActorSettings,
        mini_batch_size: int = 1,
        micro_batch_size: int | None = None,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        if not isinstance(config, ActorSettings):
            raise TypeError("PPOActor takes ActorSettings.from_config(actor_rollout_ref.actor), "
                            f"got {type(config).__name__}")
        self.config = config
        self.loss_fn = get_policy_loss_fn(config.policy_loss.loss_mode)
        self.shared_prefix = config.shared_prefix  # workers/forward.py: prefixes once
        self.settings = UpdateSettings(
            mini_batch_size=mini_batch_size,
            epochs=config.ppo_epochs,
            shuffle=config.shuffle,
            batching=micro_batching(
                config.use_dynamic_bsz, micro_batch_size, config.ppo_max_token_len_per_gpu,
                self.shared_prefix,
            ),
            grad_clip=config.grad_clip,
            loss_agg_mode=config.loss_agg_mode,
            seed=seed,
        )
        # fused old log-probs: (row_index, own, log_probs) of each micro-batch, read after
        self._own_old: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def compute_log_prob(
        self,
        data: DataProto,
        batching: MicroBatching,
        temperature: float = 1.0,
        calc_entropy: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (B, R) of ``data["responses"]`` and, if asked, entropies (B, R)."""
        require_keys(data, MODEL_INPUTS[:2] + ("responses",), "compute_log_prob")
        self.model.eval()
        batching = replace(batching, shared_prefix=self.shared_prefix)

        def forward(model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, ...]:
            log_probs, entropy = response_log_probs(
                model, batch, temperature, calc_entropy, shared_prefix=self.shared_prefix
            )
            return (log_probs,) if entropy is None else (log_probs, entropy)

        outputs = micro_batched_forward(self.model, model_inputs(data), batching, forward)
        return outputs[0], outputs[1] if calc_entropy else None

    def update_policy(
        self,
        data: DataProto,
        temperature: float = 1.0,
        step: int = 0,
        old_log_prob_batching: MicroBatching | None = None,
    ) -> dict[str, float]:
        """PPO epochs over ``data``; returns averaged ``actor/*`` metrics.

        Without ``data["old_log_probs"]`` and with ``old_log_prob_batching`` (the fused old
        log-probs, one epoch only), the update makes them itself and leaves them in
        ``data.batch["old_log_probs"]``: those of the first mini-batch are its own first
        forward's (until its optimizer step the weights are the old policy's), the others'
        come from one forward without gradients before that step. The same numbers as a
        separate pass (to float rounding), a mini-batch's forward fewer."""
        if self.optimizer is None:
            raise RuntimeError("this actor has no optimizer (a reference model cannot train)")
        needed = ["response_mask", "old_log_probs", "advantages"]
        if self.config.use_kl_loss:
            needed.append("ref_log_prob")
        fused = old_log_prob_batching is not None and "old_log_probs" not in data.batch.keys()
        if fused:
            self._prepare_fused_old_log_probs(data, temperature, step, old_log_prob_batching)
        require_keys(data, [*MODEL_INPUTS[:2], "responses", *needed], "update_actor")
        extra = (*needed, "rollout_log_probs", *(FUSED_KEYS if fused else ()))
        self.model.train()
        self._own_old = []
        metrics = run_update(
            self.model,
            self.optimizer,
            model_inputs(data, extra),
            self.settings,
            lambda micro: self._micro_loss(micro, temperature),
            prefix="actor",
            step=step,
        )
        if fused:
            old = data.batch["old_log_probs"]
            for rows, own, log_probs in self._own_old:  # on the host once, after the update
                own = own.cpu()
                old[rows.cpu()[own]] = log_probs.cpu()[own].to(old.dtype)
            for key in FUSED_KEYS:
                data.batch.pop(key)
        self._own_old = []
        if self.config.use_kl_loss:
            metrics["actor/kl_coef"] = self.config.kl_loss_coef
        return metrics

    def _prepare_fused_old_log_probs(self, data: DataProto, temperature: float, step: int,
                                     batching: MicroBatching) -> None:  # fmt: skip
        """``old_log_probs`` of every row outside the first mini-batch (a forward without
        gradients); the first mini-batch's rows are marked to take their own."""
        if self.settings.epochs != 1:
            raise ValueError("fused old log-probs need actor.ppo_epochs=1 (a later epoch's "
                             "mini-batches come after optimizer steps)")  # fmt: skip
        n = len(data)
        first = mini_batch_rows(n, self.settings, 0, step)[0]
        own = torch.zeros(n, dtype=torch.bool)
        own[first] = True
        old = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        rest = torch.nonzero(~own)[:, 0]
        if len(rest):
            old[rest] = self.compute_log_prob(data[rest], batching, temperature, False)[0]
        data.batch["old_log_probs"] = old
        data.batch["own_old_log_probs"] = own
        data.batch["row_index"] = torch.arange(n)

    def _micro_loss(self, micro: DataProto, temperature: float) -> MicroResult:
        cfg = self.config
        batch = micro.batch
        mask = batch["response_mask"]  # (b, R)
        entropy_coeff = cfg.entropy_coeff
        log_prob, entropy = response_log_probs(
            self.model, batch, temperature, entropy=True, entropy_grad=entropy_coeff != 0.0,
            shared_prefix=self.shared_prefix,
        )
        rollout_log_probs = (
            batch["rollout_log_probs"] if "rollout_log_probs" in batch.keys() else None
        )
        old_log_probs = batch["old_log_probs"]
        if "own_old_log_probs" in batch.keys():  # fused: the first mini-batch's are its own
            own = batch["own_old_log_probs"]
            old_log_probs = torch.where(own[:, None], log_prob.detach(), old_log_probs)
            self._own_old.append((batch["row_index"], own, log_prob.detach()))
        pg_loss, stats = self.loss_fn(
            old_log_probs,
            log_prob,
            batch["advantages"],
            mask,
            cfg.loss_agg_mode,
            cfg.policy_loss,
            rollout_log_probs=rollout_log_probs,
        )
        entropy_agg = agg_loss(entropy, mask, cfg.loss_agg_mode)
        loss = pg_loss - entropy_coeff * entropy_agg if entropy_coeff else pg_loss
        losses = {"actor/pg_loss": pg_loss.detach(), "actor/entropy": entropy_agg.detach()}
        if cfg.use_kl_loss:
            kld = kl_penalty(log_prob, batch["ref_log_prob"], cfg.kl_loss_type)  # (b, R)
            kl_loss = agg_loss(kld, mask, cfg.loss_agg_mode)
            loss = loss + cfg.kl_loss_coef * kl_loss
            losses["actor/kl_loss"] = kl_loss.detach()
        return MicroResult(loss=loss, losses=losses, stats=dict(stats))
