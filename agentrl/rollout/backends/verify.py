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

Servers also score a fixed probe sequence (``Probe``) and their log-probs must equal the
trainer's own on the weights it sent (to 1e-3 in fp32): this catches what no checksum can
show, e.g. vLLM's CPU build keeps a tied output layer it prepacked when the embeddings are
reloaded. A mismatch raises ``WeightMismatchError`` naming the server and the first tensor
that differs (or the probe token that shows it), which stops the run: training on weights the engine does not hold would train a
policy nobody sampled from. With several servers and the canary due at that sync
(``rollout.canary``, agentrl/workers/canary.py) the failing server is drained, sent the
weights again and re-admitted once it passes instead: the others keep serving.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERIFY_MODES = ("every_sync", "first_sync", "off")  # rollout.verify_weights
VERIFY_ROWS = 4  # rows (first dimension) of each tensor /get_weights_by_name answers


class WeightMismatchError(RuntimeError):
    """A server does not hold the weights it was sent; ``tensor`` None: its output on the
    probe sequence shows it, though no tensor checksum did."""

    def __init__(self, server: str, tensor: str | None, detail: str = "") -> None:
        self.server, self.tensor = server, tensor
        what = (f"tensor {tensor!r} differs" if tensor is not None
                else "its log-probs of the probe sequence differ from the trainer's")
        super().__init__(f"rollout server {server} does not hold the weights it was sent: "
                         f"{what}{': ' + detail if detail else ''} "
                         "(actor_rollout_ref.rollout.verify_weights)")


class VerificationUnavailable(RuntimeError):
    """A server has no route to show its weights (a 404/501: an old server, a stand-in):
    not verified, and said so, but not a mismatch."""


@dataclass(frozen=True)
class Probe:
    """A fixed token sequence and the trainer's log-probs of its tokens 1.. under the weights
    it sent: a server whose own log-probs differ by more than ``tolerance`` does not hold
    them, whatever its checksums say (a tensor the server cannot show, e.g. an output layer
    its CPU kernels prepacked, is caught this way)."""

    input_ids: list[int]
    log_probs: list[float]
    tolerance: float

    def mismatch(self, got: list[float]) -> str | None:
        """Why ``got`` (a server's log-probs of the same tokens) is not this, or None."""
        if len(got) != len(self.log_probs):
            return f"{len(got)} log-probs for {len(self.log_probs)} tokens"
        worst = max(range(len(got)), key=lambda i: abs(got[i] - self.log_probs[i]))
        diff = abs(got[worst] - self.log_probs[worst])
        if diff > self.tolerance:
            return (f"token {worst + 1}: {got[worst]:.6f} on the server, "
                    f"{self.log_probs[worst]:.6f} in the trainer (tolerance {self.tolerance:g})")
        return None


PROBE_LENGTH = 32  # tokens of the probe sequence
PROBE_TOLERANCE = {"float32": 1e-3}  # |log-prob| difference (the probe runs on fp32 servers)


def probe_ids(vocab_size: int, length: int = PROBE_LENGTH) -> list[int]:
    """The probe sequence: fixed ids spread over the vocabulary."""
    return [(7919 * i + 13) % vocab_size for i in range(length)]


def probe_tolerance(dtype: str | None) -> float:
    """How far a server's log-probs may be from the trainer's when both hold the same
    weights: fp32 servers agree to ~1e-6 (measured); bf16 ones round every layer (the
    trainer does not probe them: 0.5 if asked)."""
    return PROBE_TOLERANCE.get(dtype or "float32", 0.5)


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
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def tensor_bytes(tensor: Any) -> bytes:
    """A tensor's bytes in its own dtype (contiguous, on the CPU)."""
    return tensor.detach().contiguous().cpu().view(-1).view(dtype=_byte_dtype()).numpy().tobytes()


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
    "PROBE_LENGTH",
    "Probe",
    "VERIFY_MODES",
    "VerificationUnavailable",
    "VERIFY_ROWS",
    "WeightMismatchError",
    "first_prefix_mismatch",
    "iter_directory_tensors",
    "prefix_values",
    "probe_ids",
    "probe_tolerance",
    "tensor_bytes",
    "tensor_digest",
    "verify_after_sync",
]
