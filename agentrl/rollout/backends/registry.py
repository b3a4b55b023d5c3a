"""Backends as plugins: `actor_rollout_ref.rollout.name` -> the `BackendPlugin` that builds it.

    plugin = backend_plugin(rollout.name)          # "hf", "sglang", "vllm", "scripted" or a dotted path
    problems = plugin.config_problems(rollout)     # its own config checks (the validator's)
    backend = plugin.create(rollout, model_path, tokenizer)      # launches servers if needed
    launcher = plugin.launcher(rollout, model_path)              # servers only (off-policy)
    client = plugin.client(rollout, urls, tokenizer)             # clients of running servers

A plugin brings everything that differs between inference engines: how its servers are
launched (command, readiness, the interpreter they run under), its generate client, how
weights reach it (the backend's ``weight_sync``: ``tensors`` for an engine in this process
that copies state-dict buckets in place, ``disk`` for servers that load a Hugging Face
directory, ``transfer`` for servers the trainer sends tensors to over a collective of the
engine's own, ``backend.weight_transfer(weights, rank)``: vLLM's NCCL and IPC engines,
``rollout.weight_transfer``), version reporting, abort, memory release, weight
verification and its config checks. Code outside ``agentrl/rollout/backends/`` asks the
plugin or the backend; it never compares a backend's name or class
(tests/rollout/backends/test_registry.py holds that).

The built-in plugins register themselves when their module is imported (``BUILTIN``: name ->
module, imported on first use so that naming ``sglang`` never imports torch's engine). A
user's backend registers the same way, ``@BACKEND_PLUGINS.register("mine")`` on a
``BackendPlugin`` subclass, or is named by its dotted path (``rollout.name:
mypkg.backends.MyPlugin``), loaded by the project's one plugin loader. docs/backends.md shows
a whole one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.plugins import PluginLoadError, load_object
from agentrl.utils.registry import Registry, UnknownNameError

NAME_KEY = "actor_rollout_ref.rollout.name"
BUILTIN = {  # rollout.name -> the module that registers it
    "hf": "agentrl.rollout.backends.hf",
    "sglang": "agentrl.rollout.backends.sglang",
    "vllm": "agentrl.rollout.backends.vllm",
    "scripted": "agentrl.rollout.backends.scripted",  # a fixed policy read from a file
}
WEIGHT_SYNCS = ("tensors", "disk", "transfer", "state_dict")  # a backend's `weight_sync`


class BackendPlugin:
    """One inference engine, as agentrl uses it (module docstring). ``rollout`` arguments are
    the validated ``actor_rollout_ref.rollout`` as a plain dict (every key present)."""

    name = ""
    #: ``create`` with ``server_urls`` empty launches servers: each trainer rank launches its
    #: share (agentrl/workers/rollout_servers.py) instead of building an engine in-process
    launches_servers = False
    #: the values of ``rollout.weight_transfer`` it takes besides null (its default path)
    weight_transfers: tuple[str, ...] = ()

    def config_problems(self, rollout: Mapping[str, Any]) -> list[str]:
        """What is wrong in ``rollout`` for this engine (each a sentence naming the key)."""
        return []

    def updates_tied_output(self, rollout: Mapping[str, Any]) -> bool:
        """Whether this engine's servers, reloading the input embeddings, update a tied
        output layer with them. One that does not (vLLM's CPU build keeps a prepacked copy)
        is launched on a copy of a tied model with an output layer of its own, and every
        directory the trainer writes for it holds ``lm_head.weight`` (untie.py); servers at
        ``server_urls``, started by the user, are refused by the config check instead."""
        return True

    def create(self, rollout: Mapping[str, Any], model_path: str | None, tokenizer: Any, *,
               model: Any = None, seed: int | None = None,
               gpus: Sequence[str] | None = None) -> Any:  # fmt: skip
        """The backend of ``rollout``: clients of ``server_urls`` when it lists some, else
        this engine's own way (an engine in this process, or servers it launches on
        ``gpus``, stopped by the backend's ``aclose``)."""
        raise NotImplementedError

    def client(self, rollout: Mapping[str, Any], urls: Sequence[str], tokenizer: Any,
               **kwargs: Any) -> Any:  # fmt: skip
        """An HTTP client of running servers of this engine at ``urls``."""
        raise ValueError(f"the {self.name} backend has no servers to reach over HTTP")

    def launcher(self, rollout: Mapping[str, Any], model_path: str, *, seed: int | None = None,
                 trust_remote_code: bool = False, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", gpus: Sequence[str] | None = None) -> Any:  # fmt: skip
        """A ``ServerLauncher`` of ``num_servers`` servers of ``model_path``, not started.
        ``env``: their extra environment (e.g. thread counts); ``host``: where they listen."""
        raise ValueError(f"the {self.name} backend launches no servers")


BACKEND_PLUGINS: Registry[type[BackendPlugin]] = Registry("rollout backend")


def backend_plugin(name: str) -> BackendPlugin:
    """The plugin ``name`` names: a registered name (built-in ones imported on first use) or
    the dotted path of a ``BackendPlugin`` subclass. Unknown names raise ``ValueError``
    listing the registered ones."""
    name = str(name)
    if name in BUILTIN and name not in BACKEND_PLUGINS:
        importlib.import_module(BUILTIN[name])
    if name in BACKEND_PLUGINS:
        return BACKEND_PLUGINS.get(name)()
    if "." in name or ".py:" in name:
        try:
            return load_object(name, BackendPlugin)()
        except PluginLoadError as err:
            raise ValueError(f"{NAME_KEY}={name!r}: {err}") from err
    valid = sorted(set(BUILTIN) | set(BACKEND_PLUGINS.names()))
    raise UnknownNameError(f"{NAME_KEY} is {name!r}; choose one of {', '.join(valid)} or the "
                           "dotted path of a BackendPlugin subclass")


def backend_problems(rollout: Mapping[str, Any]) -> list[str]:
    """The config problems of ``rollout``'s backend: an unknown name, or its own checks."""
    try:
        plugin = backend_plugin(rollout["name"])
    except (ValueError, ImportError) as err:
        return [str(err)]
    problems = []
    transfer = rollout.get("weight_transfer")
    if transfer is not None and transfer not in plugin.weight_transfers:
        takes = ", ".join(plugin.weight_transfers) or "no other"
        problems.append(f"actor_rollout_ref.rollout.weight_transfer is {transfer!r}; the "
                        f"{plugin.name or rollout['name']} backend takes null (its own path) "
                        f"or {takes}")  # fmt: skip
    return problems + plugin.config_problems(rollout)


def weight_sync_of(backend: Any) -> str:
    """How ``backend`` takes new weights (``WEIGHT_SYNCS``): its ``weight_sync`` attribute,
    ``state_dict`` (the whole state dict at once) for a backend that does not say."""
    method = getattr(backend, "weight_sync", "state_dict")
    if method not in WEIGHT_SYNCS:
        raise ValueError(f"{type(backend).__name__}.weight_sync is {method!r}; it must be one "
                         f"of {', '.join(WEIGHT_SYNCS)}")
    return method


__all__ = [
    "BACKEND_PLUGINS",
    "BUILTIN",
    "BackendPlugin",
    "WEIGHT_SYNCS",
    "backend_plugin",
    "backend_problems",
    "weight_sync_of",
]
