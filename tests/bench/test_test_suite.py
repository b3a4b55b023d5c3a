"""bench/test_suite.py: its reading of pytest's summary and its JSON line, on a fake checkout
whose scripts/test.sh prints what pytest would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import test_suite  # noqa: E402


def test_the_summary_counts_are_read_whatever_their_order():
    line = "= 2 failed, 2285 passed, 31 skipped, 1 error, 9 warnings in 1458.31s (0:24:18) ="
    assert test_suite.parse_counts(line) == {"failed": 2, "passed": 2285, "skipped": 31,
                                             "errors": 1}  # fmt: skip
    assert test_suite.parse_counts("") == {}


def _fake_checkout(tmp_path: Path, summary: str, code: int) -> Path:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "test.sh").write_text(
        f'echo "args: $*"\necho "{summary}"\nexit {code}\n')
    return tmp_path


def test_a_passing_suite_prints_its_time_and_counts(tmp_path):
    checkout = _fake_checkout(tmp_path, "12 passed, 3 skipped in 1.00s", 0)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "test_suite.py"), "--checkout",
                           str(checkout), "--seed", "7"], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["passed"], result["skipped"], result["randomly_seed"]) == (12, 3, 7)
    assert result["wall_s"] < 60 and result["ratio_to_target"] == round(result["wall_s"] / 900, 3)
    log = (checkout / "test_suite_7.log").read_text()
    assert "-p randomly --randomly-seed=7" in log  # the order seed reached pytest


def test_a_failed_test_makes_the_run_no_figure(tmp_path):
    checkout = _fake_checkout(tmp_path, "1 failed, 11 passed in 1.00s", 1)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "test_suite.py"), "--checkout",
                           str(checkout)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1
    assert json.loads(done.stdout.strip().splitlines()[-1])["failed"] == 1


def test_a_folder_without_the_test_script_is_refused(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "test_suite.py"), "--checkout",
                           str(tmp_path)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "no scripts/test.sh there" in done.stderr
