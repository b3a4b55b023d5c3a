"""Limits on a whole episode: a fork bomb, a memory hog and a disk filler each end their own
run (stopped = "limit", naming which) within seconds while a run beside them finishes; the
cgroup is gone afterwards; where cgroups are unavailable a warning names why and the disk
watch still holds; the disk limit counts what a run adds (not what its folders held when it
began) and a flood of empty files."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from agentrl.agents import limits as limits_module
from agentrl.agents.limits import EpisodeLimits, cgroup_support, open_limiter
from agentrl.agents.sandbox import SANDBOX_PATH, SandboxSpec, run_caged, same_place, sandbox_argv


@pytest.fixture
def cgroups() -> None:
    reason = cgroup_support()
    if reason is not None:
        pytest.skip(f"no cgroups for episodes here: {reason}")


def _spec(folder: Path, bwrap: str | None) -> SandboxSpec:
    folder.mkdir(exist_ok=True)
    return SandboxSpec(kind="bwrap" if bwrap else "none", workdir=folder,
                       writable=same_place(folder), bwrap=bwrap)


async def _run(folder: Path, bwrap: str | None, script: str, limits: EpisodeLimits,
               timeout: float = 30):
    spec = _spec(folder, bwrap)
    limiter = open_limiter(limits, f"agentrl-test-{folder.name}", [folder])
    try:
        started = time.monotonic()
        result = await run_caged(sandbox_argv(spec, ["/bin/bash", "-c", script]),
                                 {"PATH": SANDBOX_PATH, "HOME": str(folder)}, spec, timeout,
                                 limiter=limiter)
        return result, time.monotonic() - started, limiter
    finally:
        limiter.close()


def test_a_fork_bomb_and_a_memory_hog_end_their_episode_not_the_others(tmp_path, bwrap,
                                                                       cgroups):
    limits = EpisodeLimits(memory_mb=128, pids=64, disk_mb=None)
    bomb = "b() { b | b & }; b; sleep 60"
    hog = "python3 -c 'x = bytearray(1 << 30); print(len(x))'; sleep 60"
    calm = "sleep 2; echo calm > out.txt; cat out.txt"

    async def main():
        return await asyncio.gather(_run(tmp_path / "bomb", bwrap, bomb, limits),
                                    _run(tmp_path / "hog", bwrap, hog, limits),
                                    _run(tmp_path / "calm", bwrap, calm, limits))

    (bombed, bomb_s, bomb_limiter), (hogged, hog_s, hog_limiter), (calm_run, _, _) = (
        asyncio.run(main()))
    assert (bombed.stopped, bombed.limit, bombed.returncode) == ("limit", "pids", None)
    assert (hogged.stopped, hogged.limit) == ("limit", "memory")
    assert bomb_s < 15 and hog_s < 15  # not the 30 s budget, nor the sleeps
    assert (calm_run.stopped, calm_run.returncode, calm_run.stdout) == ("exit", 0, "calm\n")
    for limiter in (bomb_limiter, hog_limiter):
        assert limiter.pids() == set()
        assert not any(folder.exists() for folder in limiter.folders.values())


def test_a_disk_filler_is_stopped_with_or_without_cgroups(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(limits_module, "_parents", lambda: "no cgroups in this test")
    limits_module._warn_once.cache_clear()
    filler = "for i in $(seq 100); do head -c 1000000 /dev/zero > f$i; sleep 0.05; done"
    with caplog.at_level(logging.WARNING, logger="agentrl.agents.limits"):
        result, took, limiter = asyncio.run(
            _run(tmp_path / "fill", None, filler, EpisodeLimits(disk_mb=5)))
    assert (result.stopped, result.limit) == ("limit", "disk")
    assert took < 5  # 100 files would take 5 s and more
    assert 5 <= len(list((tmp_path / "fill").iterdir())) < 100
    assert limiter.folders == {}
    assert "no cgroups in this test" in caplog.text and "agentrl doctor" in caplog.text


def test_the_disk_limit_counts_what_the_run_adds_and_empty_files(tmp_path, monkeypatch):
    """What the folder held when the run began (a template, the workspace a check copies)
    is not counted; an empty file counts as EMPTY_ENTRY_BYTES, so a flood of them trips."""
    monkeypatch.setattr(limits_module, "_parents", lambda: "no cgroups in this test")
    folder = tmp_path / "full"
    folder.mkdir()
    (folder / "template.bin").write_bytes(b"\1" * (6 << 20))  # over the 5 MB limit already
    result, _, _ = asyncio.run(_run(folder, None, "sleep 1.5; echo ok",
                                    EpisodeLimits(disk_mb=5)))
    assert (result.stopped, result.limit, result.stdout) == ("exit", None, "ok\n")
    empty = "python3 -c \"[open(f'e{i}', 'w').close() for i in range(5000)]\"; sleep 20"
    result, took, _ = asyncio.run(_run(tmp_path / "empty", None, empty,
                                       EpisodeLimits(disk_mb=5)))
    assert (result.stopped, result.limit) == ("limit", "disk")  # 5000 x 4 KiB > 5 MB
    assert took < 10


def test_a_killed_runs_empty_cgroups_are_swept_and_busy_ones_kept(tmp_path, cgroups):
    """Empty cgroups named like an episode's, older than the bound, are removed; one that
    holds a process, one of another name and one younger than the bound stay."""
    import os
    import subprocess

    from agentrl.agents.limits import _parents, sweep_stale_cgroups

    _, parents = _parents()
    prefix = f"agentrl-ep-sweeptest-{os.getpid()}-"
    made = {name: [parent / f"{prefix}{name}" for parent in parents.values()]
            for name in ("empty", "busy")}
    other = [parent / f"agentrl-other-{os.getpid()}" for parent in parents.values()]
    for folder in [*made["empty"], *made["busy"], *other]:
        folder.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        for folder in made["busy"]:
            (folder / "cgroup.procs").write_text(str(sleeper.pid))
        assert sweep_stale_cgroups(parents, prefix, older_than_s=3600) == []  # too young
        removed = sweep_stale_cgroups(parents, prefix, older_than_s=0)
        assert sorted(removed) == sorted(made["empty"])
        assert all(folder.exists() for folder in [*made["busy"], *other])
    finally:
        sleeper.kill()
        sleeper.wait()
        for folder in [*made["busy"], *other]:
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)
