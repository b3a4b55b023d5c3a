"""The ``retool`` task of `agentrl quickstart` (the CPU ReTool run): problems solved with a
one-line Python program (agentrl/tasks/code_arithmetic.py), an imperfect teacher, and the
code sandbox the code_interpreter tool runs them in.

    data = write_code_data(out_dir, settings, direct_phrasings)
    with serve_sandbox_tool(out_dir) as tool_config:   # `agentrl sandbox` on a free port
        ...                                            # tool_config names its URL

The sandbox is the real one (envs/sandbox: every program runs in its own process with
the machine's isolation and limits), served in-process for as long as the run lasts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import yaml

from agentrl.data.retool import TOOL_NAME
from agentrl.plugins import load_object
from agentrl.tasks.code_arithmetic import make_code_rows, make_code_sft_rows
from agentrl.tasks.quickstart import TaskData, check_disjoint, write_task_data

# The tool's schema as the model sees it (one line with the compact template).
CODE_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run Python code; returns what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        },
    },
}
RUN_TIMEOUT_S = 10  # per program; the solving programs take milliseconds
SANDBOX_CONCURRENCY = 4  # programs running at once (2 cores: more only adds contention)


def write_code_data(out_dir: Path, s: Any, direct_phrasings: Collection[str]) -> TaskData:
    """SFT conversations, train and test parquet; group labels of the test rows."""
    sft = make_code_sft_rows(
        s.sft_examples, "sft", s.seed, CODE_SCHEMA, direct_phrasings, s.direct_rate
    )
    train = make_code_rows(s.n_train, "train", s.seed)
    test = make_code_rows(s.n_test, "test", s.seed)
    check_disjoint(
        {
            "sft": {r["program"] for r in sft},
            "train": {r["extra_info"]["program"] for r in train},
            "test": {r["extra_info"]["program"] for r in test},
        }
    )
    kinds = [r["extra_info"]["kind"] for r in test]
    return write_task_data(out_dir, sft, train, test, direct_phrasings, kind=kinds)


@contextlib.contextmanager
def serve_sandbox_tool(data_dir: Path) -> Iterator[Path]:
    """Serve the code sandbox on a free local port for as long as the context lasts; yield
    a code_interpreter tool config (verl's format) that points at it."""
    from agentrl.utils.serving import serve_in_thread
    sandbox_config = load_object("envs.sandbox.config.SandboxConfig")
    create_app = load_object("envs.sandbox.server.create_app")
    app = create_app(sandbox_config(max_concurrent=SANDBOX_CONCURRENCY))
    with serve_in_thread(app) as url:
        config = {
            "tools": [
                {
                    "class_name": "tools.sandbox.SandboxTool",
                    "config": {
                        "sandbox_fusion_url": f"{url}/run_code",
                        "run_timeout": RUN_TIMEOUT_S,
                        "max_concurrent": 64,  # the server queues beyond its own limit
                    },
                    "tool_schema": CODE_SCHEMA,
                }
            ]
        }
        path = data_dir / "sandbox_tool.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        yield path
