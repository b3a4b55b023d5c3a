"""What a vLLM server's `/weight_checker` shows, and the digests the trainer expects there.

    held, tensor_parallel = server_checksums(reply)        # {name: SHA-256}, from the server
    expected = expected_checksums("/tmp/weights/step_3")   # from a Hugging Face directory
    digests = StreamDigests(); digests.add(name, tensor)   # from tensors as they are sent
    compare_checksums(url, held, tensor_parallel, expected)  # raises WeightMismatchError

vLLM hashes each loaded parameter's bytes (SHA-256) under its own names: q/k/v fused into
`qkv_proj`, gate/up into `gate_up_proj` (its loaders' stacked_params_mapping, `STACKED`), a
tied `lm_head` held once, as the embeddings. On CPU it prepacks every linear weight and
reports the digest of an empty tensor for it (`EMPTY_DIGEST`): those cannot be checked
there; on GPUs every tensor is. With tensor parallelism > 1 only the replicated norms are
compared.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()  # a parameter the CPU kernels prepacked
# how vLLM's loaders fuse Hugging Face projections (their stacked_params_mapping)
STACKED = (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj")))


def fused_name(name: str) -> tuple[str, list[str]] | None:
    """(vLLM's fused name, the HF names it concatenates) for a stacked projection."""
    for fused, parts in STACKED:
        for part in parts:
            marker = f".{part}."
            if marker in name:
                return (name.replace(marker, f".{fused}."),
                        [name.replace(marker, f".{p}.") for p in parts])  # fmt: skip
    return None


def server_checksums(reply: Any) -> tuple[dict[str, str], bool]:
    """`/weight_checker` `checksum` reply -> ({tensor name: SHA-256} of the first data- and
    pipeline-parallel rank's tensor-parallel rank 0, whether it has tensor parallelism)."""
    checksums = reply["checksums"]
    held: dict[str, str] = {}
    ranks = set()
    for key, digest in checksums.items():
        *placement, name = key.split(":")
        ranks.add(tuple(placement))
        if all(p.endswith("0") and p[-2:-1].isalpha() for p in placement):  # dp0:pp0:pcp0:tp0
            held[name] = str(digest)
    tensor_parallel = len({p[-1] for p in ranks if p}) > 1
    return held, tensor_parallel


def expected_checksums(directory: str | os.PathLike, dtype: Any = None,
                       names: set[str] | None = None) -> dict[str, str]:
    """vLLM's `/weight_checker` digests of a server holding `directory`'s weights in
    `dtype` (None: as written): each tensor's SHA-256, with q/k/v and gate/up fused as vLLM
    loads them (`STACKED`). A tied `lm_head.weight` is left out when `names` (the server's)
    does not hold it."""
    from agentrl.rollout.backends.verify import iter_directory_tensors, tensor_digest

    tensors = dict(iter_directory_tensors(directory))
    out: dict[str, str] = {}
    done: set[str] = set()
    for name in sorted(tensors):
        if name in done:
            continue
        fused = fused_name(name)
        if fused is None:
            parts, key = [name], name
        else:
            key, parts = fused
            if not all(p in tensors for p in parts):
                parts, key = [name], name
        if names is not None and key not in names and key.startswith("lm_head."):
            continue  # tied to the embeddings: vLLM holds one tensor
        done.update(parts)
        import torch

        tensor = torch.cat([tensors[p] for p in parts], 0) if len(parts) > 1 else tensors[name]
        out[key] = tensor_digest(tensor if dtype is None else tensor.to(dtype))
    return out


def compare_checksums(url: str, held: dict[str, str], tensor_parallel: bool,
                      expected: dict[str, str]) -> None:  # fmt: skip
    """Raise `WeightMismatchError` naming `url` and the first tensor whose digest on the
    server (`held`) is not the one `expected`; tensors the server cannot show are passed."""
    from agentrl.rollout.backends.verify import WeightMismatchError

    for name, digest in expected.items():
        got = held.get(name)
        if tensor_parallel and not name.endswith("norm.weight"):
            continue  # sharded across the servers' ranks: not the whole tensor
        if got is None:
            raise WeightMismatchError(url, name, "the server holds no such tensor")
        if got == EMPTY_DIGEST:
            continue  # prepacked by the CPU kernels: the server cannot show it
        if got != digest:
            raise WeightMismatchError(url, name, f"SHA-256 {got[:12]}... on the server, "
                                                 f"{digest[:12]}... sent")  # fmt: skip


class StreamDigests:
    """`expected_checksums` of tensors seen one at a time (``add``, in the order sent): the
    parts of a fused projection are hashed in order into one digest (their concatenation
    along dim 0 is their bytes one after the other); a part that comes before the one it
    follows waits, as bytes, until that one has come. A group whose parts never all come is
    not in ``digests``."""

    def __init__(self) -> None:
        self.digests: dict[str, str] = {}
        # fused name -> [its hasher, the index of the next part to hash, parts come early]
        self._open: dict[str, list[Any]] = {}

    def add(self, name: str, tensor: Any) -> None:
        from agentrl.rollout.backends.verify import tensor_bytes, tensor_digest

        fused = fused_name(name)
        if fused is None:
            self.digests[name] = tensor_digest(tensor)
            return
        key, parts = fused
        state = self._open.setdefault(key, [hashlib.sha256(), 0, {}])
        hasher, _, waiting = state
        waiting[parts.index(name)] = tensor_bytes(tensor)
        while state[1] in waiting:
            hasher.update(waiting.pop(state[1]))
            state[1] += 1
        if state[1] == len(parts):
            self.digests[key] = hasher.hexdigest()
            del self._open[key]


__all__ = [
    "EMPTY_DIGEST",
    "STACKED",
    "StreamDigests",
    "compare_checksums",
    "expected_checksums",
    "fused_name",
    "server_checksums",
]
