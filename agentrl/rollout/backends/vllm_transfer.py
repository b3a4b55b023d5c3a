"""Weights to vLLM servers over NCCL or CUDA IPC, through vLLM's own trainer-side engines.

    transfer = backend.weight_transfer(lambda: named_full_weights(model), rank=rank)
    verified = transfer.send("12", verify=True)   # every trainer rank; rank 0 drives the servers
    transfer.close()

``actor_rollout_ref.rollout.weight_transfer`` (vllm only, GPUs only) picks it: ``nccl`` (the
trainer's rank 0 joins one NCCL group with every worker of every server and broadcasts each
tensor; servers started with ``--weight-transfer-config '{"backend":"nccl"}'``) or ``ipc``
(a server on the trainer's own GPU maps the trainer's tensors through CUDA IPC handles;
``{"backend":"ipc"}`` and ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``). Null keeps the disk path
(``VLLMAPI.load_directory``). The routes and their order are vLLM 0.32's
(docs/vllm_api_notes.md, "GPU weight transfer"):

    /pause?mode=keep                                   every server (the engine does not pause itself)
    /init_weight_transfer_engine {init_info}           once; NCCL: blocks until the rendezvous
    /start_weight_update                               per sync
    /update_weights {update_info}   + the broadcast    NCCL: blocks while rank 0 broadcasts
    /finish_weight_update {weight_version}
    /reset_prefix_cache, /resume, then /weight_info and /weight_checker on every server
    /shutdown_weight_transfer_engine                   at close

The data plane (the NCCL group and its broadcast, the IPC handles, packing into buffers) is
vLLM's: its ``WeightTransferTrainerFactory`` builds the trainer engine, which calls this
module's ``TransferClient`` (vLLM's ``VLLMWeightSyncClient`` protocol, for several servers
at once: each server's workers get their own ranks in the group) and iterates its
``TransferSource`` (vLLM's ``WeightSource`` protocol: every weight gathered once, a
collective every trainer rank runs, cast to the servers' dtype). vLLM must be importable in
the trainer's environment for these two methods (it is on GPUs; on CPU only the disk path
runs, and the CPU tests check the sequence against a recording server and vLLM's own engine
classes with the NCCL calls stubbed).

With ``verify_weights`` the sender hashes every tensor as it goes (SHA-256, q/k/v and
gate/up fused as vLLM holds them) and compares each server's ``/weight_checker`` digests,
as the disk path compares a directory's. A server that dies breaks the NCCL group: weight
failover (skipping a dead server and reloading it when it returns) is the disk path's.
"""

from __future__ import annotations

import base64
import logging
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from agentrl.rollout.backends.base import BackendError
from agentrl.rollout.backends.vllm_checksums import (
    StreamDigests,
    compare_checksums,
    server_checksums,
)

logger = logging.getLogger(__name__)

TRANSFER_METHODS = ("nccl", "ipc")  # rollout.weight_transfer besides null (the disk path)
# rollout.weight_transfer_kwargs and their defaults (vLLM's, where it has one)
TRANSFER_DEFAULTS: dict[str, Any] = {
    "master_address": "127.0.0.1",  # nccl: where rank 0 opens the group's TCP store
    "master_port": 29600,
    "workers_per_server": None,  # nccl: null -> tensor_model_parallel_size
    "packed": None,  # null -> vLLM's default (nccl: packed buffers; ipc: one tensor each)
    "packed_buffer_size_bytes": None,
    "packed_num_buffers": None,  # nccl only
    "timeout_s": 300.0,  # per HTTP call (vLLM's client's)
}


def transfer_problems(method: Any, kwargs: Mapping[str, Any] | None) -> list[str]:
    """What is wrong with ``weight_transfer`` and ``weight_transfer_kwargs``."""
    problems = []
    if method is not None and method not in TRANSFER_METHODS:
        problems.append(f"actor_rollout_ref.rollout.weight_transfer is {method!r}; choose "
                        f"null (the disk path) or one of {', '.join(TRANSFER_METHODS)}")  # fmt: skip
    unknown = sorted(set(kwargs or {}) - set(TRANSFER_DEFAULTS))
    if unknown:
        problems.append(f"actor_rollout_ref.rollout.weight_transfer_kwargs has unknown keys "
                        f"{unknown}; it takes {', '.join(TRANSFER_DEFAULTS)}")  # fmt: skip
    return problems


class ParamMeta(NamedTuple):
    """What vLLM's trainer engines read of a parameter before sending it (its ``ParamMeta``)."""

    name: str
    dtype: Any
    shape: tuple[int, ...]


class TransferSource:
    """vLLM's ``WeightSource`` protocol over ``weights()`` (a fresh iterator of (name, full
    tensor) per call: every trainer rank iterates it, a collective), each tensor cast to
    ``dtype``. ``metadata()`` takes one pass on first use, then keeps it (the parameters do
    not change between syncs). ``digests``, when set, sees every tensor sent."""

    def __init__(self, weights: Callable[[], Iterable[tuple[str, Any]]], dtype: Any = None):
        self.weights = weights
        self.dtype = dtype
        self.digests: StreamDigests | None = None
        self._meta: list[ParamMeta] | None = None

    def metadata(self) -> list[ParamMeta]:
        if self._meta is None:
            self._meta = [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self._pairs()]
        return self._meta

    def _pairs(self) -> Iterator[tuple[str, Any]]:
        for name, tensor in self.weights():
            yield name, tensor if self.dtype is None else tensor.to(self.dtype)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name, tensor in self._pairs():
            if self.digests is not None:
                self.digests.add(name, tensor)
            yield name, tensor

    def held_names(self) -> None:
        return None  # every rank takes part in every parameter's gather


def json_safe(update_info: Any) -> Any:
    """vLLM's HTTP form of an update: CUDA IPC handles pickled into ``ipc_handles_pickled``
    (the server reads them with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``)."""
    if isinstance(update_info, list):
        return [json_safe(info) for info in update_info]
    if update_info.get("ipc_handles") is None:
        return dict(update_info)
    out = {k: v for k, v in update_info.items() if k != "ipc_handles"}
    out["ipc_handles_pickled"] = base64.b64encode(pickle.dumps(update_info["ipc_handles"])).decode()
    return out


class TransferClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol for every server at ``urls`` at once (each
    call goes to all of them concurrently: NCCL's blocking calls must all be in flight while
    rank 0 broadcasts). Server ``i``'s workers sit at ranks ``1 + i * workers_per_server``
    onwards of the group. ``version`` is what ``finish_weight_update`` labels the weights."""

    def __init__(self, urls: Sequence[str], *, workers_per_server: int = 1,
                 timeout_s: float = 300.0) -> None:  # fmt: skip
        import httpx

        self.urls = [u.rstrip("/") for u in urls]
        self.workers_per_server = int(workers_per_server)
        self.version: str | None = None
        self.http = httpx.Client(timeout=httpx.Timeout(timeout_s))

    # vLLM's VLLMWeightSyncClient
    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        bodies = []
        for i in range(len(self.urls)):
            info = dict(init_info)
            if "rank_offset" in info:  # NCCL: this server's first worker's rank
                info["rank_offset"] = 1 + i * self.workers_per_server
            bodies.append({"init_info": info})
        self._each("POST", "/init_weight_transfer_engine", bodies)

    def start_weight_update(self) -> None:
        self._post_all("/start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        self._post_all("/update_weights", {"update_info": json_safe(update_info)})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        version = weight_version if weight_version is not None else self.version
        self._post_all("/finish_weight_update",
                       None if version is None else {"weight_version": str(version)})  # fmt: skip

    def shutdown_weight_transfer_engine(self) -> None:
        self._post_all("/shutdown_weight_transfer_engine")

    # around an update, and after it
    def pause(self) -> None:
        self._post_all("/pause?mode=keep")  # requests in flight freeze, go on after /resume

    def resume(self) -> None:
        self._post_all("/resume")

    def reset_prefix_cache(self) -> None:
        self._post_all("/reset_prefix_cache")

    def versions(self) -> list[str | None]:
        bodies = self._each("GET", "/weight_info", [None] * len(self.urls))
        return [_weight_version(body) for body in bodies]

    def checksums(self) -> list[Any]:
        return self._each("POST", "/weight_checker", [{"action": "checksum"}] * len(self.urls))

    def close(self) -> None:
        self.http.close()

    def _post_all(self, path: str, body: Any = None) -> None:
        self._each("POST", path, [body] * len(self.urls))

    def _each(self, method: str, path: str, bodies: list[Any]) -> list[Any]:
        with ThreadPoolExecutor(max_workers=len(self.urls)) as pool:
            futures = [pool.submit(self._call, method, url, path, body)
                       for url, body in zip(self.urls, bodies, strict=True)]  # fmt: skip
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            raise failed[0]
        return [f.result() for f in futures]

    def _call(self, method: str, url: str, path: str, body: Any) -> Any:
        import httpx

        try:
            reply = self.http.request(method, url + path, json=body)
        except httpx.HTTPError as err:
            raise BackendError(f"weight transfer: {url}{path}: {type(err).__name__}: {err}") from err
        if reply.status_code >= 400:
            raise BackendError(f"weight transfer: {url}{path} answered {reply.status_code}: "
                               f"{reply.text[:300]}")  # fmt: skip
        return reply.json() if reply.content else None


def _weight_version(body: Any) -> str | None:
    version = body.get("weight_version") if isinstance(body, dict) else None
    return None if version is None else str(version)


def vllm_trainer_init(method: str, fields: Mapping[str, Any], client: TransferClient,
                      source: TransferSource) -> Any:  # fmt: skip
    """vLLM's trainer engine for ``method``, rendezvoused (``WeightTransferTrainerFactory``)."""
    try:
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo
    except ImportError as err:
        raise ValueError(
            f"actor_rollout_ref.rollout.weight_transfer={method} sends weights through vLLM's "
            f"own trainer engine, and vllm is not importable here ({err}); install vLLM in the "
            "training environment or set weight_transfer=null (the disk path)") from err
    info_cls = NCCLTrainerInitInfo if method == "nccl" else IPCTrainerInitInfo
    info = info_cls(**dict(fields))
    return WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)


TrainerInit = Callable[[str, Mapping[str, Any], TransferClient, TransferSource], Any]


class VLLMWeightTransfer:
    """One trainer rank's side of the transfer (module docstring). Build with ``start``."""

    def __init__(self, method: str, client: TransferClient, source: TransferSource,
                 engine: Any, rank: int, on_sent: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.method, self.client, self.source = method, client, source
        self.engine, self.rank, self.on_sent = engine, rank, on_sent

    @classmethod
    def start(cls, method: str, urls: Sequence[str], weights: Callable[[], Iterable[Any]], *,
              rank: int, dtype: Any = None, options: Mapping[str, Any] | None = None,
              tensor_parallel: int = 1, on_sent: Callable[[str], None] | None = None,
              trainer_init: TrainerInit = vllm_trainer_init) -> VLLMWeightTransfer:  # fmt: skip
        """Build the client and source, and vLLM's trainer engine (NCCL: rank 0 opens the
        group while every server joins it). Every trainer rank calls it."""
        problems = transfer_problems(method, options)
        if method is None or problems:
            raise ValueError("; ".join(problems) or "weight_transfer is null: the disk path")
        opts = {**TRANSFER_DEFAULTS, **{k: v for k, v in (options or {}).items() if v is not None}}
        workers = int(opts["workers_per_server"] or tensor_parallel)
        client = TransferClient(urls, workers_per_server=workers, timeout_s=opts["timeout_s"])
        source = TransferSource(weights, dtype)
        fields: dict[str, Any] = {"rank": rank}
        if method == "nccl":
            fields.update(master_address=opts["master_address"], master_port=int(opts["master_port"]),
                          world_size=1 + workers * len(client.urls))  # fmt: skip
        for key in ("packed", "packed_buffer_size_bytes", "packed_num_buffers"):
            if opts[key] is not None and (key != "packed_num_buffers" or method == "nccl"):
                fields[key] = opts[key]
        try:
            engine = trainer_init(method, fields, client, source)
        except BaseException:
            client.close()
            raise
        logger.info("rank %d: vLLM %s weight transfer to %d server(s) ready", rank, method,
                    len(client.urls))  # fmt: skip
        return cls(method, client, source, engine, rank, on_sent)

    def send(self, version: str, verify: bool = False) -> int:
        """Send the current weights (every rank: the gathers are collectives); on rank 0,
        with the servers paused, labelled ``version``, checked to report it and, with
        ``verify``, to hold every tensor sent. Returns the servers verified (0 elsewhere)."""
        if self.rank != 0:
            self.engine.send_weights()
            return 0
        self.client.version = version
        self.source.digests = StreamDigests() if verify else None
        self.client.pause()
        try:
            self.engine.send_weights()
            self.client.reset_prefix_cache()  # cached prefixes hold the old weights' keys
        finally:
            self.client.resume()
        if self.on_sent is not None:
            self.on_sent(version)
        wrong = [f"{u} reports {v}" for u, v in zip(self.client.urls, self.client.versions(),
                                                    strict=True) if v != version]  # fmt: skip
        if wrong:
            raise BackendError(f"after the {self.method} weight transfer of version {version}: "
                               f"{'; '.join(wrong)}")  # fmt: skip
        if not verify:
            return 0
        expected = self.source.digests.digests
        for url, reply in zip(self.client.urls, self.client.checksums(), strict=True):
            held, tensor_parallel = server_checksums(reply)
            compare_checksums(url, held, tensor_parallel, expected)
        return len(self.client.urls)

    def close(self) -> None:
        """Leave the group (rank 0 first tells the servers to leave theirs)."""
        try:
            if self.rank == 0:
                self.client.shutdown_weight_transfer_engine()
        except BackendError as err:
            logger.warning("vLLM weight transfer shutdown: %s", err)
        finally:
            shutdown = getattr(self.engine, "shutdown", None)
            if shutdown is not None:
                shutdown()
            self.client.close()


__all__ = [
    "TRANSFER_DEFAULTS",
    "TRANSFER_METHODS",
    "TransferClient",
    "TransferSource",
    "VLLMWeightTransfer",
    "json_safe",
    "transfer_problems",
    "vllm_trainer_init",
]
