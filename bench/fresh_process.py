"""Each variant of an A/B bench in its own fresh process (bench/kv_cache.py,
bench/update_memory.py, bench/decode_attention.py): a process's first run of a path pays
for allocations and imports the other variant would otherwise have paid for it, so the two
never share one.

A script re-runs itself with a hidden flag naming the variant (``--cache chunked``,
``--path new``, ...); the child prints one JSON line, which `in_fresh_processes` returns.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Iterable, Sequence


def in_fresh_processes(script: str, flag: str, variants: Iterable[str],
                       argv: Sequence[str], timeout_s: float = 3600) -> dict[str, dict]:  # fmt: skip
    """{variant: the last stdout line (JSON) of `python script flag variant *argv`}, one
    process after another, in the order given. A child that fails raises with its stderr."""
    results = {}
    for variant in variants:
        cmd = [sys.executable, script, flag, variant, *argv]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def versions() -> dict[str, str]:
    """Python, torch and transformers versions of this process (a bench report's field)."""
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__}  # fmt: skip
