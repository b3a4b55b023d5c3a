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
them, and the canary after a weight sync asks their top-k too (`top_logprobs_num`: SGLang's
`input_top_logprobs`, input tokens only). Not served: streaming, top log-probs of output
tokens, `input_embeds`, and `/update_weights_from_tensor` (its payload is CUDA IPC handles; use
`/update_weights_from_disk`). Those get a 400 that says so. Errors are
`{"error": {"message": ...}}` with status 400, as SGLang's.

The routes live in agentrl/rollout/backends/serve_generation.py (`/generate` and the chat
route: the data plane) and agentrl/rollout/backends/serve_control.py (the rest).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.serve_control import add_status_routes, add_weight_routes
from agentrl.rollout.backends.serve_generation import add_generation_routes


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
    add_generation_routes(app, backend, info)
    add_status_routes(app, backend, info, server_args)
    add_weight_routes(app, backend, info)
    return app
