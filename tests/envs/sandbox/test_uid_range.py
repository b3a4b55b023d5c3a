"""Sandbox servers on one host claim disjoint uid ranges (they end stragglers by uid)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envs.sandbox.config import SandboxConfig
from envs.sandbox.uid_range import claim_uid_range, lock_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only a root server runs per-run uids")

BASE = 1_900_000
REPO = Path(__file__).resolve().parents[3]


def test_a_second_claim_on_the_same_base_moves_to_the_next_free_range():
    first_config, first = claim_uid_range(SandboxConfig(uid_base=BASE, max_concurrent=3))
    second_config, second = claim_uid_range(SandboxConfig(uid_base=BASE, max_concurrent=3))
    try:
        assert first_config.uid_base == BASE
        assert second_config.uid_base == BASE + 3  # disjoint: BASE..BASE+2, BASE+3..BASE+5
        first.release()
        again_config, again = claim_uid_range(SandboxConfig(uid_base=BASE, max_concurrent=3))
        assert again_config.uid_base == BASE  # a released range is free again
        again.release()
    finally:
        first.release()
        second.release()


def test_a_range_overlapping_a_held_one_moves_past_it():
    held_config, held = claim_uid_range(SandboxConfig(uid_base=BASE + 1, max_concurrent=1))
    try:
        config, claim = claim_uid_range(SandboxConfig(uid_base=BASE, max_concurrent=2))
        assert held_config.uid_base == BASE + 1 and config.uid_base == BASE + 2
        claim.release()
    finally:
        held.release()


def test_another_process_holds_its_range_until_it_dies():
    code = textwrap.dedent(f"""
        import sys
        from envs.sandbox.config import SandboxConfig
        from envs.sandbox.uid_range import claim_uid_range
        config, held = claim_uid_range(SandboxConfig(uid_base={BASE + 10}, max_concurrent=2))
        print(config.uid_base, flush=True)
        sys.stdin.read()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == str(BASE + 10)
        config, claim = claim_uid_range(SandboxConfig(uid_base=BASE + 10, max_concurrent=2))
        assert config.uid_base == BASE + 12
        claim.release()
    finally:
        child.kill()
        child.wait()
    config, claim = claim_uid_range(SandboxConfig(uid_base=BASE + 10, max_concurrent=2))
    assert config.uid_base == BASE + 10  # the kernel dropped the dead process's locks
    claim.release()
    assert (lock_dir() / f"uid-{BASE + 10}.lock").exists()


def test_every_range_held_is_refused_naming_the_fix(monkeypatch):
    monkeypatch.setattr("envs.sandbox.uid_range.MAX_TRIES", 2)
    held = [claim_uid_range(SandboxConfig(uid_base=BASE + 20 + 2 * k, max_concurrent=2))[1]
            for k in range(2)]
    try:
        with pytest.raises(RuntimeError, match="no free uid range of 2 from uid_base 1900020.*"
                                               "another --uid-base"):
            claim_uid_range(SandboxConfig(uid_base=BASE + 20, max_concurrent=2))
    finally:
        for claim in held:
            claim.release()
