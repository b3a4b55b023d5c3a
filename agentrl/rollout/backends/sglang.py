"""The `sglang` backend: a client of SGLang's native HTTP API, and its plugin.

    backend = SGLangBackend(["http://10.0.0.1:30000", "http://10.0.0.2:30000"])
    await backend.wait_until_ready(timeout=600)
    out = await backend.generate(ids, {"max_new_tokens": 512, "temperature": 1.0}, "s42-t0")
    await backend.update_weights("/ckpt/step10")          # every server loads the directory
    await backend.aclose()

Routing, failover, the control plane and the error policy are every server engine's
(`ServerBackend`, agentrl/rollout/backends/servers.py); `SGLangAPI` speaks SGLang's routes:

Data plane: `POST /generate` with `input_ids`, SGLang-named `sampling_params` (with
`skip_special_tokens` false unless given, as the hf backend), `return_logprob` and `rid`; the
reply's `output_ids`, `text`, `meta_info.finish_reason` (`{"type": "stop"|"length"|"abort",
...}`) and `meta_info.output_token_logprobs` (`[logprob, token_id, text|null]` triples)
become a `GenerationOutput`. Health: `/health_generate`; version: `/get_weight_version`;
abort: `/abort_request` (`{"rid"}` or `{"abort_all": true}`).

Weights: `update_weights(path)` uses `/update_weights_from_disk`; `update_weights(state_dict)`
uses `/update_weights_from_tensor`, which ships CUDA IPC handles, not data: it works only
when the trainer shares the node and GPUs with a tensor-parallel-size-1 server (colocated).
`verify_weights(path)` reads the first `VERIFY_ROWS` rows of every tensor back from each
server with SGLang's `/get_weights_by_name` (`agentrl serve` answers it too) and compares them
with the directory's, exactly (a prefix of each tensor: SGLang has no whole-tensor checksum
route). Memory: `/release_memory_occupation` and `/resume_memory_occupation` (servers started
with `--enable-memory-saver`).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentrl.rollout.backends.base import LOAD_BALANCE, GenerationOutput
from agentrl.rollout.backends.registry import BACKEND_PLUGINS, BackendPlugin
from agentrl.rollout.backends.servers import (
    SERVER_FAILURES,
    Post,
    Request,
    ServerAPI,
    ServerBackend,
    client_options,
)


class SGLangAPI(ServerAPI):
    """SGLang's native routes (module docstring)."""

    generate_path = "/generate"
    health_path = "/health_generate"
    version_path = "/get_weight_version"

    def generate_payload(self, input_ids: list[int], sampling_params: Mapping[str, Any],
                         request_id: str, return_logprob: bool) -> dict[str, Any]:  # fmt: skip
        payload: dict[str, Any] = {
            "input_ids": [int(t) for t in input_ids],
            # the tool-call markup must survive in `text`: SGLang's default would strip it
            "sampling_params": {"skip_special_tokens": False, **sampling_params},
            "return_logprob": return_logprob,
            "rid": request_id,
            "stream": False,
        }
        if return_logprob:
            payload["logprob_start_len"] = -1
        return payload

    def parse_generate(self, body: Any, tokenizer: Any) -> GenerationOutput:
        return parse_generate_response(body, tokenizer)

    def prompt_log_probs_payload(self, input_ids: list[int], request_id: str,
                                 top_k: int = 0) -> dict[str, Any]:  # fmt: skip
        """SGLang's input log-probs (``logprob_start_len: 0``, one output token not used);
        ``top_k`` > 0 asks its top-k per position too (``top_logprobs_num``)."""
        payload = {"input_ids": [int(t) for t in input_ids],
                   "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                   "return_logprob": True, "logprob_start_len": 0, "rid": request_id,
                   "stream": False}  # fmt: skip
        if top_k > 0:
            payload["top_logprobs_num"] = int(top_k)
        return payload

    def parse_prompt_log_probs(self, body: Any) -> list[float]:
        entries = body["meta_info"]["input_token_logprobs"]
        return [float(entry[0]) for entry in entries[1:]]

    def parse_prompt_top_log_probs(self, body: Any, top_k: int) -> list[dict[int, float]] | None:
        """``input_top_logprobs`` (``[log-prob, id, text]`` per entry, none for token 0)."""
        entries = body["meta_info"].get("input_top_logprobs")
        if entries is None:
            return None
        return [{int(e[1]): float(e[0]) for e in (entry or [])[:top_k]} for entry in entries[1:]]

    def abort_call(self, request_id: str | None) -> tuple[str, dict[str, Any]]:
        return "/abort_request", ({"abort_all": True} if request_id is None
                                  else {"rid": request_id})  # fmt: skip

    async def load_directory(self, post: Post, url: str, path: str, version: str | None,
                             flush_cache: bool) -> None:  # fmt: skip
        await post(url, "/update_weights_from_disk", _disk_update(path, version, flush_cache))

    def load_tensors(self, state_dict: Mapping[str, Any], bucket_bytes: int,
                     version: str | None, flush_cache: bool
                     ) -> Iterable[tuple[str, dict[str, Any]]]:  # fmt: skip
        buckets = _buckets(list(state_dict.items()), bucket_bytes)
        for i, bucket in enumerate(buckets):
            yield "/update_weights_from_tensor", {
                "serialized_named_tensors": [serialize_named_tensors(bucket)],
                "load_format": None,
                "abort_all_requests": False,
                "flush_cache": flush_cache and i == len(buckets) - 1,
                "weight_version": version,
            }

    async def verify_server(self, request: Request, url: str, directory: str,
                            dtype: Any) -> None:  # fmt: skip
        from agentrl.rollout.backends.verify import (
            VERIFY_ROWS,
            VerificationUnavailable,
            WeightMismatchError,
            first_prefix_mismatch,
            iter_directory_tensors,
            prefix_values,
        )

        for name, tensor in iter_directory_tensors(directory):
            body = {"name": name, "truncate_size": VERIFY_ROWS}
            try:
                reply = await request("POST", url + "/get_weights_by_name", body)
            except Exception as err:  # noqa: BLE001 - named in the mismatch error
                status = getattr(err.__cause__, "status_code", None)
                if status in (404, 405, 501):
                    raise VerificationUnavailable(f"{url}/get_weights_by_name: {err}") from err
                raise WeightMismatchError(url, name, f"it did not answer: {err}") from err
            why = first_prefix_mismatch(prefix_values(tensor, VERIFY_ROWS, dtype), reply)
            if why is not None:
                raise WeightMismatchError(url, name, why)

    def release_call(self, tags: list[str] | None) -> tuple[str, dict[str, Any]]:
        return "/release_memory_occupation", {"tags": tags}

    def resume_call(self, tags: list[str] | None) -> tuple[str, dict[str, Any]]:
        return "/resume_memory_occupation", {"tags": tags}


class SGLangBackend(ServerBackend):
    """`ServerBackend` speaking SGLang's routes (`SGLangAPI`); arguments as
    `ServerBackend`'s."""

    def __init__(self, server_urls: Sequence[str] | str, **kwargs: Any) -> None:
        super().__init__(server_urls, api=SGLangAPI(), **kwargs)


def sglang_client(rollout: Mapping[str, Any], urls: Sequence[str], tokenizer: Any,
                  **kwargs: Any) -> SGLangBackend:  # fmt: skip
    """An `SGLangBackend` of the servers at `urls` with `rollout`'s client settings
    (`kwargs` override them, e.g. `on_close`)."""
    return SGLangBackend(list(urls), **{**client_options(rollout, tokenizer), **kwargs})


@BACKEND_PLUGINS.register("sglang")
class SGLangPlugin(BackendPlugin):
    """``rollout.name: sglang``: clients of SGLang servers, at ``server_urls`` or launched with
    ``launch_command`` (default ``python -m sglang.launch_server`` under ``server_python``),
    ``tensor_model_parallel_size`` as ``--tp``, ``gpu_memory_utilization`` as
    ``--mem-fraction-static``, ``free_cache_engine`` as ``--enable-memory-saver`` and
    ``engine_kwargs`` as further flags. Server i gets GPUs i*tp .. (i+1)*tp-1 of ``gpus``
    (default: those this process may use; ``num_servers`` null -> as many as they hold)."""

    name = "sglang"
    launches_servers = True

    def create(self, rollout: Mapping[str, Any], model_path: str | None, tokenizer: Any, *,
               model: Any = None, seed: int | None = None,
               gpus: Sequence[str] | None = None) -> Any:  # fmt: skip
        if rollout.get("server_urls"):
            return self.client(rollout, rollout["server_urls"], tokenizer)
        if not model_path:
            raise ValueError("launching sglang servers needs actor_rollout_ref.model.path "
                             "(or set actor_rollout_ref.rollout.server_urls)")
        launcher = self.launcher(rollout, model_path, gpus=gpus)
        urls = launcher.start()
        return self.client(rollout, urls, tokenizer, control_urls=None, on_close=launcher.stop)

    def client(self, rollout: Mapping[str, Any], urls: Sequence[str], tokenizer: Any,
               **kwargs: Any) -> Any:  # fmt: skip
        return sglang_client(rollout, urls, tokenizer, **kwargs)

    def launcher(self, rollout: Mapping[str, Any], model_path: str, *, seed: int | None = None,
                 trust_remote_code: bool = False, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", gpus: Sequence[str] | None = None) -> Any:  # fmt: skip
        from agentrl.rollout.backends.launcher import gpu_server_launcher

        server_args: dict[str, Any] = {}
        if rollout["launch_command"] is None:  # SGLang's own flags; a custom command gets
            server_args = {  # only engine_kwargs
                "tp": rollout["tensor_model_parallel_size"],
                "mem_fraction_static": rollout["gpu_memory_utilization"],
                "enable_memory_saver": rollout["free_cache_engine"],
                "dtype": rollout["dtype"],
            }
        return gpu_server_launcher(rollout, model_path, ("-m", "sglang.launch_server"),
                                   server_args, env=env, host=host, gpus=gpus)


def parse_generate_response(body: Any, tokenizer: Any = None) -> GenerationOutput:
    """A `GenerationOutput` from SGLang's `/generate` JSON reply (one request; a one-item
    batch list is accepted). Raises KeyError/ValueError on a malformed reply."""
    if isinstance(body, list):
        if len(body) != 1:
            raise ValueError(f"expected one result, got {len(body)}")
        body = body[0]
    meta = dict(body["meta_info"])
    triples = meta.pop("output_token_logprobs", None)
    output_ids = body.get("output_ids")
    if output_ids is None:
        if triples is None:
            raise KeyError("output_ids")
        output_ids = [int(t[1]) for t in triples]
    log_probs = None
    if triples is not None:
        if [int(t[1]) for t in triples] != list(output_ids):
            raise ValueError("output_token_logprobs token ids differ from output_ids")
        log_probs = [float(t[0]) for t in triples]
    reason = meta.get("finish_reason")
    kind = reason.get("type") if isinstance(reason, dict) else reason
    if kind not in ("stop", "length", "abort"):
        raise ValueError(f"unknown finish_reason {reason!r}")
    text = body.get("text")
    if text is None:  # a server started with --skip-tokenizer-init
        text = tokenizer.decode(output_ids, skip_special_tokens=False) if tokenizer else ""
    return GenerationOutput(list(output_ids), text, kind, log_probs, meta)


def serialize_named_tensors(named_tensors: list[tuple[str, Any]]) -> str:
    """SGLang's wire format for `/update_weights_from_tensor`: base64 of the
    multiprocessing (ForkingPickler) pickle of [(name, tensor)], which carries CUDA tensors
    as IPC handles (and CPU tensors as shared memory): valid only on the same host."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

    buffer = io.BytesIO()
    ForkingPickler(buffer).dump(named_tensors)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _buckets(named: list[tuple[str, Any]], limit: int) -> list[list[tuple[str, Any]]]:
    """Split (name, tensor) pairs into consecutive buckets of at most `limit` bytes
    (a tensor larger than the limit gets a bucket of its own)."""
    buckets: list[list[tuple[str, Any]]] = [[]]
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if buckets[-1] and size + nbytes > limit:
            buckets.append([])
            size = 0
        buckets[-1].append((name, tensor))
        size += nbytes
    return buckets if buckets[0] else []


def _disk_update(path: str, weight_version: str | None, flush_cache: bool) -> dict[str, Any]:
    """The body of `/update_weights_from_disk`."""
    return {
        "model_path": path,
        "load_format": None,
        "abort_all_requests": False,
        "weight_version": weight_version,
        "flush_cache": flush_cache,
    }


__all__ = [
    "LOAD_BALANCE",
    "SERVER_FAILURES",
    "SGLangAPI",
    "SGLangBackend",
    "SGLangPlugin",
    "parse_generate_response",
    "serialize_named_tensors",
    "sglang_client",
]
