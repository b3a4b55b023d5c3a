"""Infrastructure failures: what failed was not the model's doing, so it must not train as such.

A tool whose server is down, a sandbox that crashed, a judge answering HTTP 500, a scorer
that cannot reach its service: the trajectory says nothing about the policy. A plugin
(tool, interaction, environment, judge, score function) reports such a failure by raising
`InfraError` (exported as `agentrl.tools.InfraError`, `agentrl.interactions.InfraError` and
`agentrl.reward.InfraError`), or any exception whose `infra` attribute is true; a tool may
also return `metrics["infra_error"] = "<reason>"` with its error text. By default these
count too (`is_infra_error`):

- timeouts (`TimeoutError`, `asyncio.TimeoutError`, httpx/requests timeouts);
- connection errors (`ConnectionError` and its subclasses, `socket.gaierror`, httpx's
  `TransportError`, requests' `ConnectionError`, aiohttp's `ClientConnectionError`,
  urllib's `URLError` other than an `HTTPError` below 500);
- an HTTP error with status 429 or 5xx (httpx's `HTTPStatusError`, requests' `HTTPError`,
  urllib's `HTTPError`);
- an exception raised from one of those (`raise ... from err`).

Anything else (a `ValueError` on the model's arguments, a bug) is the model's or the
plugin's, not the infrastructure's. What the trainer does with an infrastructure failure is
`actor_rollout_ref.rollout.on_infra_error` (`ON_INFRA_ERROR`, docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import socket
import urllib.error

# actor_rollout_ref.rollout.on_infra_error: mask (leave the group and the loss), zero (as any
# other trajectory: scored, trained), raise (stop the run). The first is the default.
ON_INFRA_ERROR = ("mask", "zero", "raise")

# Exception classes of HTTP libraries that are infrastructure failures, by qualified name
# (matched along the class's MRO), so none of those libraries is imported here.
_INFRA_CLASSES = frozenset({
    "httpx.TransportError",  # connect/read/write/pool timeouts, connect errors, protocol errors
    "requests.exceptions.ConnectionError",
    "requests.exceptions.Timeout",
    "aiohttp.client_exceptions.ClientConnectionError",
    "aiohttp.client_exceptions.ServerTimeoutError",
})  # fmt: skip
_STATUS_CLASSES = frozenset({"httpx.HTTPStatusError", "requests.exceptions.HTTPError"})


class InfraError(RuntimeError):
    """An infrastructure failure (a service down, a crash, a timeout): not the model's."""

    infra = True


def _qualified_names(err: BaseException) -> set[str]:
    names = set()
    for cls in type(err).__mro__:
        module = cls.__module__
        names.add(f"{module}.{cls.__qualname__}")
        names.add(f"{module.split('.')[0]}.{cls.__qualname__}")  # httpx._exceptions -> httpx
    return names


def _status(err: BaseException) -> int | None:
    if isinstance(err, urllib.error.HTTPError):
        return int(err.code)
    response = getattr(err, "response", None)
    code = getattr(response, "status_code", None)
    return int(code) if isinstance(code, int) else None


def _is_infra_one(err: BaseException) -> bool:
    flag = getattr(err, "infra", None)
    if flag is not None and not callable(flag):
        return bool(flag)
    if isinstance(err, urllib.error.HTTPError) or _qualified_names(err) & _STATUS_CLASSES:
        status = _status(err)
        return status is not None and (status == 429 or status >= 500)
    if isinstance(err, (TimeoutError, asyncio.TimeoutError, ConnectionError, socket.gaierror,
                        urllib.error.URLError)):
        return True
    return bool(_qualified_names(err) & _INFRA_CLASSES)


def is_infra_error(err: BaseException) -> bool:
    """Whether `err` (or an exception it was raised from) is an infrastructure failure
    (the module docstring lists what is)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_infra_one(current):
            return True
        current = current.__cause__
    return False


def check_on_infra_error(mode: str) -> str:
    """`mode` if it is one of `ON_INFRA_ERROR`, else a ValueError naming the key."""
    if mode not in ON_INFRA_ERROR:
        raise ValueError(f"actor_rollout_ref.rollout.on_infra_error is {mode!r}; choose one of "
                         f"{', '.join(ON_INFRA_ERROR)}")
    return mode


__all__ = ["ON_INFRA_ERROR", "InfraError", "check_on_infra_error", "is_infra_error"]
