"""The `sglang` backend: an httpx client of SGLang's native HTTP API.

    backend = SGLangBackend(["http://10.0.0.1:30000", "http://10.0.0.2:30000"])
    await backend.wait_until_ready(timeout=600)
    out = await backend.generate(ids, {"max_new_tokens": 512, "temperature": 1.0}, "s42-t0")
    await backend.update_weights("/ckpt/step10")          # every server loads the directory
    await backend.aclose()

Data plane: `POST /generate` with `input_ids`, SGLang-named `sampling_params` (with
`skip_special_tokens` false unless given, as the hf backend), `return_logprob` and `rid`; the reply's `output_ids`, `text`, `meta_info.finish_reason`
(`{"type": "stop"|"length"|"abort", ...}`) and `meta_info.output_token_logprobs`
(`[logprob, token_id, text|null]` triples) become a `GenerationOutput` (whose
`meta_info["server_url"]` names the server that answered).

Routing and failover (agentrl/rollout/backends/routing.py): a trajectory's first call goes to
the live server of `server_urls` with the fewest calls in flight (`least_loaded`) or the next
in turn (`round_robin`); its later turns stay on that server while it is alive (prefix-cache
reuse). One URL may be an sglang router. A call whose server fails (connection refused or
reset, or no answer within `request_timeout`) marks that server dead, with a warning naming
it, and is resent whole to another live server: `/generate` answers all at once, so a
failed call leaves nothing behind and the output that is returned, and trained, is
generated exactly once. The trajectory moves with it. A dead server is probed again after
`server_cooldown_s` (`/health_generate`, and `/get_weight_version` when a weight update
skipped it: it rejoins only with the current weights); when no server is live every dead
one is probed at once, then `BackendError` names each URL and why it is down.
`metrics()` counts the resent calls and the lost, revived and skipped servers.

Control plane: `abort`, `update_weights`, `release_memory`, `resume_memory`, `flush_cache`
and `wait_until_ready` go to every URL of `control_urls` (default: `server_urls`; list the
workers there when `server_urls` is a router). A control server that is dead or cannot be
reached is skipped with a warning while another one answers. `update_weights` then checks
`/get_weight_version` on every server it reached (when the server has that endpoint) and
raises if one reports another version. `update_weights(path)` uses
`/update_weights_from_disk`; `update_weights(state_dict)` uses
`/update_weights_from_tensor`, which ships CUDA IPC handles, not data: it works only when
the trainer shares the node and GPUs with a tensor-parallel-size-1 server (colocated).

Errors (the project's one HTTP policy, `agentrl.utils.http.JSONClient`): every call has a
timeout (`request_timeout`; abort and health polls at most 30 s). Connection errors, 429 and
5xx are retried up to `max_retries` times with bounded exponential backoff (on the same
server), then raise `BackendError(retryable=True)`; any other HTTP error (with the server's
reply), a timeout and a malformed reply raise `BackendError(retryable=False)` at once.
Connection failures and timeouts of a server that is not the last live one go to failover
instead (above). A cancelled or timed-out generation is aborted on its server.

The httpx clients are created lazily in the running event loop and again for a new loop
(e.g. one `asyncio.run` per training step).
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentrl.rollout.backends.base import LOAD_BALANCE, BackendError, GenerationOutput
from agentrl.rollout.backends.routing import ServerPool, session_key
from agentrl.utils.http import HTTPCallError, JSONClient, RetryPolicy

logger = logging.getLogger(__name__)

_QUICK_TIMEOUT = 30.0  # seconds for abort calls and health polls
_MIN_PROBE_GAP = 1.0  # seconds between probes of one dead server when none is live
SERVER_FAILURES = ("connection", "timeout")  # HTTPCallError kinds that mark a server dead


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
        server_cooldown_s: seconds before a server marked dead is probed again.
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
        server_cooldown_s: float = 30.0,
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
        if server_cooldown_s < 0:
            raise ValueError(f"server_cooldown_s must be >= 0, got {server_cooldown_s}")
        self.server_urls = [_normalize(u) for u in urls]
        self.control_urls = [_normalize(u) for u in (control_urls or urls)]
        self.load_balance = load_balance
        self.return_logprob = return_logprob
        self.tokenizer = tokenizer
        self.bucket_bytes = int(update_weights_bucket_megabytes * 2**20)
        self.server_cooldown_s = server_cooldown_s
        self.pool = ServerPool(self.server_urls, self.control_urls, load_balance)
        self.in_flight = self.pool.in_flight  # calls in flight per server URL
        self.weight_version: str | None = None  # of the last update_weights
        self._weights_path: str | None = None  # its directory (None: a tensor update)
        retry = RetryPolicy(max_retries=max_retries, backoff=backoff, backoff_max=backoff_max)
        self._http = JSONClient(request_timeout, max_concurrent=max_concurrent, retry=retry)
        self._gen = JSONClient(request_timeout, max_concurrent=max_concurrent,
                               retry=RetryPolicy(generate_retries, backoff, backoff_max))
        # abort and health polls: short and never retried, whatever the request timeout is
        self._quick = JSONClient(min(_QUICK_TIMEOUT, request_timeout), retry=RetryPolicy(0))
        self._rid_url: dict[str, str] = {}
        self._background: set[asyncio.Task] = set()
        self._probes: dict[str, asyncio.Task] = {}  # url -> its probe in progress
        self._on_close = on_close

    # ---------------------------------------------------------------- data plane

    async def generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> GenerationOutput:
        """`POST /generate` for one request on its trajectory's server (see the module
        docstring: routing and failover)."""
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
        body, url = await self._generate_call(payload, request_id, session_key(request_id))
        try:
            out = parse_generate_response(body, self.tokenizer)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise BackendError(
                f"/generate {request_id}: malformed reply ({err!r}): {str(body)[:300]}"
            ) from err
        out.meta_info["server_url"] = url
        return out

    async def prompt_log_probs(self, input_ids: list[int], request_id: str) -> list[float]:
        """``log p(input_ids[t] | input_ids[:t])`` for t >= 1: SGLang's input log-probs
        (``logprob_start_len: 0``, one output token that is not used), from the least
        loaded live server. What an on-policy distillation teacher answers."""
        payload = {"input_ids": [int(t) for t in input_ids],
                   "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                   "return_logprob": True, "logprob_start_len": 0, "rid": request_id,
                   "stream": False}
        body, _ = await self._generate_call(payload, request_id, None)
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
        """`POST /abort_request {"rid"}` on the request's server (all live servers if
        unknown). Failures are logged, not raised: an abort is best effort, as in SGLang."""
        url = self._rid_url.get(request_id)
        urls = [url] if url else self.pool.live(self._all_urls())
        await asyncio.gather(*(self._abort_on(u, {"rid": request_id}) for u in urls))

    async def abort_all(self) -> None:
        await asyncio.gather(*(self._abort_on(u, {"abort_all": True})
                               for u in self.pool.live(self._all_urls())))  # fmt: skip

    def metrics(self) -> dict[str, float]:
        """`rollout/server_retries`, `servers_lost`, `servers_revived` and
        `weight_sync_skipped` since the last call (read once per step), and
        `rollout/servers_alive` now."""
        return self.pool.metrics()

    # ---------------------------------------------------------------- control plane

    async def update_weights(
        self,
        source: Mapping[str, Any] | str | os.PathLike,
        weight_version: str | None = None,
        flush_cache: bool = True,
    ) -> None:
        """Load new weights on every live control server: a directory path via
        `/update_weights_from_disk`, a state dict via `/update_weights_from_tensor`
        (colocated only, see module docstring). A dead server is skipped (it must report
        `weight_version` before it rejoins); the servers reached must report it after."""
        # first, so that a server probed during the update is judged by the new version
        self.weight_version = weight_version
        self._weights_path = None if isinstance(source, Mapping) else os.fspath(source)
        for url in self.control_urls:
            if not self.pool.alive(url):
                logger.warning("weight update %s skips %s (down: %s)", weight_version, url,
                               self.pool.states[url].dead_reason)  # fmt: skip
                self.pool.skipped_update(url)
        if self._weights_path is not None:
            body = _disk_update(self._weights_path, weight_version, flush_cache)
            await self._control("/update_weights_from_disk", body, update=True)
        else:
            buckets = _buckets(list(source.items()), self.bucket_bytes)
            for i, bucket in enumerate(buckets):
                body = {
                    "serialized_named_tensors": [serialize_named_tensors(bucket)],
                    "load_format": None,
                    "abort_all_requests": False,
                    "flush_cache": flush_cache and i == len(buckets) - 1,
                    "weight_version": weight_version,
                }
                await self._control("/update_weights_from_tensor", body, update=True)
        if weight_version is not None:
            await self._check_versions(weight_version)

    async def release_memory(self, tags: list[str] | None = None) -> None:
        """`/release_memory_occupation` (needs servers started with --enable-memory-saver);
        tags None = all of weights, kv_cache, cuda_graph."""
        await self._control("/release_memory_occupation", {"tags": tags})

    async def resume_memory(self, tags: list[str] | None = None) -> None:
        """`/resume_memory_occupation`, the inverse of `release_memory`."""
        await self._control("/resume_memory_occupation", {"tags": tags})

    async def flush_cache(self, timeout: float = 60.0, poll_interval: float = 1.0) -> None:
        """`/flush_cache` on every live control server; SGLang answers 400 while requests
        run, so that is polled until `timeout`."""

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

        await self._on_control_servers("/flush_cache", flush)

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
        """`GET /get_model_info` of one server (the first live control URL by default)."""
        url = url or next(iter(self.pool.live(self.control_urls)), self.control_urls[0])
        return await self._request("GET", url + "/get_model_info")

    async def aclose(self) -> None:
        """Close the HTTP clients (and stop launched servers, if this backend owns them)."""
        loop = asyncio.get_running_loop()
        probes = [t for t in self._probes.values() if t.get_loop() is loop]
        for probe in probes:
            probe.cancel()  # a server's return does not matter any more
        pending = [t for t in self._background if t.get_loop() is loop] + probes
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self._http.aclose()
        await self._gen.aclose()
        await self._quick.aclose()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close()

    # ---------------------------------------------------------------- routing and failover

    async def _generate_call(
        self, payload: dict[str, Any], request_id: str, key: str | None
    ) -> tuple[Any, str]:
        """`POST /generate` on the server `key` routes to: (reply, its URL). A server that
        fails (SERVER_FAILURES) is marked dead and the same payload is sent to another live
        server; each server is tried at most once per call."""
        tried: list[str] = []
        error: HTTPCallError | None = None
        while True:
            url = await self._route(key, tried)
            if url is None:
                raise self._unavailable(request_id, tried, error) from error
            if error is not None:
                self.pool.count_retry()
                logger.warning("/generate %s: resending it to %s (%s failed)", request_id, url,
                               tried[-1])  # fmt: skip
            tried.append(url)
            self.in_flight[url] += 1
            self._rid_url[request_id] = url
            try:
                body, _ = await self._gen.post_json(url + "/generate", payload)
                return body, url
            except asyncio.CancelledError:
                self._abort_in_background(url, request_id)
                raise
            except HTTPCallError as err:
                if err.kind == "timeout":  # the server may still be generating: stop it
                    self._abort_in_background(url, request_id)
                if err.kind not in SERVER_FAILURES:
                    raise BackendError(f"/generate {request_id}: {err}",
                                       retryable=err.retryable) from err  # fmt: skip
                self.pool.mark_dead(url, _failure(err))
                error = err
            finally:
                self.in_flight[url] -= 1
                self._rid_url.pop(request_id, None)

    async def _route(self, key: str | None, tried: list[str]) -> str | None:
        """A live server not in `tried` for trajectory `key`. Dead servers are probed in
        the background after the cool-down; when none is live, the untried ones are
        probed now (at most once a second each) and waited for."""
        interval = max(self.server_cooldown_s, _MIN_PROBE_GAP)
        for url in self.pool.due_for_probe(self.pool.states, interval):
            self._probe(url)
        url = self.pool.pick(key, tried)
        if url is not None:
            return url
        untried = [u for u in self.server_urls if u not in tried]
        for url in self.pool.due_for_probe(untried, _MIN_PROBE_GAP):
            self._probe(url)
        loop = asyncio.get_running_loop()
        probes = [t for u, t in self._probes.items() if u in untried and t.get_loop() is loop]
        if probes:
            await asyncio.wait(probes)  # never cancels the shared probes
        return self.pool.pick(key, tried)

    def _unavailable(self, request_id: str, tried: list[str],
                     error: HTTPCallError | None) -> BackendError:  # fmt: skip
        """The error of a call no live server is left for: its own failure, if it failed,
        and every other server with the reason it is down."""
        others = [u for u in self.server_urls if u not in tried[-1:]]
        down = f"no live rollout server: {self.pool.describe(others)}" if others else ""
        if error is None:
            return BackendError(f"/generate {request_id}: {down}", retryable=True)
        message = f"/generate {request_id}: {error}" + (f"; and {down}" if down else "")
        return BackendError(message, retryable=error.retryable)

    def _probe(self, url: str) -> asyncio.Task:
        """The probe of dead `url` in progress, started if there is none."""
        task = self._probes.get(url)
        loop = asyncio.get_running_loop()
        if task is None or task.done() or task.get_loop() is not loop:
            task = loop.create_task(self._probe_once(url))
            self._probes[url] = task
            task.add_done_callback(lambda t: self._probes.pop(url, None)
                                   if self._probes.get(url) is t else None)  # fmt: skip
        return task

    async def _probe_once(self, url: str) -> None:
        """Revive `url` if it answers `/health_generate` and, when a weight update skipped
        it, holds the current weights."""
        if not await self._healthy(url):
            logger.debug("rollout server %s is still down", url)
            return
        if self.pool.states[url].missed_update and not await self._catch_up(url):
            return
        self.pool.revive(url)

    async def _catch_up(self, url: str) -> bool:
        """Whether `url`, which missed a weight update, reports the current version, after
        loading the last update's directory if it does not (what a restarted server
        needs; a tensor update cannot be sent again)."""
        version = await self._reported_version(url)
        if self.weight_version is not None and version == self.weight_version:
            return True
        if self._weights_path is not None:
            body = _disk_update(self._weights_path, self.weight_version, True)
            try:
                await self._post_control(url, "/update_weights_from_disk", body)
            except BackendError as err:
                logger.warning("rollout server %s answers again but cannot load %s: %s",
                               url, self._weights_path, err)  # fmt: skip
                return False
            version = await self._reported_version(url)
            if version is None or version == self.weight_version:
                return True
        logger.warning("rollout server %s answers again but holds weight version %s, not %s "
                       "(it missed an update): leaving it out", url, version,
                       self.weight_version)  # fmt: skip
        return False

    # ---------------------------------------------------------------- plumbing

    def _all_urls(self) -> list[str]:
        return sorted(set(self.server_urls) | set(self.control_urls))

    async def _request(self, method: str, url: str, payload: Any = None) -> Any:
        """One control call with retries; an empty or plain-text 2xx reply is None."""
        try:
            body, _ = await self._http.request_json(method, url, payload)
        except HTTPCallError as err:
            if err.kind == "bad_response":  # 2xx without JSON: SGLang's plain "OK" replies
                return None
            raise BackendError(str(err), retryable=err.retryable) from err
        return body

    async def _control(self, path: str, body: Any, update: bool = False) -> None:
        """POST `body` to every live control URL at once (see `_on_control_servers`); a
        reply `{"success": false}` raises. `update`: a weight update (a server it does
        not reach must prove the new version before it rejoins)."""
        await self._on_control_servers(path, lambda url: self._post_control(url, path, body),
                                       update)  # fmt: skip

    async def _post_control(self, url: str, path: str, body: Any) -> None:
        """One control call; a reply `{"success": false}` raises."""
        reply = await self._request("POST", url + path, body)
        if isinstance(reply, dict) and reply.get("success") is False:
            raise BackendError(f"{url}{path}: {reply.get('message', reply)}")

    async def _on_control_servers(self, path: str, call: Callable[[str], Awaitable[None]],
                                  update: bool = False) -> None:  # fmt: skip
        """`call(url)` on every live control URL at once. A server that fails
        (SERVER_FAILURES) is marked dead and skipped; any other error raises, and so does
        reaching no server at all."""
        urls = self.pool.live(self.control_urls)
        results = await asyncio.gather(*(call(u) for u in urls), return_exceptions=True)
        errors = []
        for url, result in zip(urls, results, strict=True):
            cause = getattr(result, "__cause__", None)
            if isinstance(cause, HTTPCallError) and cause.kind in SERVER_FAILURES:
                self.pool.mark_dead(url, _failure(cause))
                if update:
                    self.pool.skipped_update(url)
            elif isinstance(result, BaseException):
                errors.append(result)
        if errors:
            raise errors[0]
        if not self.pool.live(urls):
            raise BackendError(f"{path}: no control server answers: "
                               f"{self.pool.describe(self.control_urls)}", retryable=True)

    async def _check_versions(self, version: str) -> None:
        """Every live control server must report `version` (those without
        `/get_weight_version` are not checked)."""
        urls = self.pool.live(self.control_urls)
        reported = await asyncio.gather(*(self._reported_version(u) for u in urls))
        wrong = [f"{u} reports {v}" for u, v in zip(urls, reported, strict=True)
                 if v is not None and v != version]  # fmt: skip
        if wrong:
            raise BackendError(f"after the update to weight version {version}: "
                               f"{'; '.join(wrong)}")

    async def _reported_version(self, url: str) -> str | None:
        """`GET /get_weight_version` as a string; None when the server does not say."""
        try:
            body, _ = await self._quick.get_json(url + "/get_weight_version")
        except HTTPCallError as err:
            logger.debug("%s/get_weight_version: %s", url, err)
            return None
        version = body.get("weight_version") if isinstance(body, dict) else None
        return None if version is None else str(version)

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


def _disk_update(path: str, weight_version: str | None, flush_cache: bool) -> dict[str, Any]:
    """The body of `/update_weights_from_disk`."""
    return {
        "model_path": path,
        "load_format": None,
        "abort_all_requests": False,
        "weight_version": weight_version,
        "flush_cache": flush_cache,
    }


def _failure(err: HTTPCallError) -> str:
    """Why a server is marked dead, for logs and errors (httpx's ReadError has no text)."""
    text = str(err).rstrip(": ")
    if err.kind == "timeout" or text.startswith("cannot connect"):
        return text
    return f"connection lost: {text}"


def _normalize(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


__all__ = [
    "LOAD_BALANCE",
    "SGLangBackend",
    "parse_generate_response",
    "serialize_named_tensors",
]
