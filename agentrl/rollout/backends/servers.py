"""`ServerBackend`: the client of one or several inference servers over HTTP, whatever the
engine; a `ServerAPI` speaks the engine's routes (SGLang's in sglang.py, vLLM's in vllm.py).

    backend = SGLangBackend(["http://10.0.0.1:30000", "http://10.0.0.2:30000"])
    await backend.wait_until_ready(timeout=600)
    out = await backend.generate(ids, {"max_new_tokens": 512, "temperature": 1.0}, "s42-t0")
    await backend.update_weights("/ckpt/step10")          # every server loads the directory
    await backend.verify_weights("/ckpt/step10")          # ... and shows it holds it
    await backend.aclose()

Data plane: one generation is one `POST` of the engine's generate route with the token ids,
SGLang-named `sampling_params` (the `ServerAPI` translates them), log-probs requested, and
the request id; the reply becomes a `GenerationOutput` (whose `meta_info["server_url"]`
names the server that answered).

Routing and failover (agentrl/rollout/backends/routing.py): a trajectory's first call goes to
the live server of `server_urls` with the fewest calls in flight (`least_loaded`) or the next
in turn (`round_robin`); its later turns stay on that server while it is alive (prefix-cache
reuse). One URL may be a router. A call whose server fails (connection refused or reset, or
no answer within `request_timeout`) marks that server dead, with a warning naming it, and is
resent whole to another live server: a generation answers all at once, so a failed call
leaves nothing behind and the output that is returned, and trained, is generated exactly
once. The trajectory moves with it. A dead server is probed again after `server_cooldown_s`
(the health route, and the version route when a weight update skipped it: it rejoins only
with the current weights, after loading the last directory if it must), and at each weight
update (`update_weights`, a client that never generates included); when no server is
live every dead one is probed at once, then `BackendError` names each URL and why it is
down. A client that does not sync (the off-policy producer's) learns each sync's version
from `expect_version` and takes a server back only reporting it. `metrics()` counts the resent calls and the lost, revived and skipped servers.

Control plane: `abort`, `update_weights`, `verify_weights`, `release_memory`,
`resume_memory`, `flush_cache` and `wait_until_ready` go to every URL of `control_urls`
(default: `server_urls`; list the workers there when `server_urls` is a router). A control
server that is dead or cannot be reached is skipped with a warning while another one
answers. `update_weights` then checks the version every server it reached reports (when the
engine reports one) and raises if one reports another version.

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
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from agentrl.rollout.backends.base import LOAD_BALANCE, BackendError, GenerationOutput
from agentrl.rollout.backends.routing import ServerPool, session_key
from agentrl.utils.http import HTTPCallError, JSONClient, RetryPolicy

logger = logging.getLogger(__name__)

_QUICK_TIMEOUT = 30.0  # seconds for abort calls and health polls
_MIN_PROBE_GAP = 1.0  # seconds between probes of one dead server when none is live
SERVER_FAILURES = ("connection", "timeout")  # HTTPCallError kinds that mark a server dead

Post = Callable[[str, str, Any], Awaitable[None]]  # (url, route, body): a control call
Request = Callable[[str, str, Any], Awaitable[Any]]  # (method, full URL, body) -> reply


class ServerAPI:
    """What differs between engines' HTTP servers; one subclass per engine (sglang.py,
    vllm.py). Routes are paths on a server's base URL."""

    generate_path = "/generate"
    health_path = "/health"
    version_path = "/get_weight_version"
    flush_path = "/flush_cache"
    model_info_path = "/get_model_info"

    def generate_payload(self, input_ids: list[int], sampling_params: Mapping[str, Any],
                         request_id: str, return_logprob: bool) -> dict[str, Any]:  # fmt: skip
        """The body of one generation (`sampling_params` in SGLang's names)."""
        raise NotImplementedError

    def parse_generate(self, body: Any, tokenizer: Any) -> GenerationOutput:
        """A `GenerationOutput` from the reply (KeyError/ValueError when malformed)."""
        raise NotImplementedError

    def prompt_log_probs_payload(self, input_ids: list[int], request_id: str,
                                 top_k: int = 0) -> dict[str, Any]:  # fmt: skip
        """The body of a call scoring `input_ids` (and, `top_k` > 0, asking each position's
        top-k where the engine gives it)."""
        raise NotImplementedError(f"{type(self).__name__} does not score prompts")

    def parse_prompt_log_probs(self, body: Any) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} does not score prompts")

    def parse_prompt_top_log_probs(self, body: Any, top_k: int) -> list[dict[int, float]] | None:
        """Each scored position's top-k ({token id: log-prob}) in the reply; None when the
        engine gave none."""
        return None

    def abort_call(self, request_id: str | None) -> tuple[str, dict[str, Any]]:
        """(route, body) aborting `request_id`, or every request for None."""
        raise NotImplementedError

    def parse_version(self, body: Any) -> str | None:
        """The weight version in the version route's reply; None when it says none."""
        version = body.get("weight_version") if isinstance(body, dict) else None
        return None if version is None else str(version)

    async def load_directory(self, post: Post, url: str, path: str, version: str | None,
                             flush_cache: bool) -> None:  # fmt: skip
        """Have the server at `url` load the Hugging Face directory `path` (and report
        `version` after)."""
        raise NotImplementedError

    def load_tensors(self, state_dict: Mapping[str, Any], bucket_bytes: int,
                     version: str | None, flush_cache: bool
                     ) -> Iterable[tuple[str, dict[str, Any]]]:  # fmt: skip
        """(route, body) calls that load `state_dict` in place."""
        raise ValueError(f"{type(self).__name__} takes weights from a directory only")

    async def verify_server(self, request: Request, url: str, directory: str,
                            dtype: Any) -> None:  # fmt: skip
        """Raise `WeightMismatchError` unless the server at `url` holds the weights of
        `directory` (cast to `dtype` when not None)."""
        raise NotImplementedError

    def release_call(self, tags: list[str] | None) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def resume_call(self, tags: list[str] | None) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError


class ServerBackend:
    """`GenerationBackend` over one or several inference servers (see module docstring);
    `api` (a `ServerAPI`) speaks the engine's routes: SGLang's, vLLM's.

    `weight_sync` is ``disk``: the trainer writes a Hugging Face directory and passes its path
    to `update_weights`; `verify_weights(path)` then has every live control server show that
    it holds those weights (`ServerAPI.verify_server`).

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
        weights_dtype: the torch dtype name the servers hold weights in ("bfloat16");
            None: the dtype the weights were written in (fp32 on CPU).
    """

    weight_sync = "disk"  # takes a Hugging Face directory (registry.WEIGHT_SYNCS)

    def __init__(
        self,
        server_urls: Sequence[str] | str,
        *,
        api: ServerAPI,
        control_urls: Sequence[str] | None = None,
        request_timeout: float = 600.0,
        max_retries: int = RetryPolicy.max_retries,
        generate_retries: int = 0,
        load_balance: str = LOAD_BALANCE[0],
        return_logprob: bool = True,
        tokenizer: Any = None,
        backoff: float = RetryPolicy.backoff,
        backoff_max: float = RetryPolicy.backoff_max,
        max_concurrent: int = 1024,
        update_weights_bucket_megabytes: float = 512,
        server_cooldown_s: float = 30.0,
        on_close: Callable[[], Any] | None = None,
        weights_dtype: str | None = None,
    ) -> None:
        urls = [server_urls] if isinstance(server_urls, str) else list(server_urls)
        if not urls:
            raise ValueError(f"{type(self).__name__} needs at least one server URL")
        if load_balance not in LOAD_BALANCE:
            raise ValueError(f"load_balance must be one of {LOAD_BALANCE}, got {load_balance!r}")
        if max_retries < 0 or generate_retries < 0:
            raise ValueError(f"max_retries and generate_retries must be >= 0, got "
                             f"{max_retries} and {generate_retries}")
        if server_cooldown_s < 0:
            raise ValueError(f"server_cooldown_s must be >= 0, got {server_cooldown_s}")
        self.api = api
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
        self._calls: dict[str, set[asyncio.Task]] = {u: set() for u in self.server_urls}
        self._background: set[asyncio.Task] = set()
        self._probes: dict[str, asyncio.Task] = {}  # url -> its probe in progress
        self._on_close = on_close
        self.weights_dtype = weights_dtype  # what the servers compute in (None: as written)

    # ---------------------------------------------------------------- data plane

    async def generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> GenerationOutput:
        """`POST generate_path` for one request on its trajectory's server (see the module
        docstring: routing and failover)."""
        payload = self.api.generate_payload(input_ids, sampling_params, request_id,
                                            self.return_logprob)  # fmt: skip
        body, url = await self._generate_call(payload, request_id, session_key(request_id))
        try:
            out = self.api.parse_generate(body, self.tokenizer)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise BackendError(f"{self.api.generate_path} {request_id}: malformed reply "
                               f"({err!r}): {str(body)[:300]}") from err
        out.meta_info["server_url"] = url
        return out

    async def prompt_log_probs(self, input_ids: list[int], request_id: str) -> list[float]:
        """``log p(input_ids[t] | input_ids[:t])`` for t >= 1, from the least loaded live
        server (what an on-policy distillation teacher answers; `ServerAPI`'s
        `prompt_log_probs_payload` and `parse_prompt_log_probs`)."""
        payload = self.api.prompt_log_probs_payload(input_ids, request_id)
        body, _ = await self._generate_call(payload, request_id, None)
        try:
            log_probs = self.api.parse_prompt_log_probs(body)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise BackendError(f"{self.api.generate_path} {request_id}: no input log-probs "
                               f"({err!r}): {str(body)[:300]}") from err
        if len(log_probs) != len(input_ids) - 1:
            raise BackendError(f"{self.api.generate_path} {request_id}: {len(log_probs)} input "
                               f"log-probs for {len(input_ids)} tokens")
        return log_probs

    async def abort(self, request_id: str) -> None:
        """Abort `request_id` on its server (all live servers if unknown). Failures are
        logged, not raised: an abort is best effort."""
        url = self._rid_url.get(request_id)
        urls = [url] if url else self.pool.live(self._all_urls())
        await asyncio.gather(*(self._abort_on(u, request_id) for u in urls))

    async def abort_all(self) -> None:
        await asyncio.gather(*(self._abort_on(u, None) for u in self.pool.live(self._all_urls())))

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
        """Load new weights on every live control server: a directory path
        (`ServerAPI.load_directory`), or a state dict (`ServerAPI.load_tensors`: SGLang's
        CUDA IPC handles, colocated only). A dead server is skipped (it must report
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
            path = self._weights_path
            await self._on_control_servers(
                "weight update", lambda url: self.api.load_directory(
                    self._post_control, url, path, weight_version, flush_cache), True)  # fmt: skip
        else:
            for path, body in self.api.load_tensors(source, self.bucket_bytes, weight_version,
                                                    flush_cache):  # fmt: skip
                await self._control(path, body, update=True)
        await self._probe_returning(self.control_urls,
                                    max(self.server_cooldown_s, _MIN_PROBE_GAP))
        if weight_version is not None:
            await self._check_versions(weight_version)

    async def expect_version(self, weight_version: str) -> None:
        """The servers now hold `weight_version`, loaded by another client (the off-policy
        producer's client learns each sync's version; the workers' client synced and
        verified them). A live server that does not answer its health route, or reports
        another version (it restarted since the sync reached it), is left out; every dead
        server is probed now and rejoins only if it reports `weight_version` (`_probe`:
        this client has no directory to load)."""
        self.weight_version = weight_version
        urls = self.pool.live(self.server_urls)
        healthy = await asyncio.gather(*(self._healthy(u) for u in urls))
        reported = await asyncio.gather(*(self._reported_version(u) for u in urls))
        for url, ok, version in zip(urls, healthy, reported, strict=True):
            if not ok:
                self.pool.mark_dead(url, "does not answer its health route")
            elif version is not None and version != weight_version:
                self.pool.mark_dead(url, f"reports weight version {version}, not "
                                         f"{weight_version}")  # fmt: skip
        for url in self.server_urls:
            if not self.pool.alive(url):
                self.pool.skipped_update(url)
        await self._probe_returning(self.server_urls, 0.0)

    async def _probe_returning(self, urls: list[str], interval: float) -> None:
        """Probe those of `urls` that are dead and not probed for `interval` seconds, now
        (`_probe`), and wait: one that answers again catches up with the last update (loads
        its directory where this client made it) and rejoins only reporting its version.
        The workers' client of the off-policy modes never generates, so its syncs are where
        a server returns; the caller's `verify_weights` then checks it with the others."""
        probes = [self._probe(u) for u in self.pool.due_for_probe(urls, interval)]
        if probes:
            await asyncio.wait(probes)

    async def verify_weights(self, source: str | os.PathLike, probe: Any = None,
                             servers: Sequence[str] | None = None,
                             mismatches: list[Exception] | None = None) -> int:  # fmt: skip
        """Check every live control server (or those of `servers`) holds the weights of
        directory `source` (`ServerAPI.verify_server`, compared exactly after casting to
        `weights_dtype`) and, with `probe` (a `verify.Probe`), scores the probe sequence as
        the trainer does; returns the servers verified, or raises `WeightMismatchError`
        naming the server and the first tensor that differs. With a `mismatches` list, each
        server's `WeightMismatchError` is added to it instead (the canary drains those
        servers, agentrl/workers/canary.py). A server that dies during the check (a
        SERVER_FAILURES error: killed after the update reached it) is marked dead and
        skipped as the update skips one, not verified; with none left, `BackendError`."""
        import torch

        from agentrl.rollout.backends.verify import WeightMismatchError

        dtype = getattr(torch, self.weights_dtype) if self.weights_dtype else None
        urls = self.pool.live(self.control_urls if servers is None else servers)
        results = await asyncio.gather(*(self._verify_server(u, os.fspath(source), dtype, probe)
                                         for u in urls), return_exceptions=True)  # fmt: skip
        for url, result in zip(urls, results, strict=True):
            cause = getattr(result, "__cause__", None)
            if isinstance(result, WeightMismatchError) and mismatches is not None:
                mismatches.append(result)
            elif isinstance(cause, HTTPCallError) and cause.kind in SERVER_FAILURES:
                self.pool.mark_dead(url, _failure(cause))
                self.pool.skipped_update(url)  # it must prove the version to rejoin
            elif isinstance(result, BaseException):
                raise result
        if urls and not self.pool.live(urls):
            raise BackendError(f"weight check: no control server answers: "
                               f"{self.pool.describe(urls)}", retryable=True)  # fmt: skip
        return sum(r is True for r in results)

    async def _verify_server(self, url: str, source: str, dtype: Any, probe: Any) -> bool:
        """Whether `url` showed it holds the weights (False: it has no route to show them,
        logged); a mismatch raises."""
        from agentrl.rollout.backends.verify import VerificationUnavailable, WeightMismatchError

        try:
            await self.api.verify_server(self._request, url, source, dtype)
        except VerificationUnavailable as err:
            logger.warning("weights on %s not verified: %s", url, err)
            return False
        if probe is None:
            return True
        try:
            got, _ = await self.score_on(url, list(probe.input_ids), request_id="agentrl-verify")
        except BackendError as err:
            logger.warning("weights on %s not verified by the probe: it did not score it (%s)",
                           url, err)  # fmt: skip
            return False
        why = probe.mismatch(got)
        if why is not None:
            raise WeightMismatchError(url, None, why)
        return True

    # ---------------------------------------------------------------- the canary

    def canary_servers(self) -> list[str]:
        """The servers a canary scores (agentrl/workers/canary.py): every live control
        server, drained ones too (they are scored to be re-admitted)."""
        return self.pool.live(self.control_urls)

    async def score_on(self, server: str, input_ids: list[int], top_k: int = 0,
                           request_id: str = "agentrl-canary"
                           ) -> tuple[list[float], list[dict[int, float]] | None]:  # fmt: skip
        """``server``'s log-probs of ``input_ids[1:]`` (and, ``top_k`` > 0, each position's
        top-k where the engine gives it, else None): the same call `prompt_log_probs` and
        the probe make, sent to one server."""
        payload = self.api.prompt_log_probs_payload(list(input_ids), request_id, top_k)
        body = await self._request("POST", server + self.api.generate_path, payload)
        try:
            log_probs = self.api.parse_prompt_log_probs(body)
            top = self.api.parse_prompt_top_log_probs(body, top_k) if top_k > 0 else None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise BackendError(f"{server}{self.api.generate_path} {request_id}: no input "
                               f"log-probs ({err!r}): {str(body)[:300]}") from err  # fmt: skip
        if len(log_probs) != len(input_ids) - 1:
            raise BackendError(f"{server}{self.api.generate_path} {request_id}: "
                               f"{len(log_probs)} input log-probs for {len(input_ids)} tokens")
        return log_probs, top

    def drain(self, server: str, reason: str) -> bool:
        """No new calls to ``server`` (`ServerPool.drain`); its calls in flight are cancelled
        there and sent whole to another server (the failover of a dead one). False when
        ``server`` takes no generation calls here (a worker behind a router)."""
        if server not in self._calls:
            return False
        self.pool.drain(server, reason)
        for call in list(self._calls[server]):
            call.cancel()
        return True

    def readmit(self, server: str) -> None:
        """Route to drained ``server`` again."""
        if server in self._calls:
            self.pool.readmit(server)

    def drained(self) -> list[str]:
        return self.pool.drained()

    async def version_drift(self) -> dict[str, str]:
        """The live servers taking calls that report another weight version than the last
        update's (url -> the version it reports): their weights changed since."""
        if self.weight_version is None:
            return {}
        urls = [u for u in self.pool.live(self.control_urls)
                if self.pool.states[u].drained_reason is None]  # fmt: skip
        reported = await asyncio.gather(*(self._reported_version(u) for u in urls))
        return {u: v for u, v in zip(urls, reported, strict=True)
                if v is not None and v != self.weight_version}  # fmt: skip

    async def reload(self, server: str) -> None:
        """Have ``server`` load the last update's directory again (and report its version)."""
        if self._weights_path is None:
            raise BackendError(f"cannot reload {server}: the last update was not a directory")
        await self.api.load_directory(self._post_control, server, self._weights_path,
                                      self.weight_version, True)  # fmt: skip
        if self.weight_version is not None:
            version = await self._reported_version(server)
            if version is not None and version != self.weight_version:
                raise BackendError(f"{server} reports weight version {version} after a reload "
                                   f"of {self.weight_version}")

    async def release_memory(self, tags: list[str] | None = None) -> None:
        """Give the servers' memory back (SGLang: `/release_memory_occupation`, needs
        --enable-memory-saver; vLLM: `/sleep`); tags None = all."""
        path, body = self.api.release_call(tags)
        await self._control(path, body)

    async def resume_memory(self, tags: list[str] | None = None) -> None:
        """The inverse of `release_memory`."""
        path, body = self.api.resume_call(tags)
        await self._control(path, body)

    async def flush_cache(self, timeout: float = 60.0, poll_interval: float = 1.0) -> None:
        """`/flush_cache` on every live control server; SGLang answers 400 while requests
        run, so that is polled until `timeout`."""

        async def flush(url: str) -> None:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                try:
                    await self._request("POST", url + self.api.flush_path)
                    return
                except BackendError as err:
                    refused = getattr(err.__cause__, "status_code", None) == 400
                    if not refused or asyncio.get_running_loop().time() > deadline:
                        raise
                await asyncio.sleep(poll_interval)

        await self._on_control_servers(self.api.flush_path, flush)

    async def wait_until_ready(self, timeout: float = 600.0, poll_interval: float = 2.0) -> None:
        """Poll `GET health_path` on every URL until it answers 200 (BackendError at
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
        """`GET model_info_path` of one server (the first live control URL by default)."""
        url = url or next(iter(self.pool.live(self.control_urls)), self.control_urls[0])
        return await self._request("GET", url + self.api.model_info_path)

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
        """`POST generate_path` on the server `key` routes to: (reply, its URL). A server that
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
                logger.warning("%s %s: resending it to %s (%s failed)", self.api.generate_path,
                               request_id, url, tried[-1])  # fmt: skip
            tried.append(url)
            self.in_flight[url] += 1
            self._rid_url[request_id] = url
            post = asyncio.ensure_future(self._gen.post_json(url + self.api.generate_path,
                                                             payload))  # fmt: skip
            self._calls[url].add(post)
            try:
                body, _ = await post
                return body, url
            except asyncio.CancelledError:
                self._abort_in_background(url, request_id)
                if not (post.cancelled() and self.pool.states[url].drained_reason is not None
                        and asyncio.current_task().cancelling() == 0):  # fmt: skip
                    raise
                # its server was drained (`drain`): the call is sent whole to another one
                error = HTTPCallError("drained", f"{url} was drained (its canary diverged)")
            except HTTPCallError as err:
                if err.kind == "timeout":  # the server may still be generating: stop it
                    self._abort_in_background(url, request_id)
                if err.kind not in SERVER_FAILURES:
                    raise BackendError(f"{self.api.generate_path} {request_id}: {err}",
                                       retryable=err.retryable) from err  # fmt: skip
                self.pool.mark_dead(url, _failure(err))
                error = err
            finally:
                self._calls[url].discard(post)
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
            return BackendError(f"{self.api.generate_path} {request_id}: {down}", retryable=True)
        message = (f"{self.api.generate_path} {request_id}: {error}"
                   + (f"; and {down}" if down else ""))
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
        """Revive `url` if it answers `health_path` and, when a weight update skipped
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
            try:
                await self.api.load_directory(self._post_control, url, self._weights_path,
                                              self.weight_version, True)  # fmt: skip
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
        a version route are not checked)."""
        urls = self.pool.live(self.control_urls)
        reported = await asyncio.gather(*(self._reported_version(u) for u in urls))
        wrong = [f"{u} reports {v}" for u, v in zip(urls, reported, strict=True)
                 if v is not None and v != version]  # fmt: skip
        if wrong:
            raise BackendError(f"after the update to weight version {version}: "
                               f"{'; '.join(wrong)}")

    async def _reported_version(self, url: str) -> str | None:
        """The weight version `url` reports (`ServerAPI.version_path`) as a string; None when
        the server does not say."""
        try:
            body, _ = await self._quick.get_json(url + self.api.version_path)
        except HTTPCallError as err:
            logger.debug("%s%s: %s", url, self.api.version_path, err)
            return None
        return self.api.parse_version(body)

    async def _abort_on(self, url: str, request_id: str | None) -> None:
        """Abort `request_id` (None: every request) on `url`; failures are logged."""
        path, body = self.api.abort_call(request_id)
        try:
            await self._quick.post_json(url + path, body)
        except HTTPCallError as err:
            if err.kind != "bad_response":  # SGLang answers an abort with an empty 200
                logger.warning("abort %s on %s failed: %s", request_id or "all", url, err)

    def _abort_in_background(self, url: str, request_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._abort_on(url, request_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _healthy(self, url: str) -> bool:
        try:
            await self._quick.get_json(url + self.api.health_path)
        except HTTPCallError as err:
            return err.kind == "bad_response"  # a 200 with an empty body
        return True



def _failure(err: HTTPCallError) -> str:
    """Why a server is marked dead, for logs and errors (httpx's ReadError has no text)."""
    text = str(err).rstrip(": ")
    if err.kind == "timeout" or text.startswith("cannot connect"):
        return text
    return f"connection lost: {text}"


def _normalize(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


def client_options(rollout: Mapping[str, Any], tokenizer: Any) -> dict[str, Any]:
    """`ServerBackend`'s arguments from ``actor_rollout_ref.rollout`` (a plain dict)."""
    return {
        "control_urls": list(rollout.get("control_urls") or []) or None,
        "request_timeout": rollout["request_timeout"],
        "max_retries": rollout["max_retries"],
        "load_balance": rollout["load_balance"],
        "return_logprob": rollout["calculate_log_probs"],
        "tokenizer": tokenizer,
        "update_weights_bucket_megabytes": rollout["update_weights_bucket_megabytes"],
        "server_cooldown_s": rollout["server_cooldown_s"],
        "weights_dtype": server_dtype(rollout.get("dtype")),
    }


def server_dtype(dtype: str | None) -> str | None:
    """The dtype GPU servers hold weights in (``rollout.dtype``); None on CPU, where the
    servers keep what was written (fp32)."""
    import torch

    if not dtype or not torch.cuda.is_available():
        return None
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)


__all__ = ["SERVER_FAILURES", "ServerAPI", "ServerBackend", "client_options", "server_dtype"]
