"""How a worker-group call reaches the ranks and how their answers come back.

A worker method is marked with ``@register(mode)``; the group then exposes it under the
same name and, on each call, splits the arguments into one call per rank and merges the
per-rank results by that mode:

- ``ONE_TO_ALL``: every rank gets the same arguments; the result is the list of the
  per-rank results (rank order).
- ``RANK_ZERO``: every rank gets the same arguments (SPMD code runs on all of them, so
  collectives line up); the result is rank 0's.
- ``DP_COMPUTE``: every ``DataProto`` argument is cut into ``world_size`` equal, contiguous
  parts, part ``r`` going to data-parallel rank ``r`` (other arguments go to every rank
  unchanged); the per-rank ``DataProto`` results are concatenated in rank order, with
  rank 0's ``meta_info`` (but the ``trace_events`` of every rank: the step's timeline,
  agentrl/utils/trace.py). With ``pad=True`` a batch that does not divide evenly is padded
  with copies of its first rows and the padding is cut from the result; without it, an
  uneven batch is an error (use it for training, where padding would bias the loss).
- ``ALL_TO_ALL``: every argument is a list with one element per rank; the result is the
  list of the per-rank results.

Only the data-parallel layout exists for now (FSDP: dp rank == rank); a tensor- or
sequence-parallel layout would change ``dp`` here and nowhere else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from agentrl.protocol import DataProto
from agentrl.utils.trace import TRACE_EVENTS

F = TypeVar("F", bound=Callable[..., Any])
_ATTR = "_agentrl_dispatch"


class Dispatch(str, Enum):
    """Dispatch modes of registered worker methods (see the module docstring)."""

    ONE_TO_ALL = "one_to_all"
    RANK_ZERO = "rank_zero"
    DP_COMPUTE = "dp_compute"
    ALL_TO_ALL = "all_to_all"


@dataclass(frozen=True)
class DispatchSpec:
    """The dispatch mode of one registered method; ``pad`` only matters for DP_COMPUTE."""

    mode: Dispatch
    pad: bool = False


def register(mode: Dispatch | str = Dispatch.ONE_TO_ALL, *, pad: bool = False) -> Callable[[F], F]:
    """Mark a worker method as callable through a worker group, with this dispatch mode."""
    spec = DispatchSpec(Dispatch(mode), pad)
    if pad and spec.mode is not Dispatch.DP_COMPUTE:
        raise ValueError(f"pad=True only applies to Dispatch.DP_COMPUTE, not {spec.mode.value}")

    def decorator(fn: F) -> F:
        setattr(fn, _ATTR, spec)
        return fn

    return decorator


def registered_methods(cls: type) -> dict[str, DispatchSpec]:
    """Name -> dispatch spec of every method of ``cls`` (and its bases) marked by register."""
    found: dict[str, DispatchSpec] = {}
    for name, member in inspect.getmembers(cls, predicate=callable):
        spec = getattr(member, _ATTR, None)
        if isinstance(spec, DispatchSpec):
            found[name] = spec
    return found


@dataclass
class RankCalls:
    """The per-rank arguments of one group call, and the padding to cut from the result
    (``pad_size`` rows added to a batch that became ``padded_length`` long)."""

    args: list[tuple[Any, ...]]
    kwargs: list[dict[str, Any]]
    pad_size: int = 0
    padded_length: int = 0


def split_arguments(
    spec: DispatchSpec, world_size: int, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
) -> RankCalls:
    """Turn one call's arguments into ``world_size`` per-rank argument sets."""
    if spec.mode in (Dispatch.ONE_TO_ALL, Dispatch.RANK_ZERO):
        return RankCalls([args] * world_size, [kwargs] * world_size)
    if spec.mode is Dispatch.ALL_TO_ALL:
        return _split_all_to_all(world_size, args, kwargs, what)
    return _split_dp(spec, world_size, args, kwargs, what)


def _split_all_to_all(
    world_size: int, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
) -> RankCalls:
    for name, value in [*((f"argument {i}", a) for i, a in enumerate(args)), *kwargs.items()]:
        if not isinstance(value, (list, tuple)) or len(value) != world_size:
            raise ValueError(
                f"{what} dispatches ALL_TO_ALL: {name} must be a list with one "
                f"element per rank ({world_size}), got {type(value).__name__}"
            )
    return RankCalls(
        [tuple(a[r] for a in args) for r in range(world_size)],
        [{k: v[r] for k, v in kwargs.items()} for r in range(world_size)],
    )


def _split_dp(
    spec: DispatchSpec, world_size: int, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
) -> RankCalls:
    lengths = {len(v) for v in [*args, *kwargs.values()] if isinstance(v, DataProto)}
    if not lengths:
        raise TypeError(f"{what} dispatches DP_COMPUTE but got no DataProto argument")
    if len(lengths) > 1:
        raise ValueError(f"{what}: the DataProto arguments have different lengths {lengths}")
    length = lengths.pop()
    pad_size = -length % world_size
    if pad_size and not spec.pad:
        raise ValueError(
            f"{what}: a batch of {length} samples cannot be split evenly across {world_size} "
            f"data-parallel ranks; make the batch size a multiple of {world_size}"
        )

    def parts(value: Any) -> list[Any]:
        if not isinstance(value, DataProto):
            return [value] * world_size
        if pad_size:
            value = DataProto.concat([value, _head(value, pad_size)])
        return value.chunk(world_size)

    split_args = [parts(a) for a in args]
    split_kwargs = {k: parts(v) for k, v in kwargs.items()}
    return RankCalls(
        [tuple(a[r] for a in split_args) for r in range(world_size)],
        [{k: v[r] for k, v in split_kwargs.items()} for r in range(world_size)],
        pad_size,
        length + pad_size,
    )


def _head(data: DataProto, count: int) -> DataProto:
    """The first ``count`` rows, repeated cyclically when the batch is shorter."""
    return data[[i % len(data) for i in range(count)]]


def collect_results(
    spec: DispatchSpec, results: list[Any], pad_size: int, what: str, padded_length: int = 0
) -> Any:
    """Merge the per-rank results of one call by the method's dispatch mode.

    A DP_COMPUTE result may have k rows per input row (a rollout of ``n`` samples per
    prompt, in ``repeat(n, interleave=True)`` order): the padding's k x ``pad_size`` rows
    are cut from its end (``padded_length`` is the padded input's length).
    """
    if spec.mode is Dispatch.RANK_ZERO:
        return results[0]
    if spec.mode is not Dispatch.DP_COMPUTE:
        return results
    if all(r is None for r in results):
        return None
    if not all(isinstance(r, DataProto) for r in results):
        kinds = sorted({type(r).__name__ for r in results})
        raise TypeError(
            f"{what} dispatches DP_COMPUTE, so every rank must return a DataProto; "
            f"got {', '.join(kinds)}"
        )
    merged = DataProto.concat(results)
    if any(TRACE_EVENTS in r.meta_info for r in results[1:]):
        merged.meta_info[TRACE_EVENTS] = [e for r in results
                                          for e in r.meta_info.get(TRACE_EVENTS, ())]
    if not pad_size:
        return merged
    per_row = 1
    if padded_length:
        if len(merged) % padded_length:
            raise ValueError(
                f"{what} returned {len(merged)} rows for a padded batch of {padded_length}; "
                "with padding a DP_COMPUTE method must return a whole number of rows per row"
            )
        per_row = len(merged) // padded_length
    return merged[: len(merged) - pad_size * per_row]
