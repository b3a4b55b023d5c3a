"""DataProto: the one batch type exchanged between the driver, the workers and the rollout engine.

It keeps verl's names and semantics so that verl users' knowledge carries over:

- ``batch``: a ``tensordict.TensorDict`` with ``batch_size == [N]`` (or ``None`` when the
  batch holds only non-tensor data),
- ``non_tensor_batch``: ``dict[str, np.ndarray]``, each a 1-D numpy array of ``dtype=object``
  and length ``N`` (messages, ``tools_kwargs``, ``uid``, ground truths, ...),
- ``meta_info``: a plain dict of batch-level values (temperature, metrics, flags).

Invariant kept through every operation: all tensors share the leading dimension ``N`` and
every non-tensor value is a 1-D object array of length ``N``. Lists of lists or of dicts are
stored one element per row (``np.array(list_of_lists)`` would make a 2-D array; we never do).

Departures from verl, on purpose:

- ``data[i]`` with an int returns a ``DataProto`` of length 1 (verl returns a
  ``DataProtoItem``); every index form returns a ``DataProto``.
- Indexing, ``select``, ``repeat``, ``chunk`` and ``split`` give the result a shallow copy of
  ``meta_info``, so setting a key on a part does not change the whole.
- ``pop`` validates every key before removing any, so a typo leaves ``self`` unchanged.

Example::

    data = DataProto.from_single_dict({"input_ids": ids, "uid": ["a", "b"]}, meta_info={"n": 2})
    gen = data.pop(batch_keys=["input_ids"])      # data keeps "uid"
    out = gen.repeat(4, interleave=True)          # a a a a b b b b
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

logger = logging.getLogger(__name__)

# Key of a sample's ``reward_scores`` (the rollout's tool rewards) holding ``{tool: [step
# rewards of execute]}``. They are not part of the trajectory's tool reward: the rollout also
# places them on the token of the turn that made the call (``batch["step_rewards"]``), which
# the reward manager weights by ``step_reward_weight``. Shared by rollout and reward, so it
# lives here, below both.
STEP_REWARDS_KEY = "step_rewards"
# A score function's dict result with this key (the reason) did not score its sample (an LLM
# judge that timed out or answered garbage): the trainer takes the sample out of its group's
# statistics and trains nothing on it, as a failed rollout (agentrl/trainer/scoring.py).
SCORE_FAILED_KEY = "score_failed"
# An infrastructure failure (agentrl/utils/infra.py) of a sample: the rollout's per-row column
# (None or {"kind": ..., "error": ...}), a tool's metrics key and a score function's dict
# result key (the reason) all carry this name; `rollout.on_infra_error` says what it does.
INFRA_ERROR_KEY = "infra_error"
# The row field that names a sample's task family (verl's `data_source`): the default of
# `data.reward_fn_key`, by which the reward managers pick a scorer and the metrics group.
DATA_SOURCE_KEY = "data_source"

__all__ = ["DataProto", "to_object_array"]


def to_object_array(values: Any, key: str = "<value>") -> np.ndarray:
    """Return ``values`` as a 1-D numpy object array, one element per row.

    Accepts lists, tuples and numpy arrays. A 1-D object array is returned as is; a
    multi-dimensional array becomes an object array of its rows. ``key`` names the
    field in error messages.
    """
    if isinstance(values, np.ndarray):
        if values.ndim == 0:
            raise ValueError(f"non-tensor {key!r}: a 0-d array has no batch dimension")
        if values.dtype == object and values.ndim == 1:
            return values
        if values.ndim == 1:
            return values.astype(object)
        rows = list(values)
    elif isinstance(values, (list, tuple)):
        rows = values
    elif isinstance(values, torch.Tensor):
        raise TypeError(f"non-tensor {key!r} is a torch.Tensor; put tensors in the tensor batch")
    else:
        raise TypeError(
            f"non-tensor {key!r} must be a list, tuple or np.ndarray, got {type(values).__name__}"
        )
    out = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        out[i] = row  # element-wise so nested lists/dicts stay single objects
    return out


def _values_equal(a: Any, b: Any) -> bool:
    """Structural equality that also works for tensors, arrays and nested containers."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a.cpu(), b.cpu()))
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        return all(_values_equal(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _as_list(keys: str | Iterable[str] | None) -> list[str] | None:
    if keys is None:
        return None
    return [keys] if isinstance(keys, str) else list(keys)


def _check_keys(kind: str, wanted: Iterable[str] | None, available: Iterable[str]) -> list[str]:
    """Return ``wanted`` as a list (all of ``available`` when None); KeyError on unknown keys."""
    available = list(available)
    wanted = available if wanted is None else _as_list(wanted)
    missing = [k for k in wanted if k not in available]
    if missing:
        raise KeyError(f"{kind} keys {missing} not found; available: {sorted(available)}")
    return wanted


@dataclass
class DataProto:
    """A batch of N samples: tensors, per-sample Python objects and batch-level meta info."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.non_tensor_batch = {
            k: to_object_array(v, key=k) for k, v in (self.non_tensor_batch or {}).items()
        }
        self.meta_info = {} if self.meta_info is None else self.meta_info
        self.check_consistency()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict[str, Any] | None = None,
    ) -> DataProto:
        """Build from a dict of tensors (sharing dim 0) and a dict of per-sample values."""
        tensors = tensors or {}
        batch = None
        if tensors:
            sizes = {}
            for key, value in tensors.items():
                if not isinstance(value, torch.Tensor):
                    raise TypeError(f"tensor {key!r} is a {type(value).__name__}, not a Tensor")
                if value.dim() == 0:
                    raise ValueError(f"tensor {key!r} is 0-d; it needs a batch dimension")
                sizes[key] = value.shape[0]
            if len(set(sizes.values())) > 1:
                raise ValueError(f"tensors disagree on the batch size (dim 0): {sizes}")
            n = next(iter(sizes.values()))
            batch = TensorDict(dict(tensors), batch_size=[n])
        return cls(batch=batch, non_tensor_batch=dict(non_tensors or {}), meta_info=meta_info or {})

    @classmethod
    def from_single_dict(cls, data: dict[str, Any], meta_info: dict | None = None) -> DataProto:
        """Build from one dict: torch tensors go to ``batch``, everything else is non-tensor."""
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        non_tensors = {k: v for k, v in data.items() if not isinstance(v, torch.Tensor)}
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info)

    def to_single_dict(self) -> dict[str, Any]:
        """Return tensors and non-tensors in one dict (the inverse of ``from_single_dict``)."""
        out: dict[str, Any] = dict(self.batch.items()) if self.batch is not None else {}
        out.update(self.non_tensor_batch)
        return out

    # ------------------------------------------------------------------ checks and size

    def check_consistency(self) -> None:
        """Raise if tensor and non-tensor batch sizes disagree or a non-tensor is malformed."""
        if self.batch is not None and len(self.batch.batch_size) != 1:
            raise ValueError(
                f"batch must have exactly one batch dimension, got {list(self.batch.batch_size)}"
            )
        if not isinstance(self.meta_info, dict):
            raise TypeError(f"meta_info must be a dict, got {type(self.meta_info).__name__}")
        n = self.batch.batch_size[0] if self.batch is not None else None
        where = "batch"
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray) or value.dtype != object:
                raise TypeError(
                    f"non_tensor_batch[{key!r}] must be a numpy array of dtype=object, "
                    f"got {type(value).__name__} {getattr(value, 'dtype', '')}"
                )
            if value.ndim != 1:
                raise ValueError(
                    f"non_tensor_batch[{key!r}] must be 1-D, got shape {value.shape}; "
                    "build it with agentrl.protocol.to_object_array"
                )
            if n is None:
                n, where = value.shape[0], f"non_tensor_batch[{key!r}]"
            elif value.shape[0] != n:
                raise ValueError(
                    f"non_tensor_batch[{key!r}] has length {value.shape[0]} but {where} has {n}"
                )

    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        if self.non_tensor_batch:
            return int(next(iter(self.non_tensor_batch.values())).shape[0])
        return 0

    def _has_data(self) -> bool:
        return self.batch is not None or bool(self.non_tensor_batch)

    def _tensor_keys(self) -> list[str]:
        return list(self.batch.keys()) if self.batch is not None else []

    def print_size(self, prefix: str = "") -> None:
        """Log the memory size at INFO level (verl's ``print_size``, via logging)."""
        tensors = self.batch.values() if self.batch is not None else ()
        mib = sum(t.numel() * t.element_size() for t in tensors) / 2**20
        obj = sum(v.nbytes for v in self.non_tensor_batch.values()) / 2**20
        logger.info(
            "%slen=%d, tensors %.3f MiB, object arrays %.3f MiB", prefix, len(self), mib, obj
        )

    def __repr__(self) -> str:
        tensors = "None"
        if self.batch is not None:
            fields = (f"{k}: {tuple(v.shape)} {str(v.dtype)[6:]}" for k, v in self.batch.items())
            tensors = "{" + ", ".join(fields) + "}"
        non_tensors = ", ".join(f"{k}: object[{len(v)}]" for k, v in self.non_tensor_batch.items())
        return (
            f"DataProto(len={len(self)}, batch={tensors}, "
            f"non_tensor_batch={{{non_tensors}}}, meta_info_keys={sorted(self.meta_info)})"
        )

    # ------------------------------------------------------------------ indexing

    def _normalize_index(self, item: Any) -> slice | np.ndarray:
        n = len(self)
        if isinstance(item, (bool, np.bool_)):
            raise TypeError("cannot index a DataProto with a bool; use a bool mask array")
        if isinstance(item, (int, np.integer)):
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} out of range for DataProto of length {n}")
            return slice(i % n, i % n + 1)
        if isinstance(item, slice):
            return item
        if isinstance(item, torch.Tensor):
            item = item.detach().cpu().numpy()
        if isinstance(item, (list, tuple)):
            item = np.asarray(item) if len(item) else np.zeros(0, dtype=np.int64)
        if not isinstance(item, np.ndarray):
            raise TypeError(f"cannot index a DataProto with {type(item).__name__}")
        if item.ndim != 1:
            raise IndexError(f"index arrays must be 1-D, got shape {item.shape}")
        if item.dtype == bool:
            if item.shape[0] != n:
                raise IndexError(f"bool mask has length {item.shape[0]} but DataProto has {n}")
            return np.flatnonzero(item)
        if not np.issubdtype(item.dtype, np.integer):
            raise TypeError(f"index arrays must be integer or bool, got dtype {item.dtype}")
        if item.size and (item.min() < -n or item.max() >= n):
            raise IndexError(f"index {item.tolist()} out of range for DataProto of length {n}")
        return item.astype(np.int64)

    def __getitem__(self, item: Any) -> DataProto:
        """Index by int (-> length-1 DataProto), slice, int list/array/tensor or bool mask."""
        index = self._normalize_index(item)
        batch = None
        if self.batch is not None:
            batch = self.batch[index if isinstance(index, slice) else torch.from_numpy(index)]
        non_tensors = {k: v[index] for k, v in self.non_tensor_batch.items()}
        return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=dict(self.meta_info))

    # ------------------------------------------------------------------ key operations

    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """Return a new DataProto with the given keys (``None`` keeps all of that part).

        Without ``deepcopy`` the result shares tensors and objects with ``self``; with it,
        tensors are cloned and non-tensors and meta info deep-copied.
        """
        batch_keys = _check_keys("batch", batch_keys, self._tensor_keys())
        nt_keys = _check_keys("non_tensor_batch", non_tensor_batch_keys, self.non_tensor_batch)
        meta_keys = _check_keys("meta_info", meta_info_keys, self.meta_info)
        batch = self.batch.select(*batch_keys) if self.batch is not None else None
        non_tensors = {k: self.non_tensor_batch[k] for k in nt_keys}
        meta_info = {k: self.meta_info[k] for k in meta_keys}
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensors, meta_info = copy.deepcopy(non_tensors), copy.deepcopy(meta_info)
        return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=meta_info)

    def pop(
        self,
        batch_keys: Sequence[str] | None = (),
        non_tensor_batch_keys: Sequence[str] | None = (),
        meta_info_keys: Sequence[str] | None = (),
    ) -> DataProto:
        """Remove the given keys from ``self`` and return them as a new DataProto.

        ``None`` pops nothing of that part (as in verl). All keys are checked first; an
        unknown key raises ``KeyError`` and nothing is removed. The result's ``batch`` is
        ``None`` when no tensor key is popped.
        """
        batch_keys = _check_keys("batch", batch_keys or [], self._tensor_keys())
        nt_keys = _check_keys(
            "non_tensor_batch", non_tensor_batch_keys or [], self.non_tensor_batch
        )
        meta_keys = _check_keys("meta_info", meta_info_keys or [], self.meta_info)
        batch = None
        if batch_keys:
            batch = TensorDict(
                {k: self.batch.pop(k) for k in batch_keys}, batch_size=self.batch.batch_size
            )
        non_tensors = {k: self.non_tensor_batch.pop(k) for k in nt_keys}
        meta_info = {k: self.meta_info.pop(k) for k in meta_keys}
        return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=meta_info)

    def rename(self, old_keys: str | Sequence[str], new_keys: str | Sequence[str]) -> DataProto:
        """Rename tensor or non-tensor keys in place; returns ``self`` (like verl)."""
        old, new = _as_list(old_keys), _as_list(new_keys)
        if len(old) != len(new):
            raise ValueError(f"rename needs as many new keys as old: {old} -> {new}")
        tensor_keys = set(self._tensor_keys())
        _check_keys("batch or non_tensor_batch", old, tensor_keys | set(self.non_tensor_batch))
        for src, dst in zip(old, new, strict=True):
            if src != dst and (dst in tensor_keys or dst in self.non_tensor_batch):
                raise ValueError(f"cannot rename {src!r} to {dst!r}: {dst!r} already exists")
            if src in tensor_keys:
                self.batch.rename_key_(src, dst)
                tensor_keys = set(self.batch.keys())
            else:
                self.non_tensor_batch[dst] = self.non_tensor_batch.pop(src)
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other``'s keys into ``self`` in place and return ``self`` (like verl).

        A key present in both must hold equal values (tensors, objects and meta info),
        otherwise ``ValueError`` names the key. Lengths must agree.
        """
        if self._has_data() and other._has_data() and len(self) != len(other):
            raise ValueError(f"cannot union DataProto of length {len(self)} with {len(other)}")
        mine = dict(self.batch.items()) if self.batch is not None else {}
        theirs = dict(other.batch.items()) if other.batch is not None else {}
        for kind, ours, new in (
            ("tensor", mine, theirs),
            ("non-tensor", self.non_tensor_batch, other.non_tensor_batch),
            ("meta_info", self.meta_info, other.meta_info),
        ):
            for key in ours.keys() & new.keys():
                if not _values_equal(ours[key], new[key]):
                    raise ValueError(f"union conflict: {kind} {key!r} differs between the two")
        if other.batch is not None:
            if self.batch is None:
                self.batch = TensorDict({}, batch_size=other.batch.batch_size)
            for key, value in theirs.items():
                if key not in mine:
                    self.batch[key] = value
        for key, value in other.non_tensor_batch.items():
            self.non_tensor_batch.setdefault(key, value)
        for key, value in other.meta_info.items():
            self.meta_info.setdefault(key, value)
        self.check_consistency()
        return self

    # ------------------------------------------------------------------ reshaping

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every sample: interleave gives ``a a b b``, otherwise ``a b a b``.

        Non-tensor rows are repeated by reference (the same dict object appears twice);
        ``meta_info`` is kept.
        """
        if not isinstance(repeat_times, int) or repeat_times < 1:
            raise ValueError(f"repeat_times must be a positive int, got {repeat_times!r}")
        k, n = repeat_times, len(self)
        batch = None
        if self.batch is not None:
            if interleave:
                batch = self.batch.apply(
                    lambda t: t.repeat_interleave(k, dim=0), batch_size=[n * k]
                )
            else:
                batch = torch.cat([self.batch] * k, dim=0)
        if interleave:
            non_tensors = {key: np.repeat(v, k) for key, v in self.non_tensor_batch.items()}
        else:
            non_tensors = {key: np.concatenate([v] * k) for key, v in self.non_tensor_batch.items()}
        return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=dict(self.meta_info))

    @staticmethod
    def concat(data: Sequence[DataProto]) -> DataProto:
        """Concatenate along the batch dimension; the result takes the first's ``meta_info``.

        All parts must have the same tensor keys and the same non-tensor keys.
        """
        data = list(data)
        if not data:
            raise ValueError("concat needs at least one DataProto")
        first = data[0]
        first_tensor_keys = set(first._tensor_keys())
        for i, part in enumerate(data[1:], start=1):
            for kind, mine, theirs in (
                ("tensor", first_tensor_keys, set(part._tensor_keys())),
                ("non-tensor", set(first.non_tensor_batch), set(part.non_tensor_batch)),
            ):
                if mine != theirs:
                    raise ValueError(
                        f"concat: {kind} keys of part {i} differ from part 0: "
                        f"missing {sorted(mine - theirs)}, extra {sorted(theirs - mine)}"
                    )
        batch = None
        batches = [p.batch for p in data if p.batch is not None]
        if len(batches) == len(data):
            batch = torch.cat(batches, dim=0)
        elif batches and first_tensor_keys:
            raise ValueError("concat: some parts have a tensor batch and others have None")
        non_tensors = {
            key: np.concatenate([p.non_tensor_batch[key] for p in data])
            for key in first.non_tensor_batch
        }
        return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=dict(first.meta_info))

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into ``chunks`` parts of equal length (the length must divide evenly)."""
        n = len(self)
        if not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunks must be a positive int, got {chunks!r}")
        if n % chunks != 0:
            raise ValueError(f"DataProto of length {n} cannot be split into {chunks} equal chunks")
        size = n // chunks
        return [self[i * size : (i + 1) * size] for i in range(chunks)]

    def split(self, split_size: int) -> list[DataProto]:
        """Split into parts of ``split_size`` samples; the last part may be smaller."""
        if not isinstance(split_size, int) or split_size < 1:
            raise ValueError(f"split_size must be a positive int, got {split_size!r}")
        return [self[i : i + split_size] for i in range(0, len(self), split_size)]

    # ------------------------------------------------------------------ device and disk

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensor batch to ``device`` in place; returns ``self`` (like verl)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def save_to_disk(self, path: str | Path) -> None:
        """Write to one file with ``torch.save``; tensors are saved on CPU."""
        payload = {
            "batch_size": None if self.batch is None else list(self.batch.batch_size),
            "tensors": {} if self.batch is None else {k: v.cpu() for k, v in self.batch.items()},
            "non_tensors": self.non_tensor_batch,
            "meta_info": self.meta_info,
        }
        torch.save(payload, path)

    @staticmethod
    def load_from_disk(path: str | Path) -> DataProto:
        """Read a file written by ``save_to_disk``.

        The file holds pickled Python objects (object arrays, meta info), so it is loaded
        with ``weights_only=False``: only load files you wrote or trust.
        """
        payload = torch.load(path, weights_only=False, map_location="cpu")
        batch = None
        if payload["batch_size"] is not None:
            batch = TensorDict(payload["tensors"], batch_size=payload["batch_size"])
        return DataProto(
            batch=batch, non_tensor_batch=payload["non_tensors"], meta_info=payload["meta_info"]
        )
