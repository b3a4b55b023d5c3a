"""The embedded `hf` backend: transformers on CPU (or one GPU) with dynamic batching.

    backend = HFBackend.from_pretrained("/path/to/model")
    out = await backend.generate(ids, {"max_new_tokens": 64, "temperature": 0}, "req-0")

Batching. Every `generate` call puts its request on an asyncio queue. One worker task takes
the first waiting request plus every other request waiting at that moment (after an
optional `batch_wait_s` pause that lets more arrive), up to `max_num_seqs`, and runs the
micro-batch in a single worker thread, so the event loop stays free for tools and HTTP.
A micro-batch is one prefill of the left-padded prompts followed by a token-by-token decode
loop over a shared KV cache (`kv_cache="chunked"`, agentrl/rollout/backends/kv_cache.py:
buffers written in place that grow 128 positions at a time; `"dynamic"`: transformers'
`DynamicCache`, a concatenation per layer per step). A request that finishes (stop token,
stop string, its own `max_new_tokens`, or abort) is answered at once and dropped from the
batch and its cache rows; the loop ends when no request is left. Requests that arrive
meanwhile wait for the next micro-batch (no joining a running batch: that would need
per-row cache offsets). Grouped-query models with SDPA attention decode through
`packed_decode_sdpa` (agentrl/rollout/backends/decode_attention.py): the query heads of a
group attend to their key/value head without copies of the cache.

Sampling is per row inside one micro-batch, so requests with different parameters share
a forward pass: each row has its own temperature, top-k, top-p, min-p, stop ids and
budget (agentrl/rollout/backends/hf_sampling.py). Temperature 0 is greedy (argmax); it is deterministic and gives the tokens
`model.generate(do_sample=False)` gives. Sampled tokens come from one seeded
`torch.Generator`, so they depend on how requests were batched: the rollout engine makes
batching independent of timing by generating in waves (`rollout.deterministic`,
agentrl/rollout/waves.py), and a seeded run then repeats exactly.

Log-probs. `output_log_probs[i]` is `log_softmax(logits / temperature)[token_i]` in fp32,
before top-k/top-p/min-p filtering (temperature 1 for greedy rows): the log-prob the
trainer's forward pass computes for the same token, which divides the logits by the
rollout temperature as verl does, and what SGLang returns by default.

Outputs follow SGLang's `/generate`: `output_ids` include the matched stop token; `text`
omits it (and a matched stop string) unless `no_stop_trim`; `meta_info` carries the
SGLang-shaped `finish_reason` dict, token counts, `weight_version` and `e2e_latency`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import operator
import os
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from agentrl.rollout.backends.base import (
    HF_ENGINE_KWARGS,
    BackendError,
    GenerationOutput,
    unknown_hf_engine_kwargs,
)
from agentrl.rollout.backends.decode_attention import use_packed_decode_attention
from agentrl.rollout.backends.hf_sampling import RowSampler, SamplingParams
from agentrl.rollout.backends.kv_cache import KV_CACHES, make_kv_cache
from agentrl.rollout.backends.registry import BACKEND_PLUGINS, BackendPlugin
from agentrl.rollout.backends.verify import WeightMismatchError
from agentrl.rollout.backends.weights import (
    load_dir_in_place,
    load_weights_in_place,
    read_weights_dir,
)
from agentrl.utils.threads import CPUThreads

logger = logging.getLogger(__name__)

IN_PROCESS = "hf (in process)"  # the embedded engine's name in errors and canary warnings
SERVE_MAX_NUM_SEQS = 4096  # rollout.max_num_seqs null in agentrl serve: every waiting request joins a batch

@dataclass
class _Request:
    """One request as the worker thread sees it."""

    request_id: str
    prompt: list[int]
    params: SamplingParams
    max_new_tokens: int  # params.max_new_tokens clamped to the context length
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    submitted: float = field(default_factory=time.perf_counter)
    output_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    aborted: bool = False  # set by abort() on the event loop, read by the worker thread


@dataclass
class BatchStats:
    """Counters of the engine (tests check that batching happens; /server_info shows them)."""

    num_batches: int = 0  # micro-batches run (one prefill each)
    batch_sizes: list[int] = field(default_factory=list)
    decode_steps: int = 0  # forward passes after the prefill
    generated_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "num_batches": self.num_batches,
            "batch_sizes": list(self.batch_sizes),
            "decode_steps": self.decode_steps,
            "generated_tokens": self.generated_tokens,
        }


class HFBackend:
    """`GenerationBackend` over an in-process transformers causal LM (see module docstring).

    Args:
        model: a causal LM (the same object is updated by `update_weights`; a grouped-query
            SDPA model is switched to `packed_decode_sdpa`, decode_attention.py).
        tokenizer: its tokenizer (decoding, pad id, EOS id).
        max_num_seqs: the largest micro-batch; None: every request waiting joins the batch
            (the batch adapts to the live requests).
        batch_wait_s: after the first request of a batch arrives, wait this long for more.
        seed: seed of the sampling generator.
        max_model_len: context length (prompt + output); None -> the model's
            `max_position_embeddings`. Longer prompts are rejected, budgets clamped.
    """

    # The rollout engine generates in waves with this backend unless rollout.deterministic
    # is false: its micro-batches are formed by arrival, so timing would change the samples.
    deterministic_by_default = True
    weight_sync = "tensors"  # takes state-dict buckets in place (registry.WEIGHT_SYNCS)

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        max_num_seqs: int | None = 64,
        batch_wait_s: float = 0.0,
        seed: int = 0,
        max_model_len: int | None = None,
        kv_cache: str = "chunked",
    ) -> None:
        if max_num_seqs is not None and max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1 or None, got {max_num_seqs}")
        if kv_cache not in KV_CACHES:
            raise ValueError(f"kv_cache must be one of {', '.join(KV_CACHES)}, got {kv_cache!r}")
        self.kv_cache = kv_cache
        self.model = model
        # grouped-query SDPA models decode without repeated keys/values (decode_attention.py)
        self.packed_decode_attention = use_packed_decode_attention(model)
        self.tokenizer = tokenizer
        self.max_num_seqs = max_num_seqs if max_num_seqs is not None else sys.maxsize
        self.batch_wait_s = batch_wait_s
        self.device = next(model.parameters()).device
        self.context_length = max_model_len or model.config.max_position_embeddings
        self.vocab_size = model.get_input_embeddings().weight.shape[0]
        self.eos_token_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else min(self.eos_token_ids, default=0)
        self.weight_version = "0"  # "1", "2", ... after each update unless one is given
        self._num_updates = 0
        self.stats = BatchStats()
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        # transformers 5.x names the KV-cache argument `cache` (`past_key_values` is
        # deprecated there); older releases only know `past_key_values`.
        forward_args = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward_args else "past_key_values"
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="hf-backend")
        self._requests: dict[str, _Request] = {}  # queued or running
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_cpu_copy = False  # release_memory moved the weights to the CPU
        self.cpu_threads = CPUThreads()  # the generation thread's, following the free cores

    @classmethod
    def from_pretrained(
        cls,
        model_path: str | os.PathLike,
        tokenizer: Any = None,
        *,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        trust_remote_code: bool = False,
        **kwargs: Any,
    ) -> HFBackend:
        """Load a model directory. `device` None -> cuda if available else cpu; `dtype` None
        -> fp32 on CPU, bf16 on GPU."""
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = _torch_dtype(dtype, device)
        model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=dtype, trust_remote_code=trust_remote_code
        ).to(device)
        model.eval()
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(
                model_path, trust_remote_code=trust_remote_code
            )
        return cls(model, tokenizer, **kwargs)

    # ---------------------------------------------------------------- protocol

    async def generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> GenerationOutput:
        """Generate for one request; waits in the queue until a micro-batch takes it."""
        prompt, params, max_new = self._check_request(input_ids, sampling_params, request_id)
        loop = asyncio.get_running_loop()
        request = _Request(request_id, prompt, params, max_new, loop.create_future(), loop)
        self._requests[request_id] = request
        try:
            if max_new == 0:
                self._finish(request, {"type": "length", "length": 0})
            else:
                self._ensure_worker().put_nowait(request)
            return await request.future
        except asyncio.CancelledError:
            request.aborted = True  # the caller gave up: stop spending compute on it
            raise
        finally:
            self._requests.pop(request_id, None)

    async def prompt_log_probs(self, input_ids: list[int]) -> list[float]:
        """``log p(input_ids[t] | input_ids[:t])`` for every t >= 1, at temperature 1 (what
        SGLang returns as ``input_token_logprobs``): one forward pass, on the engine's
        thread between its batches."""
        log_probs, _ = await self.score_prompt(input_ids)
        return log_probs

    async def score_prompt(self, input_ids: list[int], top_k: int = 0
                           ) -> tuple[list[float], list[dict[int, float]] | None]:  # fmt: skip
        """`prompt_log_probs` and, ``top_k`` > 0, each position's top-k ({id: log-prob};
        SGLang's ``input_top_logprobs``); None without."""
        ids = [int(t) for t in input_ids]
        if len(ids) < 2:
            return [], [] if top_k > 0 else None
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self._score_prompt, ids, top_k)

    def _score_prompt(self, ids: list[int], top_k: int
                      ) -> tuple[list[float], list[dict[int, float]] | None]:  # fmt: skip
        tokens = torch.tensor([ids], device=self.device)
        with torch.no_grad():
            logits = self.model(input_ids=tokens).logits[0, :-1].float()  # (T - 1, V)
        log_probs = torch.log_softmax(logits, dim=-1)
        picked = log_probs.gather(-1, tokens[0, 1:, None]).squeeze(-1).tolist()
        if top_k <= 0:
            return picked, None
        values, indices = log_probs.topk(min(top_k, log_probs.shape[-1]), dim=-1)  # (T - 1, k)
        top = [dict(zip(i, v, strict=True))
               for i, v in zip(indices.tolist(), values.tolist(), strict=True)]  # fmt: skip
        return picked, top

    def canary_servers(self) -> list[str]:
        """What a canary scores (agentrl/workers/canary.py): this one engine."""
        return [IN_PROCESS]

    async def score_on(self, server: str, input_ids: list[int], top_k: int = 0,
                       request_id: str = "") -> tuple[list[float], list[dict[int, float]] | None]:
        """`score_prompt` (``server`` is `IN_PROCESS`, the only one; ``request_id`` unused)."""
        return await self.score_prompt(input_ids, top_k)

    async def abort(self, request_id: str) -> None:
        """Abort a queued or running request: it returns what it has with finish "abort".
        An unknown (or finished) id is ignored, as in SGLang."""
        request = self._requests.get(request_id)
        if request is not None:
            request.aborted = True

    async def abort_all(self) -> None:
        for request in list(self._requests.values()):
            request.aborted = True

    @property
    def num_running(self) -> int:
        """Requests queued or being generated."""
        return len(self._requests)

    async def update_weights(
        self,
        source: Mapping[str, torch.Tensor] | str | os.PathLike,
        weight_version: str | None = None,
    ) -> None:
        """Copy new weights into the model's tensors in place (same model object).

        `source` is a state dict (name -> tensor; a subset updates only those tensors) or an
        HF model directory (safetensors or pytorch_model*.bin; must cover every weight).
        Runs on the generation thread between micro-batches, so no batch sees a mix.
        """
        loop = asyncio.get_running_loop()
        if isinstance(source, Mapping):
            await loop.run_in_executor(
                self._executor, load_weights_in_place, self.model, source, False
            )
        else:
            await loop.run_in_executor(self._executor, load_dir_in_place, self.model, Path(source))
        self._num_updates += 1
        self.weight_version = weight_version or str(self._num_updates)
        logger.debug(  # the hybrid worker sends buckets and logs the whole sync once
            "hf backend: weights updated from %s (version %s)",
            "a state dict" if isinstance(source, Mapping) else source,
            self.weight_version,
        )

    async def verify_weights(self, source: Mapping[str, torch.Tensor]) -> int:
        """Check that the model holds every tensor of ``source`` (a state dict or bucket it
        was sent) exactly; returns 1 (this engine verified) or raises
        ``WeightMismatchError`` naming the first tensor that differs."""
        held = self.model.state_dict()
        for name, expected in source.items():
            tensor = held.get(name)
            if tensor is None:
                raise WeightMismatchError(IN_PROCESS, name, "the model has no such tensor")
            if not torch.equal(tensor.cpu(), expected.to(tensor.dtype).cpu()):
                raise WeightMismatchError(IN_PROCESS, name)
        return 1

    async def release_memory(self) -> None:
        """On CUDA, move the weights to the CPU and free the cache (colocated training).
        On CPU there is nothing to release: a no-op. Do not generate until resumed."""
        if self.device.type == "cuda":
            await asyncio.get_running_loop().run_in_executor(self._executor, self._to, "cpu")
            self._on_cpu_copy = True

    async def resume_memory(self) -> None:
        """Move the weights back to the GPU after `release_memory` (a no-op on CPU)."""
        if self._on_cpu_copy:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._to, self.device)
            self._on_cpu_copy = False

    async def aclose(self) -> None:
        """Stop the worker task and thread; pending requests fail with BackendError."""
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
        for request in list(self._requests.values()):
            request.aborted = True  # a running batch ends at its next step
            if not request.future.done():
                request.future.set_exception(BackendError("hf backend closed"))
        self._executor.shutdown(wait=True)

    # ---------------------------------------------------------------- event-loop side

    def _check_request(
        self, input_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> tuple[list[int], SamplingParams, int]:
        try:
            params = SamplingParams.from_dict(sampling_params)
            prompt = [operator.index(t) for t in input_ids]
        except (ValueError, TypeError) as err:
            raise BackendError(f"request {request_id}: {err}") from err
        if not prompt:
            raise BackendError(f"request {request_id}: input_ids is empty")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise BackendError(
                f"request {request_id}: token ids out of the vocabulary "
                f"[0, {self.vocab_size}): {bad[:5]}"
            )
        if len(prompt) >= self.context_length:
            raise BackendError(
                f"request {request_id}: prompt of {len(prompt)} tokens does not "
                f"fit the context length {self.context_length}"
            )
        if request_id in self._requests:
            raise BackendError(f"duplicate request id {request_id!r} (one is still running)")
        return prompt, params, min(params.max_new_tokens, self.context_length - len(prompt))

    def _ensure_worker(self) -> asyncio.Queue[_Request]:
        """The queue of this event loop, with its worker task (a new loop gets new ones)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop, self._queue = loop, asyncio.Queue()
            self._worker = loop.create_task(self._work(), name="hf-backend-worker")
        return self._queue

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            if self.batch_wait_s > 0 and self._queue.qsize() < self.max_num_seqs - 1:
                await asyncio.sleep(self.batch_wait_s)
            while len(batch) < self.max_num_seqs and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for request in [r for r in batch if r.aborted]:
                self._finish(request, _abort_reason())
            batch = [r for r in batch if not r.aborted]
            if not batch:
                continue
            try:
                await loop.run_in_executor(self._executor, self._run_batch, batch)
            except Exception as err:  # a model error fails this batch, not the engine
                logger.exception("hf backend: micro-batch of %d failed", len(batch))
                for request in batch:
                    _resolve(request.future, BackendError(f"generation failed: {err!r}"))

    # ---------------------------------------------------------------- worker thread

    @torch.no_grad()
    def _run_batch(self, batch: list[_Request]) -> None:
        """Prefill the batch, then decode until every request has finished."""
        self.stats.num_batches += 1
        self.stats.batch_sizes.append(len(batch))
        ids, mask = self._left_pad([r.prompt for r in batch])  # (B, P)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, P)
        cache = make_kv_cache(self.model.config, self.kv_cache)
        self.cpu_threads.tick()
        logits = self._forward(ids, mask, positions, cache)  # (B, V)
        active, sampler = batch, RowSampler([r.params for r in batch], self.device)
        while True:
            self.cpu_threads.tick()  # another program may have taken a core meanwhile
            tokens, log_probs = sampler.sample(logits, self._generator)  # (B,), (B,)
            # one device-to-host copy per step, not two per row (each a GPU sync)
            token_list, log_prob_list = tokens.tolist(), log_probs.tolist()
            keep = [
                j
                for j, request in enumerate(active)
                if not self._step(request, token_list[j], log_prob_list[j])
            ]
            if not keep:
                return
            if len(keep) < len(active):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, positions, tokens = mask[index], positions[index], tokens[index]
                active, sampler = [active[j] for j in keep], sampler.select(keep)
            mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)  # (B, T + 1)
            positions = positions[:, -1:] + 1  # (B, 1)
            logits = self._forward(tokens[:, None], mask, positions, cache)
            self.stats.decode_steps += 1

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: DynamicCache
    ) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            **{self._cache_kwarg: cache},
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1].float()  # (B, V)

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.tensor(prompt)
            mask[i, width - len(prompt) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _step(self, request: _Request, token: int, log_prob: float) -> bool:
        """Append one sampled token; finish the request when it is done. True = finished."""
        if request.aborted:
            self._finish(request, _abort_reason())
            return True
        request.output_ids.append(token)
        request.log_probs.append(log_prob)
        self.stats.generated_tokens += 1
        params = request.params
        if token in params.stop_token_ids or (
            token in self.eos_token_ids and not params.ignore_eos
        ):
            self._finish(request, {"type": "stop", "matched": token})
        elif params.stop and (matched := self._matched_stop_string(request)) is not None:
            self._finish(request, {"type": "stop", "matched": matched})
        elif len(request.output_ids) >= request.max_new_tokens:
            self._finish(request, {"type": "length", "length": len(request.output_ids)})
        else:
            return False
        return True

    def _matched_stop_string(self, request: _Request) -> str | None:
        # A stop string that ends in the newest token lies within its last len(stop) tokens.
        longest = max(len(s) for s in request.params.stop)
        tail = self.tokenizer.decode(request.output_ids[-longest - 1 :])
        return next((s for s in request.params.stop if s in tail), None)

    def _finish(self, request: _Request, reason: dict[str, Any]) -> None:
        """Build the SGLang-shaped output and hand it to the request's event loop."""
        params, matched = request.params, reason.get("matched")
        text_ids = request.output_ids
        if isinstance(matched, int) and not params.no_stop_trim:
            text_ids = text_ids[:-1]
        text = self.tokenizer.decode(text_ids, skip_special_tokens=params.skip_special_tokens)
        if isinstance(matched, str) and not params.no_stop_trim and matched in text:
            text = text[: text.index(matched)]
        meta = {
            "id": request.request_id,
            "finish_reason": reason,
            "prompt_tokens": len(request.prompt),
            "completion_tokens": len(request.output_ids),
            "cached_tokens": 0,
            "weight_version": self.weight_version,
            "e2e_latency": time.perf_counter() - request.submitted,
        }
        output = GenerationOutput(
            list(request.output_ids), text, reason["type"], list(request.log_probs), meta
        )
        request.loop.call_soon_threadsafe(_resolve, request.future, output)

    def _to(self, device: str | torch.device) -> None:
        self.model.to(device)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


_DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}


def _torch_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    """fp32 on CPU (bf16 matmuls are slow there and change log-probs); else the asked dtype,
    bf16 by default."""
    if str(device).startswith("cpu"):
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.bfloat16
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def _eos_ids(model: torch.nn.Module, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    generation_config = getattr(model, "generation_config", None)
    eos = getattr(generation_config, "eos_token_id", None)
    ids.update([eos] if isinstance(eos, int) else (eos or []))
    if not ids and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)


def _abort_reason() -> dict[str, Any]:
    return {"type": "abort", "message": "Abort in waiting queue or running", "status_code": 200}


def _resolve(future: asyncio.Future, result: Any) -> None:
    if future.done():  # cancelled by the caller meanwhile
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


@BACKEND_PLUGINS.register("hf")
class HFPlugin(BackendPlugin):
    """``rollout.name: hf``: the embedded engine in this process (``HFBackend``; with
    ``model`` it generates with that very module, the trainer's, colocated), or, with
    ``server_urls``, clients of ``agentrl serve`` servers of it (SGLang's API: the off-policy
    modes launch those with ``launcher``)."""

    name = "hf"

    def config_problems(self, rollout: Mapping[str, Any]) -> list[str]:
        kwargs = dict(rollout.get("engine_kwargs") or {})
        problems = []
        unknown = unknown_hf_engine_kwargs(kwargs)
        if unknown:
            problems.append(f"actor_rollout_ref.rollout.engine_kwargs has {', '.join(unknown)}: "
                            f"not keys of the hf engine (those are "
                            f"{', '.join(HF_ENGINE_KWARGS)})")
        kv_cache = kwargs.get("kv_cache", "chunked")
        if kv_cache not in KV_CACHES:
            problems.append(f"actor_rollout_ref.rollout.engine_kwargs.kv_cache is {kv_cache!r}; "
                            f"choose one of {', '.join(KV_CACHES)}")
        return problems

    def create(self, rollout: Mapping[str, Any], model_path: str | None, tokenizer: Any, *,
               model: Any = None, seed: int | None = None, gpus: Any = None) -> Any:  # fmt: skip
        if rollout.get("server_urls"):
            return self.client(rollout, rollout["server_urls"], tokenizer)
        kwargs = dict(rollout["engine_kwargs"] or {})
        if seed is not None:
            kwargs.setdefault("seed", seed)
        options = {"max_num_seqs": rollout["max_num_seqs"],
                   "max_model_len": rollout["max_model_len"]}
        device = kwargs.pop("device", None)
        if model is not None:
            return HFBackend(model, tokenizer, **options, **kwargs)
        if not model_path:
            raise ValueError("the hf backend needs actor_rollout_ref.model.path (or a model)")
        return HFBackend.from_pretrained(model_path, tokenizer, device=device,
                                         dtype=rollout["dtype"], **options, **kwargs)

    def client(self, rollout: Mapping[str, Any], urls: Any, tokenizer: Any,
               **kwargs: Any) -> Any:  # fmt: skip
        from agentrl.rollout.backends.sglang import sglang_client

        return sglang_client(rollout, urls, tokenizer, **kwargs)  # agentrl serve: SGLang's API

    def launcher(self, rollout: Mapping[str, Any], model_path: str, *, seed: int | None = None,
                 trust_remote_code: bool = False, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", gpus: Any = None) -> Any:  # fmt: skip
        """``agentrl serve`` servers of the policy (its engine keys as the server's flags)."""
        from agentrl.rollout.backends.launcher import ServerLauncher

        problems = self.config_problems(rollout)
        if problems:
            raise ValueError("; ".join(problems))
        kwargs = dict(rollout["engine_kwargs"] or {})
        wait = kwargs.get("batch_wait_s")
        server_args = {
            "max_num_seqs": rollout["max_num_seqs"] or SERVE_MAX_NUM_SEQS,
            "seed": kwargs.get("seed", seed),
            "device": kwargs.get("device"),
            "dtype": rollout["dtype"] if torch.cuda.is_available() else None,
            "context_length": rollout["max_model_len"],
            "batch_wait_ms": None if wait is None else float(wait) * 1000,
            "kv_cache": kwargs.get("kv_cache"),
            "trust_remote_code": trust_remote_code,
        }
        python = rollout.get("server_python") or sys.executable
        return ServerLauncher(model_path, int(rollout["num_servers"] or 1),
                              command=(python, "-m", "agentrl.rollout.backends.serve_cli"),
                              server_args=server_args, ready_timeout=rollout["launch_timeout"],
                              env=env, host=host)  # fmt: skip


__all__ = ["BatchStats", "HFBackend", "HFPlugin", "SamplingParams", "load_weights_in_place", "read_weights_dir"]
