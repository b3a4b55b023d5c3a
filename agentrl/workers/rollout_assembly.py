"""The rollout a config asks for, built in one place: its backend and its engine kind.

    settings = RolloutSettings.from_config(cfg.actor_rollout_ref)   # once, typed
    rollout = build_rollout(settings, tokenizer, loop=LoopThread(), seed=0)
    out = rollout.generate_sequences(prompts)                 # a sync caller (the hybrid worker)
    out = await rollout.agenerate_sequences(prompts, on_request_done=progress)  # an async one
    rollout.close()                                           # or: await rollout.aclose()

`agentrl.rollout.assembly` makes the parts (the tools, the interactions, the in-process
engine, and the factories another process builds them from); this module decides, from the
settings alone, which engine runs a rollout (`engine_kind`):

| kind | when | engine |
|---|---|---|
| `engine` | the default | `AsyncRolloutEngine`, or the subclass `rollout.engine_class` names, on the caller's event loop |
| `sharded` | `rollout.engine_workers > 1` | `ShardedRolloutEngine`: N `EngineWorker` processes, each building the same in-process engine (`engine_class` included) |
| `agent` | `rollout.agent_function` | `AgentRollout`: the user's agent function per sample, through the in-process gateway |

The hybrid rollout worker (`agentrl.workers.rollout`), `agentrl generate` and the off-policy
producer's process (`agentrl.trainer.producer_host`: the `engine` or `agent` kind over HTTP
clients of the rollout servers; the validator refuses `engine_workers > 1` there) build
their rollout here. The backend
comes from `create_backend`, which launches the servers a rollout needs
(`backends.factory.server_launcher`). Its callers build the one `RolloutSettings`
(rollout_settings.py) from the validated `actor_rollout_ref`; agent mode's `AgentSettings`
is built here from its `section`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.protocol import DataProto
from agentrl.rollout.assembly import build_engine, configured_tools, engine_factories
from agentrl.utils.aio import LoopThread
from agentrl.workers.rollout_settings import ENGINE_KINDS, RolloutSettings, engine_kind

logger = logging.getLogger(__name__)


@dataclass
class Rollout:
    """A backend and the engine of one kind over it (see the module docstring)."""

    engine_kind: str  # `engine`, `sharded` or `agent`: `engine_kind(rollout)`
    settings: RolloutSettings
    backend: Any
    engine: Any
    loop: LoopThread | None = None  # where `generate_sequences` runs the coroutines
    own_backend: bool = True  # closed by `close` / `aclose`

    async def agenerate_sequences(
        self, prompts: DataProto, on_request_done: Callable[[Any], None] | None = None
    ) -> DataProto:
        """Roll out `prompts` (`on_request_done` is called as each sample finishes)."""
        if self.engine_kind == "sharded":  # Ray workers: wait for them off the event loop
            out = await asyncio.to_thread(self.engine.generate_sequences, prompts)
            if on_request_done is not None:
                for _ in range(len(out)):
                    on_request_done(None)
            return out
        out = await self.engine.agenerate_sequences(prompts, on_request_done=on_request_done)
        return with_backend_metrics(out, self.backend)

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """`agenerate_sequences` for a sync caller, on `loop` (the sharded engine directly)."""
        if self.engine_kind == "sharded":
            return self.engine.generate_sequences(prompts)
        if self.loop is None:
            raise RuntimeError("Rollout.generate_sequences needs the loop it was built with")
        return self.loop.run(self.agenerate_sequences(prompts))

    async def aclose(self) -> None:
        """Stop the engine workers, then the backend (and the servers it launched) if ours."""
        if self.engine_kind == "sharded":
            await asyncio.to_thread(self.engine.close)
        closer = getattr(self.backend, "aclose", None) if self.own_backend else None
        if closer is not None:
            await closer()

    def close(self) -> None:
        """`aclose` on `loop`; a failure is logged, not raised (closing must not mask the
        error that ended the run)."""
        if self.engine_kind == "sharded":
            self.engine.close()
        closer = getattr(self.backend, "aclose", None) if self.own_backend else None
        if closer is None or self.loop is None:
            return
        try:
            self.loop.run(closer(), timeout=60)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            logger.warning("closing the rollout backend failed: %s", exc)


def with_backend_metrics(out: DataProto, backend: Any) -> DataProto:
    """Add the backend's own counts since its last reading (an SGLang client's retries and
    lost servers: `rollout/server_retries`, `rollout/servers_lost`, ...) to the batch's
    rollout metrics. The sharded engine's workers hold their own clients and do not report
    them."""
    read = getattr(backend, "metrics", None)
    if callable(read):
        out.meta_info.setdefault("metrics", {}).update(read())
    return out


def build_rollout(
    settings: RolloutSettings,
    tokenizer: Any,
    *,
    loop: LoopThread | None = None,
    backend: Any = None,
    seed: int | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> Rollout:
    """The rollout `settings` (`RolloutSettings.from_config(actor_rollout_ref)`) asks for.
    `backend` replaces the configured one and is not closed by the rollout; `seed` seeds the
    hf sampler; `loop` is where a sync caller's coroutines run."""
    from agentrl.rollout.backends.factory import create_backend

    if not isinstance(settings, RolloutSettings):
        raise TypeError("build_rollout takes RolloutSettings.from_config(actor_rollout_ref), "
                        f"got {type(settings).__name__}")
    rollout = settings.section
    own_backend = backend is None
    if own_backend:
        backend = create_backend(rollout, settings.model.path, tokenizer, seed=seed)
    chat_kwargs = dict(chat_template_kwargs or {})
    if settings.kind == "agent":
        from agentrl.gateway.agent_rollout import AgentRollout, load_agent_function
        from agentrl.gateway.agent_settings import AgentSettings

        agent = AgentSettings.from_config(rollout)
        engine: Any = AgentRollout(
            agent, tokenizer, backend, load_agent_function(str(agent.function)),
            chat_template_kwargs=chat_kwargs, tools=configured_tools(rollout["multi_turn"]),
        )  # fmt: skip
    elif settings.kind == "sharded":
        engine = _sharded_engine(settings, backend, chat_kwargs)
    else:
        engine = build_engine(rollout, tokenizer, backend, chat_template_kwargs=chat_kwargs)
    logger.debug("rollout engine: %s (%s)", settings.kind, type(engine).__name__)
    return Rollout(settings.kind, settings, backend, engine, loop, own_backend)


def _sharded_engine(settings: RolloutSettings, backend: Any, chat_kwargs: dict) -> Any:
    """`engine_workers` engines in Ray actors, each with its own HTTP client of `backend`'s
    servers (launched by `create_backend` when `server_urls` was empty; the workers' clients
    come from the same backend plugin) and its own tools."""
    from agentrl.rollout.sharded import ShardedRolloutEngine

    urls = list(getattr(backend, "server_urls", None) or [])
    if not urls:
        raise ValueError("actor_rollout_ref.rollout.engine_workers > 1 needs a backend with "
                         "inference servers (rollout.name sglang or vllm, or server_urls): the "
                         "engine workers reach them over HTTP")
    # the workers' section: the servers this backend reaches (a copy; `section` stays as read)
    workers_rollout = {**settings.section, "server_urls": urls,
                       "control_urls": list(getattr(backend, "control_urls", urls))}
    model = settings.model
    return ShardedRolloutEngine(
        settings.engine_workers,
        workers_rollout,
        {"path": model.path, "trust_remote_code": model.trust_remote_code,
         "chat_template": model.custom_chat_template},
        *engine_factories(workers_rollout, model.path),
        chat_kwargs,
    )


__all__ = ["ENGINE_KINDS", "Rollout", "build_rollout", "engine_kind"]
