"""`agentrl serve`: the embedded `hf` engine behind SGLang's HTTP API, on CPU or one GPU.

    agentrl serve --model /path/to/model --port 30000
    agentrl serve --model-path /path/to/model --host 0.0.0.0 --port 30000 --max-num-seqs 32

Point the `sglang` backend at it (`actor_rollout_ref.rollout.name=sglang
actor_rollout_ref.rollout.server_urls=[http://127.0.0.1:30000]`) or curl its `/generate`.
It takes `--model-path` like `sglang.launch_server`, so the server launcher can start it in
place of SGLang (`actor_rollout_ref.rollout.launch_command="agentrl serve"`).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys

from agentrl.rollout.backends.base import KV_CACHES

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", "--model-path", dest="model", required=True, help="Hugging Face model directory"
    )
    parser.add_argument(
        "--tokenizer",
        "--tokenizer-path",
        dest="tokenizer",
        default=None,
        help="tokenizer directory (default: the model's)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=30000, help="port (default 30000)")
    parser.add_argument(
        "--max-num-seqs",
        "--max-running-requests",
        dest="max_num_seqs",
        type=int,
        default=64,
        help="largest dynamic batch (default 64)",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=0.0,
        help="wait this long for more requests before a batch (default 0)",
    )
    parser.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: auto)")
    parser.add_argument(
        "--dtype", default=None, help="bfloat16 | float16 | float32 on GPU (CPU always float32)"
    )
    parser.add_argument(
        "--context-length",
        type=int,
        default=None,
        help="max prompt + output tokens (default: the model's)",
    )
    parser.add_argument(
        "--seed",
        "--random-seed",
        dest="seed",
        type=int,
        default=0,
        help="sampling seed (default 0)",
    )
    parser.add_argument("--trust-remote-code", action="store_true", help="for custom models")
    parser.add_argument(
        "--kv-cache",
        choices=KV_CACHES,
        default="chunked",
        help="chunked: buffers grown 128 positions at a time (default); dynamic: transformers' "
        "DynamicCache",
    )


PARENT_PID_ENV = "AGENTRL_PARENT_PID"  # set by the server launcher
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """When a launcher started this server (``AGENTRL_PARENT_PID``), have the kernel send
    SIGTERM when the launching process dies, ``kill -9`` included, so a killed trainer
    leaves no server behind; True when set up (Linux only)."""
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        logger.warning("cannot ask to die with the launcher: errno %d", ctypes.get_errno())
        return False
    if os.getppid() != int(parent):  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from transformers import AutoTokenizer

    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app

    if args.max_num_seqs < 1:
        logger.error("--max-num-seqs must be >= 1, got %d", args.max_num_seqs)
        return 2
    tokenizer_path = args.tokenizer or args.model
    for path in {args.model, tokenizer_path}:
        # a path, not a hub id, that does not exist (hub clients differ in what they raise)
        if (os.path.isabs(path) or path.startswith(".")) and not os.path.exists(path):
            logger.error("cannot load %s: no such file or directory", path)
            return 1
    die_with_parent()
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            tokenizer_path, trust_remote_code=args.trust_remote_code
        )
        backend = HFBackend.from_pretrained(
            args.model,
            tokenizer,
            device=args.device,
            dtype=args.dtype,
            trust_remote_code=args.trust_remote_code,
            max_num_seqs=args.max_num_seqs,
            batch_wait_s=args.batch_wait_ms / 1000,
            seed=args.seed,
            max_model_len=args.context_length,
            kv_cache=args.kv_cache,
        )
    except OSError as err:
        logger.error("cannot load %s: %s", args.model, err)
        return 1
    server_args = {
        "host": args.host,
        "port": args.port,
        "random_seed": args.seed,
        "dtype": str(next(backend.model.parameters()).dtype),
    }
    app = create_app(
        backend, model_path=args.model, tokenizer_path=tokenizer_path, server_args=server_args
    )
    logger.info(
        "serving %s on http://%s:%d (device %s, max_num_seqs %d)",
        args.model,
        args.host,
        args.port,
        backend.device,
        args.max_num_seqs,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(
        prog="python -m agentrl.rollout.backends.serve_cli", description=__doc__
    )
    add_arguments(_parser)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sys.exit(run(_parser.parse_args()))
