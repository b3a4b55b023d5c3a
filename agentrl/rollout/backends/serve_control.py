"""`agentrl serve`'s control routes (the control plane), as SGLang's
(agentrl/rollout/backends/serve.py lists every route):

- status: ``/health``, ``/health_generate`` (200 after a 1-token generation, else 503),
  the model and server info, ``/get_weight_version``, ``/flush_cache`` (400 while
  requests are running), ``/abort_request`` (``{"rid"}`` or ``{"abort_all": true}``);
- weights and memory: ``/update_weights_from_disk``, ``/get_weights_by_name`` (what the
  trainer's weight verification reads), ``/update_weights_from_tensor`` (refused: its
  payload is CUDA IPC handles), ``/release_memory_occupation``,
  ``/resume_memory_occupation``.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

import agentrl
from agentrl.rollout.backends.base import BackendError
from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.serve_generation import sglang_error


async def _json_object(request: Request) -> dict[str, Any]:
    """The request body as a dict ({} when it is empty or not a JSON object)."""
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def add_status_routes(app: FastAPI, backend: HFBackend, info: dict[str, Any],
                      server_args: dict[str, Any] | None) -> None:  # fmt: skip
    """Health, info, cache and abort routes on ``app``; ``info`` holds the model and
    tokenizer paths, ``server_args`` what the server was started with."""

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
            return sglang_error(f"health check generation failed: {err}", 503)
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


def add_weight_routes(app: FastAPI, backend: HFBackend, info: dict[str, Any]) -> None:
    """Weight and memory routes on ``app``; a weight update from disk sets
    ``info["model_path"]``."""

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
