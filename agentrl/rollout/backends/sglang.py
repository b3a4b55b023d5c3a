"""The `sglang` backend: an httpx client of SGLang's native HTTP API.

    backend = SGLangBackend(["http://10.0.0.1:30000", "http://10.0.0.2:30000"])
    await backend.wait_until_ready(timeout=600)
    out = await backend.generate(ids, {"max_new_tokens": 512, "temperature": 1.0}, "s42-t0")
    await backend.update_weights("/ckpt/step10")          # every server loads the directory
    await backend.aclose()

Data plane: `POST /generate` with `input_ids`, SGLang-named `sampling_params` (with
`skip_special_tokens` false unless given, as the hf backend), `return_logprob` and `rid`; the reply's `output_ids`, `text`, `meta_info.finish_reason`
(`{"type": "stop"|"length"|"abort", ...}`) and `meta_info.output_token_logprobs`
(`[logprob, token_id, text|null]` triples) become a `GenerationOutput`. Each request goes
to one of `server_urls`: the one with the fewest requests in flight (`least_loaded`) or the
next in turn (`round_robin`). One URL may be an sglang router.

Control plane: `abort`, `update_weights`, `release_memory`, `resume_memory`, `flush_cache`
and `wait_until_ready` go to every URL of `control_urls` (default: `server_urls`; list the
workers there when `server_urls` is a router). `update_weights(path)` uses
`/update_weights_from_disk`; `update_weights(state_dict)` uses
`/update_weights_from_tensor`, which ships CUDA IPC handles, not data: it works only when
the trainer shares the node and GPUs with a tensor-parallel-size-1 server (colocated).

Errors (the project's one HTTP policy, `agentrl.utils.http.JSONClient`): every call has a
timeout (`request_timeout`; abort and health polls at most 30 s). Connection errors, 429 and
5xx are retried up to `max_retries` times with bounded exponential backoff, then raise
`BackendError(retryable=True)`; any other HTTP error (with the server's reply), a timeout
and a malformed reply raise `BackendError(retryable=False)` at once. A cancelled or
timed-out generation is aborted on its server.

The httpx clients are created lazily in the running event loop and again for a new loop
(e.g. one `asyncio.run` per training step).
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentrl.rollout.backends.base import LOAD_BALANCE, BackendError, GenerationOutput
from agentrl.utils.http import HTTPCallError, JSONClient, RetryPolicy

logger = logging.getLogger(__name__)

_QUICK_TIMEOUT = 30.0  # seconds for abort calls and health polls


class SGLangBackend:
    """`GenerationBackend` over one or several SGLang servers (see module docstring).

    Args:
        server_urls: base URLs of servers (or one router) that receive `/generate`.
        control_urls: URLs that receive weight, memory and flush calls; None -> server_urls.
        request_timeout: seconds per HTTP call.
        max_retries: retries of a control call (weights, memory, flush) after a connection
            error, 429 or 5xx.
        generate_retries: the same for `/generate`; 0 by default because the rollout engine
            retries generation itself (rollout.max_retries), and two layers would multiply
            the attempts. Set it when you use this backend on its own.
        load_balance: "least_loaded" or "round_robin".
        return_logprob: ask for per-token log-probs.
        tokenizer: decodes `output_ids` when a server runs with `--skip-tokenizer-init`.
        backoff, backoff_max: retry n waits min(backoff_max, backoff * 2**(n-1)) seconds.
        max_concurrent: requests in flight at once from this client.
        update_weights_bucket_megabytes: largest tensor bucket per update_weights_from_tensor.
        on_close: called by `aclose` (e.g. the launcher's `stop` when we started the servers).
    """

    def __init__(
        self,
        server_urls: Sequence[str] | str,
        *,
        control_urls: Sequence[str] | None = None,
        request_timeout: float = 600.0,
        max_retries: int = 3,
        generate_retries: int = 0,
        load_balance: str = "least_loaded",
        return_logprob: bool = True,
        tokenizer: Any = None,
        backoff: float = 0.5,
        backoff_max: float = 8.0,
        max_concurrent: int = 1024,
        update_weights_bucket_megabytes: float = 512,
        on_close: Callable[[], Any] | None = None,
    ) -> None:
        urls = [server_urls] if isinstance(server_urls, str) else list(server_urls)
        if not urls:
            raise ValueError("SGLangBackend needs at least one server URL")
        if load_balance not in LOAD_BALANCE:
            raise ValueError(f"load_balance must be one of {LOAD_BALANCE}, got {load_balance!r}")
        if max_retries < 0 or generate_retries < 0:
            raise ValueError(f"max_retries and generate_retries must be >= 0, got "
                             f"{max_retries} and {generate_retries}")
        self.server_urls = [_normalize(u) for u in urls]
        self.control_urls = [_normalize(u) for u in (control_urls or urls)]
        self.load_balance = load_balance
        self.return_logprob = return_logprob
        self.tokenizer = tokenizer
        self.bucket_bytes = int(update_weights_bucket_megabytes * 2**20)
        self.in_flight = dict.fromkeys(self.server_urls, 0)
        retry = RetryPolicy(max_retries=max_retries, backoff=backoff, backoff_max=backoff_max)
        self._http = JSONClient(request_timeout, max_concurrent=max_concurrent, retry=retry)
        self._gen = JSONClient(request_timeout, max_concurrent=max_concurrent,
                               retry=RetryPolicy(generate_retries, backoff, backoff_max))
        # abort and health polls: short and never retried, whatever the request timeout is
        self._quick = JSONClient(min(_QUICK_TIMEOUT, request_timeout), retry=RetryPolicy(0))
        self._turn = itertools.cycle(self.server_urls)
        self._rid_url: dict[str, str] = {}
        self._background: set[asyncio.Task] = set()
        self._on_close = on_close

    # ---------------------------------------------------------------- data plane

    async def generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> GenerationOutput:
        """`POST /generate` for one request on the server chosen by `load_balance`."""
        payload: dict[str, Any] = {
            "input_ids": [int(t) for t in input_ids],
            # the tool-call markup must survive in `text`: SGLang's default would strip it
            "sampling_params": {"skip_special_tokens": False, **sampling_params},
            "return_logprob": self.return_logprob,
            "rid": request_id,
            "stream": False,
        }
        if self.return_logprob:
            payload["logprob_start_len"] = -1
        url = self._pick()
        self.in_flight[url] += 1
        self._rid_url[request_id] = url
        try:
            body, _ = await self._gen.post_json(url + "/generate", payload)
        except asyncio.CancelledError:
            self._abort_in_background(url, request_id)
            raise
        except HTTPCallError as err:
            if err.kind == "timeout":  # the server may still be generating: stop it
                self._abort_in_background(url, request_id)
            raise BackendError(f"/generate {request_id}: {err}", retryable=err.retryable) from err
        finally:
            self.in_flight[url] -= 1
            self._rid_url.pop(request_id, None)
        try:
            return parse_generate_response(body, self.tokenizer)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise BackendError(
                f"/generate {request_id}: malformed reply ({err!r}): {str(body)[:300]}"
            ) from err

    async def prompt_log_probs(self, input_ids: list[int], request_id: str) -> list[float]:
        """``log p(input_ids[t] | input_ids[:t])`` for t >= 1: SGLang's input log-probs
        (``logprob_start_len: 0``, one output token that is not used), from the server
        chosen by ``load_balance``. What an on-policy distillation teacher answers."""
        payload = {"input_ids": [int(t) for t in input_ids],
                   "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                   "return_logprob": True, "logprob_start_len": 0, "rid": request_id,
                   "stream": False}
        url = self._pick()
        self.in_flight[url] += 1
        try:
            body, _ = await self._gen.post_json(url + "/generate", payload)
        except HTTPCallError as err:
            raise BackendError(f"/generate {request_id} (input log-probs): {err}",
                               retryable=err.retryable) from err
        finally:
            self.in_flight[url] -= 1
        try:
            entries = body["meta_info"]["input_token_logprobs"]
            log_probs = [float(entry[0]) for entry in entries[1:]]
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise BackendError(f"/generate {request_id}: no input log-probs ({err!r}): "
                               f"{str(body)[:300]}") from err
        if len(log_probs) != len(input_ids) - 1:
            raise BackendError(f"/generate {request_id}: {len(log_probs)} input log-probs for "
                               f"{len(input_ids)} tokens")
        return log_probs

    async def abort(self, request_id: str) -> None:
        """`POST /abort_request {"rid"}` on the request's server (all servers if unknown).
        Failures are logged, not raised: an abort is best effort, as in SGLang."""
        url = self._rid_url.get(request_id)
        urls = [url] if url else self._all_urls()
        await asyncio.gather(*(self._abort_on(u, {"rid": request_id}) for u in urls))

    async def abort_all(self) -> None:
        await asyncio.gather(*(self._abort_on(u, {"abort_all": True}) for u in self._all_urls()))

    # ---------------------------------------------------------------- control plane

    async def update_weights(
        self,
        source: Mapping[str, Any] | str | os.PathLike,
        weight_version: str | None = None,
        flush_cache: bool = True,
    ) -> None:
        """Load new weights on every control server: a directory path via
        `/update_weights_from_disk`, a state dict via `/update_weights_from_tensor`
        (colocated only, see module docstring)."""
        if not isinstance(source, Mapping):
            body = {
                "model_path": os.fspath(source),
                "load_format": None,
                "abort_all_requests": False,
                "weight_version": weight_version,
                "flush_cache": flush_cache,
            }
            await self._control("/update_weights_from_disk", body, check_success=True)
            return
        buckets = _buckets(list(source.items()), self.bucket_bytes)
        for i, bucket in enumerate(buckets):
            body = {
                "serialized_named_tensors": [serialize_named_tensors(bucket)],
                "load_format": None,
                "abort_all_requests": False,
                "flush_cache": flush_cache and i == len(buckets) - 1,
                "weight_version": weight_version,
            }
            await self._control("/update_weights_from_tensor", body, check_success=True)

    async def release_memory(self, tags: list[str] | None = None) -> None:
        """`/release_memory_occupation` (needs servers started with --enable-memory-saver);
        tags None = all of weights, kv_cache, cuda_graph."""
        await self._control("/release_memory_occupation", {"tags": tags})

    async def resume_memory(self, tags: list[str] | None = None) -> None:
        """`/resume_memory_occupation`, the inverse of `release_memory`."""
        await self._control("/resume_memory_occupation", {"tags": tags})

    async def flush_cache(self, timeout: float = 60.0, poll_interval: float = 1.0) -> None:
        """`/flush_cache` on every control server; SGLang answers 400 while requests run,
        so that is polled until `timeout`."""

        async def flush(url: str) -> None:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                try:
                    await self._request("POST", url + "/flush_cache")
                    return
                except BackendError as err:
                    refused = getattr(err.__cause__, "status_code", None) == 400
                    if not refused or asyncio.get_running_loop().time() > deadline:
                        raise
                await asyncio.sleep(poll_interval)

        await asyncio.gather(*(flush(u) for u in self.control_urls))

    async def wait_until_ready(self, timeout: float = 600.0, poll_interval: float = 2.0) -> None:
        """Poll `GET /health_generate` on every URL until it answers 200 (BackendError at
        the deadline, naming the servers that are not ready)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending = self._all_urls()
        while True:
            replies = await asyncio.gather(*(self._healthy(u) for u in pending))
            pending = [u for u, ok in zip(pending, replies, strict=True) if not ok]
            if not pending:
                return
            if loop.time() + poll_interval > deadline:
                raise BackendError(
                    f"servers not ready after {timeout:g} s: {pending}", retryable=True
                )
            await asyncio.sleep(poll_interval)

    async def get_model_info(self, url: str | None = None) -> dict[str, Any]:
        """`GET /get_model_info` of one server (the first control URL by default)."""
        return await self._request("GET", (url or self.control_urls[0]) + "/get_model_info")

    async def aclose(self) -> None:
        """Close the HTTP clients (and stop launched servers, if this backend owns them)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._http.aclose()
        await self._gen.aclose()
        await self._quick.aclose()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close()

    # ---------------------------------------------------------------- plumbing

    def _all_urls(self) -> list[str]:
        return sorted(set(self.server_urls) | set(self.control_urls))

    def _pick(self) -> str:
        if self.load_balance == "round_robin" or len(self.server_urls) == 1:
            return next(self._turn)
        least = min(self.in_flight.values())
        # rotate among the least loaded so that ties spread instead of piling on one URL
        return next(
            u
            for u in itertools.islice(self._turn, 2 * len(self.server_urls))
            if self.in_flight[u] == least
        )

    async def _request(self, method: str, url: str, payload: Any = None) -> Any:
        """One control call with retries; an empty or plain-text 2xx reply is None."""
        try:
            body, _ = await self._http.request_json(method, url, payload)
        except HTTPCallError as err:
            if err.kind == "bad_response":  # 2xx without JSON: SGLang's plain "OK" replies
                return None
            raise BackendError(str(err), retryable=err.retryable) from err
        return body

    async def _control(self, path: str, body: Any, check_success: bool = False) -> None:
        """POST `body` to every control URL at once; raise if any fails."""

        async def one(url: str) -> None:
            reply = await self._request("POST", url + path, body)
            if check_success and isinstance(reply, dict) and reply.get("success") is False:
                raise BackendError(f"{url}{path}: {reply.get('message', reply)}")

        await asyncio.gather(*(one(u) for u in self.control_urls))

    async def _abort_on(self, url: str, body: dict[str, Any]) -> None:
        try:
            await self._quick.post_json(url + "/abort_request", body)
        except HTTPCallError as err:
            if err.kind != "bad_response":  # SGLang answers an abort with an empty 200
                logger.warning("abort %s on %s failed: %s", body, url, err)

    def _abort_in_background(self, url: str, request_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._abort_on(url, {"rid": request_id}))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _healthy(self, url: str) -> bool:
        try:
            await self._quick.get_json(url + "/health_generate")
        except HTTPCallError as err:
            return err.kind == "bad_response"  # a 200 with an empty body
        return True


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


def _normalize(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


__all__ = [
    "LOAD_BALANCE",
    "SGLangBackend",
    "parse_generate_response",
    "serialize_named_tensors",
]
