"""Parameters and optimizer state on the CPU between uses (``fsdp_config.param_offload`` /
``optimizer_offload``), so that generation has the GPU to itself in the colocated layout.

    residency = Residency(model, optimizer, device, params=True, optimizer_state=True)
    residency.offload()                      # after init: both on the CPU
    with residency.on_device(optimizer=True):
        update(...)                          # parameters and optimizer state on the GPU
    # back on the CPU here (only what the keys ask for moves)

A sharded FSDP2 module moves with ``module.to(device)`` (each rank moves its own shards;
gradients, if any, move with them); AdamW's state moves tensor by tensor. On a CPU worker
the device is the CPU and nothing moves. Moves are counted in ``residency.moves`` (what,
where), which tests read to check the order of offloads around generation and update.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@torch.no_grad()
def move_model(model: torch.nn.Module, device: torch.device | str) -> None:
    """Move a (sharded) module's parameters, gradients and buffers to ``device``."""
    model.to(device)
    if torch.device(device).type == "cpu" and torch.cuda.is_available():
        torch.cuda.empty_cache()


@torch.no_grad()
def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str) -> None:
    """Move the optimizer's state tensors (AdamW: exp_avg, exp_avg_sq). Scalars (AdamW's
    ``step``) stay where the optimizer put them: it keeps them on the CPU unless capturable."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                state[key] = value.to(device, non_blocking=True)
    if torch.device(device).type == "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()  # non-blocking copies must land before the memory is reused
        torch.cuda.empty_cache()


class Residency:
    """Where a model's parameters and its optimizer's state live between uses."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        device: torch.device,
        params: bool = False,
        optimizer_state: bool = False,
        name: str = "actor",
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.params = bool(params)
        self.optimizer_state = bool(optimizer_state and optimizer is not None)
        self.name = name
        self.moves: list[tuple[str, str]] = []  # (what, "device" | "cpu"), in order
        self._params_home = True  # on the device
        self._optimizer_home = True

    @property
    def offloads(self) -> bool:
        return self.params or self.optimizer_state

    def offload(self, params: bool = True) -> None:
        """Move what the keys ask for to the CPU (nothing when neither is set); with
        ``params=False`` only the optimizer state."""
        # (an optimizer that has not stepped has no state yet: its first step makes it
        # on the device, and it leaves after that)
        if self.optimizer_state and self._optimizer_home and self.optimizer.state:
            move_optimizer_state(self.optimizer, "cpu")
            self._optimizer_home = False
            self.moves.append((f"{self.name}.optimizer", "cpu"))
        if params and self.params and self._params_home:
            move_model(self.model, "cpu")
            self._params_home = False
            self.moves.append((f"{self.name}.params", "cpu"))

    def load(self, optimizer: bool = False) -> None:
        """Bring the parameters (and with ``optimizer`` the optimizer state) to the device."""
        if not self._params_home:
            move_model(self.model, self.device)
            self._params_home = True
            self.moves.append((f"{self.name}.params", "device"))
        if optimizer and not self._optimizer_home:
            move_optimizer_state(self.optimizer, self.device)
            self._optimizer_home = True
            self.moves.append((f"{self.name}.optimizer", "device"))

    @contextlib.contextmanager
    def on_device(self, optimizer: bool = False) -> Iterator[None]:
        """The parameters (and optimizer state) on the device inside the block; offloaded
        again after it, also when it raises."""
        self.load(optimizer=optimizer)
        try:
            yield
        finally:
            self.offload()

    def describe(self) -> dict[str, Any]:
        return {"params_on_device": self._params_home, "optimizer_on_device": self._optimizer_home}
