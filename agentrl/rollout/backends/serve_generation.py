"""`agentrl serve`'s generation routes (the data plane), in SGLang's JSON shapes
(agentrl/rollout/backends/serve.py lists every route):

- ``POST /generate``: one prompt, or a batch (a JSON array back, in order; the first error
  aborts the rest); ``logprob_start_len`` >= 0 adds SGLang's input log-probs (one extra
  forward pass over the prompt), and ``top_logprobs_num`` their top-k per position.
- ``POST /v1/chat/completions``: OpenAI's chat form, text only (an LLM judge's calls).

Errors are ``{"error": {"message": ...}}`` with status 400, as SGLang's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentrl.rollout.backends.base import BackendError, GenerationOutput
from agentrl.rollout.backends.hf import HFBackend


class BadRequest(ValueError):
    """A /generate body that is not valid; becomes a 400 with this message."""


def sglang_error(message: str, status: int = 400) -> JSONResponse:
    """SGLang's error shape: ``{"error": {"message": ...}}``."""
    return JSONResponse({"error": {"message": message}}, status_code=status)


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
    top_k = body.get("top_logprobs_num") or 0
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise BadRequest("'top_logprobs_num' must be an integer >= 0")
    if top_k and start < 0:
        raise BadRequest("agentrl serve gives top_logprobs_num for input tokens only: set "
                         "'logprob_start_len' >= 0 too")
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
            "top_logprobs_num": top_k if lp else 0,
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



def add_generation_routes(app: FastAPI, backend: HFBackend, info: dict[str, Any]) -> None:
    """``/generate`` and ``/v1/chat/completions`` on ``app``, served by ``backend``;
    ``info["model_path"]`` names the model in chat answers (a weight update changes it)."""
    tokenizer = backend.tokenizer

    async def run_one(item: dict[str, Any]) -> dict[str, Any]:
        output = await backend.generate(item["input_ids"], item["sampling_params"], item["rid"])
        reply = generate_response(
            output, item["return_logprob"], tokenizer, item["return_text_in_logprobs"]
        )
        start = item["logprob_start_len"]
        if start >= 0:  # SGLang's input log-probs: [lp, id, text] from `start` (none at 0)
            ids, top_k = item["input_ids"], item["top_logprobs_num"]
            scored, top = await backend.score_prompt(ids, top_k)
            log_probs = [None, *scored]
            texts = ([tokenizer.decode([t]) for t in ids] if item["return_text_in_logprobs"]
                     else [None] * len(ids))  # fmt: skip
            reply["meta_info"]["input_token_logprobs"] = [
                [lp, t, x] for lp, t, x in zip(log_probs, ids, texts, strict=True)][start:]
            if top is not None:  # SGLang's input_top_logprobs: [[lp, id, None], ...] each
                reply["meta_info"]["input_top_logprobs"] = [
                    None, *([[lp, t, None] for t, lp in row.items()] for row in top)][start:]
        return reply

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        try:
            items, batch = parse_generate_request(await request.json(), tokenizer)
        except (BadRequest, ValueError, TypeError) as err:
            return sglang_error(str(err))
        try:
            results = await _all_or_cancel([run_one(item) for item in items])
        except BackendError as err:
            return sglang_error(str(err))
        return JSONResponse(results if batch else results[0])

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        """SGLang's OpenAI-compatible chat route, text only (no tools, no streaming): what
        an LLM judge or an evaluation script calls (docs/rewards.md, the judge)."""
        try:
            body = await request.json()
            prompt_ids = chat_prompt_ids(body, tokenizer)
        except (BadRequest, ValueError, TypeError, KeyError) as err:
            return sglang_error(str(err))
        sampling = {"max_new_tokens": int(body.get("max_tokens") or 256),
                    "temperature": float(body.get("temperature", 1.0)),
                    "top_p": float(body.get("top_p", 1.0))}
        if tokenizer.eos_token_id is not None:
            sampling["stop_token_ids"] = [tokenizer.eos_token_id]
        try:
            output = await backend.generate(prompt_ids, sampling, f"chat-{uuid.uuid4().hex}")
        except BackendError as err:
            return sglang_error(str(err))
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
