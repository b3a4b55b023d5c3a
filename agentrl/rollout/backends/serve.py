"""`agentrl serve`'s HTTP app: the embedded `hf` backend behind SGLang's native API.

Request and response JSON are SGLang's (docs/backends.md lists them), so the `sglang`
client, slime- or verl-style scripts and curl talk to it as to an SGLang server:

    POST /generate                   {"input_ids" | "text", "sampling_params", "return_logprob",
                                      "rid", ...}; a list of prompts is a batch -> JSON array
    GET  /health                     200 at once (the process is up)
    GET  /health_generate            200 after a 1-token generation, else 503
    GET  /get_model_info, /model_info, /get_server_info, /server_info, /get_weight_version
    GET|POST /flush_cache            200; 400 while requests are running (as SGLang)
    POST /abort_request              {"rid"} or {"abort_all": true}
    POST /v1/chat/completions        OpenAI's chat form, text only (an LLM judge's calls)
    POST /update_weights_from_disk   {"model_path", "weight_version", "abort_all_requests"}
    GET|POST /release_memory_occupation, /resume_memory_occupation

Input log-probs (`logprob_start_len` >= 0: SGLang's `input_token_logprobs`, the first
position's None) are one extra forward pass over the prompt; a distillation teacher asks for
them. Not served: streaming, top log-probs,
`input_embeds`, and `/update_weights_from_tensor` (its payload is CUDA IPC handles; use
`/update_weights_from_disk`). Those get a 400 that says so. Errors are
`{"error": {"message": ...}}` with status 400, as SGLang's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

import agentrl
from agentrl.rollout.backends.base import BackendError, GenerationOutput
from agentrl.rollout.backends.hf import HFBackend


class BadRequest(ValueError):
    """A /generate body that is not valid; becomes a 400 with this message."""


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)


async def _json_object(request: Request) -> dict[str, Any]:
    """The request body as a dict ({} when it is empty or not a JSON object)."""
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def _all_or_cancel(coroutines: list) -> list[Any]:
    """Results in order; on the first error cancel (= abort) the rest and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


def _per_item(value: Any, n: int, name: str, batch: bool) -> list[Any]:
    """A request field as one value per prompt (a batch may give a list or one value)."""
    if batch and isinstance(value, list):
        if len(value) != n:
            raise BadRequest(f"'{name}' has {len(value)} items for {n} prompts")
        return value
    return [value] * n


def parse_generate_request(body: Any, tokenizer: Any) -> tuple[list[dict[str, Any]], bool]:
    """The prompts of a /generate body as dicts (input_ids, sampling_params, rid,
    return_logprob, return_text_in_logprobs) and whether it was a batch."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if body.get("stream"):
        raise BadRequest("streaming is not supported by agentrl serve; send stream=false")
    if body.get("input_embeds") is not None:
        raise BadRequest("input_embeds is not supported by agentrl serve")
    start = body.get("logprob_start_len", -1)
    if start is None:
        start = -1
    if isinstance(start, bool) or not isinstance(start, int) or start < -1:
        raise BadRequest("'logprob_start_len' must be -1 (output log-probs only) or a "
                         "position >= 0 from which input log-probs are returned")
    if body.get("top_logprobs_num") not in (None, 0):
        raise BadRequest("top_logprobs_num is not supported by agentrl serve")
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise BadRequest("give exactly one of 'text' or 'input_ids'")
    if text is not None:
        batch = isinstance(text, list)
        prompts = [tokenizer.encode(t) for t in (text if batch else [text])]
    else:
        if not isinstance(input_ids, list) or not input_ids:
            raise BadRequest("'input_ids' must be a non-empty list of token ids")
        batch = isinstance(input_ids[0], list)
        prompts = input_ids if batch else [input_ids]
    n = len(prompts)
    rid = body.get("rid")
    if batch and isinstance(rid, str):
        rids = [f"{rid}_{i}" for i in range(n)]
    else:
        rids = _per_item(rid, n, "rid", batch)
    rids = [r if r is not None else uuid.uuid4().hex for r in rids]
    if len(set(rids)) != n:
        raise BadRequest("'rid' values must be unique")
    sampling = _per_item(body.get("sampling_params") or {}, n, "sampling_params", batch)
    logprob = _per_item(body.get("return_logprob", False), n, "return_logprob", batch)
    with_text = bool(body.get("return_text_in_logprobs", False))
    items = [
        {
            "input_ids": p,
            "sampling_params": s or {},
            "rid": r,
            "return_logprob": bool(lp),
            "return_text_in_logprobs": with_text,
            "logprob_start_len": start if lp else -1,
        }
        for p, s, r, lp in zip(prompts, sampling, rids, logprob, strict=True)
    ]
    return items, batch


def generate_response(
    output: GenerationOutput, return_logprob: bool, tokenizer: Any, with_text: bool = False
) -> dict[str, Any]:
    """SGLang's /generate reply for one finished request."""
    meta = dict(output.meta_info)
    if return_logprob:
        texts = (
            [tokenizer.decode([t]) for t in output.output_ids]
            if with_text
            else [None] * len(output.output_ids)
        )
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [
            [lp, t, s]
            for lp, t, s in zip(output.output_log_probs, output.output_ids, texts, strict=True)
        ]
    return {"text": output.text, "output_ids": output.output_ids, "meta_info": meta}


def chat_prompt_ids(body: dict[str, Any], tokenizer: Any) -> list[int]:
    """The chat template's prompt ids of an OpenAI chat request's text ``messages``."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    plain = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str) or message.get("role") not in ("system", "user",
                                                                       "assistant"):
            raise BadRequest(f"messages[{i}] must have a role (system, user, assistant) and "
                             "text content")
        plain.append({"role": message["role"], "content": content})
    text = tokenizer.apply_chat_template(plain, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def create_app(
    backend: HFBackend,
    *,
    model_path: str,
    tokenizer_path: str | None = None,
    server_args: dict[str, Any] | None = None,
) -> FastAPI:
    """The FastAPI app serving `backend` with SGLang's endpoints (module docstring)."""
    app = FastAPI(title="agentrl serve", description=__doc__)
    info = {"model_path": model_path, "tokenizer_path": tokenizer_path or model_path}
    tokenizer = backend.tokenizer

    async def run_one(item: dict[str, Any]) -> dict[str, Any]:
        output = await backend.generate(item["input_ids"], item["sampling_params"], item["rid"])
        reply = generate_response(
            output, item["return_logprob"], tokenizer, item["return_text_in_logprobs"]
        )
        start = item["logprob_start_len"]
        if start >= 0:  # SGLang's input log-probs: [lp, id, text] from `start` (none at 0)
            ids = item["input_ids"]
            log_probs = [None, *await backend.prompt_log_probs(ids)]
            texts = ([tokenizer.decode([t]) for t in ids] if item["return_text_in_logprobs"]
                     else [None] * len(ids))  # fmt: skip
            reply["meta_info"]["input_token_logprobs"] = [
                [lp, t, x] for lp, t, x in zip(log_probs, ids, texts, strict=True)][start:]
        return reply

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        try:
            items, batch = parse_generate_request(await request.json(), tokenizer)
        except (BadRequest, ValueError, TypeError) as err:
            return _error(str(err))
        try:
            results = await _all_or_cancel([run_one(item) for item in items])
        except BackendError as err:
            return _error(str(err))
        return JSONResponse(results if batch else results[0])

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        """SGLang's OpenAI-compatible chat route, text only (no tools, no streaming): what
        an LLM judge or an evaluation script calls (docs/rewards.md, the judge)."""
        try:
            body = await request.json()
            prompt_ids = chat_prompt_ids(body, tokenizer)
        except (BadRequest, ValueError, TypeError, KeyError) as err:
            return _error(str(err))
        sampling = {"max_new_tokens": int(body.get("max_tokens") or 256),
                    "temperature": float(body.get("temperature", 1.0)),
                    "top_p": float(body.get("top_p", 1.0))}
        if tokenizer.eos_token_id is not None:
            sampling["stop_token_ids"] = [tokenizer.eos_token_id]
        try:
            output = await backend.generate(prompt_ids, sampling, f"chat-{uuid.uuid4().hex}")
        except BackendError as err:
            return _error(str(err))
        text = tokenizer.decode(output.output_ids, skip_special_tokens=True)
        finish = "length" if output.finish_reason == "length" else "stop"
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
            "created": int(time.time()), "model": info["model_path"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": len(prompt_ids),
                      "completion_tokens": len(output.output_ids),
                      "total_tokens": len(prompt_ids) + len(output.output_ids)},
        })  # fmt: skip

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate() -> Response:
        rid = f"HEALTH_CHECK_{uuid.uuid4().hex}"
        try:
            await backend.generate(
                [backend.pad_token_id], {"max_new_tokens": 1, "temperature": 0}, rid
            )
        except BackendError as err:
            return _error(f"health check generation failed: {err}", 503)
        return Response(status_code=200)

    def model_info() -> dict[str, Any]:
        return {
            **info,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": backend.weight_version,
        }

    def server_info() -> dict[str, Any]:
        return {
            **info,
            **(server_args or {}),
            "max_running_requests": backend.max_num_seqs,
            "context_length": backend.context_length,
            "device": str(backend.device),
            "internal_states": [{**backend.stats.as_dict(), "num_running": backend.num_running}],
            "version": f"agentrl-{agentrl.__version__}",
        }

    for path, fn in (
        ("/get_model_info", model_info),
        ("/model_info", model_info),
        ("/get_server_info", server_info),
        ("/server_info", server_info),
    ):
        app.add_api_route(path, fn, methods=["GET"])

    @app.get("/get_weight_version")
    async def get_weight_version() -> dict[str, Any]:
        return {"weight_version": backend.weight_version}

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        if backend.num_running:
            return PlainTextResponse(
                f"Cache not flushed: {backend.num_running} requests are running or waiting.",
                status_code=400,
            )
        return PlainTextResponse("Cache flushed (the hf backend keeps no cache between batches).")

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        body = await _json_object(request)
        if body.get("abort_all"):
            await backend.abort_all()
        elif body.get("rid"):
            await backend.abort(str(body["rid"]))
        return Response(status_code=200)

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> JSONResponse:
        body = await _json_object(request)
        if not body.get("model_path"):
            return JSONResponse(
                {"success": False, "message": "'model_path' is required", "num_paused_requests": 0},
                status_code=400,
            )
        if body.get("abort_all_requests"):
            await backend.abort_all()
        try:
            await backend.update_weights(str(body["model_path"]), body.get("weight_version"))
        except Exception as err:  # any load failure is the caller's to see, as in SGLang
            return JSONResponse(
                {
                    "success": False,
                    "message": f"Failed to update weights: {err}",
                    "num_paused_requests": 0,
                },
                status_code=400,
            )
        info["model_path"] = str(body["model_path"])
        return JSONResponse(
            {
                "success": True,
                "message": "Succeeded to update model weights.",
                "num_paused_requests": 0,
            }
        )

    @app.api_route("/get_weights_by_name", methods=["GET", "POST"])
    async def get_weights_by_name(request: Request) -> JSONResponse:
        """SGLang's route: the first ``truncate_size`` rows of the named tensor (what the
        trainer's weight verification reads, agentrl/rollout/backends/verify.py)."""
        body = await _json_object(request)
        name = str(body.get("name") or "")
        model = getattr(backend, "model", None)
        if model is None:  # a stand-in backend (tests) has no weights to show
            return JSONResponse({"success": False, "message": "this server's backend holds "
                                 "no weights to show"}, status_code=501)  # fmt: skip
        tensor = model.state_dict().get(name)
        if tensor is None:
            return JSONResponse({"success": False, "message": f"no weight named {name!r}"},
                                status_code=400)  # fmt: skip
        rows = int(body.get("truncate_size") or 100)
        return JSONResponse(tensor.detach()[:rows].float().cpu().tolist())

    @app.post("/update_weights_from_tensor")
    async def update_weights_from_tensor() -> JSONResponse:
        message = (
            "agentrl serve does not support /update_weights_from_tensor (CUDA IPC "
            "handles); save the weights and use /update_weights_from_disk"
        )
        return JSONResponse({"success": False, "message": message}, status_code=400)

    @app.api_route("/release_memory_occupation", methods=["GET", "POST"])
    async def release_memory() -> Response:
        await backend.release_memory()
        return Response(status_code=200)

    @app.api_route("/resume_memory_occupation", methods=["GET", "POST"])
    async def resume_memory() -> Response:
        await backend.resume_memory()
        return Response(status_code=200)

    return app
