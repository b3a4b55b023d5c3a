"""Helpers of the trainer's end-to-end tests."""

from __future__ import annotations

from pathlib import Path


def serve_pids(model_dir: Path) -> set[int]:
    """The `agentrl serve` processes started for ``model_dir`` (a path of the test's own,
    e.g. a symlink of the tiny model, so that other tests' servers are not counted)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "serve_cli" in cmdline and str(model_dir) in cmdline:
                pids.add(int(entry.name))
    return pids
