"""Weights verified, not assumed: after a weight sync each backend checks that what it
holds is what the trainer sent (``actor_rollout_ref.rollout.verify_weights``).

    if verify_after_sync(rollout.verify_weights, sync_number):
        verified = await backend.verify_weights(source)    # servers verified, or raises

How each backend checks (its own ``verify_weights``):

- ``hf`` (in this process): every tensor of each bucket it was sent is compared with the
  tensor the model now holds (``torch.equal``).
- servers updated from a directory (``agentrl serve``, SGLang, vLLM): the expected values come
  from the safetensors files the trainer wrote (``iter_directory_tensors``), and each server
  answers for what it holds: ``agentrl serve`` and SGLang through ``/get_weights_by_name``
  (SGLang's own endpoint: the first ``VERIFY_ROWS`` rows of each tensor, every tensor
  checked), vLLM through its ``/weight_checker`` (agentrl/rollout/backends/vllm.py says how).
  A server that computes in another dtype than the one written (bf16 on a GPU) is compared
  with the written values cast to that dtype, so the check stays exact.

A mismatch raises ``WeightMismatchError`` naming the server and the first tensor that
differs, which stops the run: training on weights the engine does not hold would train a
policy nobody sampled from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VERIFY_MODES = ("every_sync", "first_sync", "off")  # rollout.verify_weights
VERIFY_ROWS = 4  # rows (first dimension) of each tensor /get_weights_by_name answers


class WeightMismatchError(RuntimeError):
    """A server does not hold the weights it was sent."""

    def __init__(self, server: str, tensor: str, detail: str = "") -> None:
        self.server, self.tensor = server, tensor
        super().__init__(f"rollout server {server} does not hold the weights it was sent: "
                         f"tensor {tensor!r} differs{': ' + detail if detail else ''} "
                         "(actor_rollout_ref.rollout.verify_weights)")


def verify_after_sync(mode: str, sync_number: int) -> bool:
    """Whether sync ``sync_number`` (1 for the first) is verified under ``mode``."""
    if mode not in VERIFY_MODES:
        raise ValueError(f"actor_rollout_ref.rollout.verify_weights is {mode!r}; choose one of "
                         f"{', '.join(VERIFY_MODES)}")
    return mode == "every_sync" or (mode == "first_sync" and sync_number == 1)


def iter_directory_tensors(directory: str | Path) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of every safetensors file of a Hugging Face model directory, in name
    order, one file open at a time."""
    from safetensors import safe_open

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {directory}")
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in sorted(handle.keys()):
                yield name, handle.get_tensor(name)


def tensor_digest(tensor: Any) -> str:
    """SHA-256 of a tensor's bytes in its own dtype (contiguous, on the CPU)."""
    data = tensor.detach().contiguous().cpu().view(-1).view(dtype=_byte_dtype()).numpy()
    return hashlib.sha256(data.tobytes()).hexdigest()


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def prefix_values(tensor: Any, rows: int = VERIFY_ROWS, dtype: Any = None) -> list[float]:
    """The first ``rows`` rows of ``tensor`` (cast to ``dtype`` first, when given), flattened
    to floats: what SGLang's ``/get_weights_by_name`` answers with ``truncate_size=rows``."""
    tensor = tensor.detach()
    if dtype is not None:
        tensor = tensor.to(dtype)
    return [float(v) for v in tensor[:rows].reshape(-1).float().cpu().tolist()]


def first_prefix_mismatch(expected: list[float], got: Any, rtol: float = 0.0,
                          atol: float = 0.0) -> str | None:  # fmt: skip
    """Why ``got`` (a server's answer) is not ``expected``, or None when equal (within
    ``rtol``/``atol``: a server in bf16 rounds what it was sent)."""
    values = _flatten(got)
    if len(values) < len(expected):
        return f"the server answered {len(values)} values, expected {len(expected)}"
    for i, (want, have) in enumerate(zip(expected, values, strict=False)):
        if abs(want - have) > atol + rtol * abs(want):
            return f"value {i} is {have!r}, expected {want!r}"
    return None


def _flatten(values: Any) -> list[float]:
    if isinstance(values, (list, tuple)):
        out: list[float] = []
        for v in values:
            out += _flatten(v)
        return out
    return [float(values)]


__all__ = [
    "VERIFY_MODES",
    "VERIFY_ROWS",
    "WeightMismatchError",
    "first_prefix_mismatch",
    "iter_directory_tensors",
    "prefix_values",
    "tensor_digest",
    "verify_after_sync",
]
