"""Small offline shell tasks for the harness agents (agentrl.agents), with their checks.

Three kinds, each row a verl row whose ``extra_info`` holds the workspace's files, the
check command the harness runs afterwards (exit 0 -> reward 1.0) and the check's own files
(``check_files``: written only into the check's copy of the workspace, never shown to the
policy):

- ``create_file``: create ``NAME`` holding exactly one given line;
- ``count_lines``: count the lines of ``data.txt`` and write the number to ``count.txt``;
- ``fix_bug``: ``calc.py`` has a one-line bug (a wrong operator); the prompt says what the
  function must compute, and the hidden ``test_calc.py`` (a check file) checks it, running
  the policy's function in a child process and judging its results itself (``_FIX_BUG_TEST``).

    rows = make_shell_task_rows(12, "train", seed=0)
    write_shell_task_dataset("~/data/shell_tasks", n_train=64, n_test=16, seed=0)

Words and numbers are drawn from ``random.Random(seed)`` (the split is mixed into the
seed), so a dataset is the same on every machine.
"""

from __future__ import annotations

import logging
import random
import shlex
from pathlib import Path
from typing import Any

from agentrl.utils.jsonl import write_parquet

logger = logging.getLogger(__name__)

DATA_SOURCE = "agentrl/shell_tasks"
KINDS = ("create_file", "count_lines", "fix_bug")
WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "orbit",
         "amber", "cedar", "delta", "ember", "frost", "grape", "harbor")
OPERATIONS = {"add": ("+", "-"), "multiply": ("*", "+"), "subtract": ("-", "+")}


def _create_file(rng: random.Random) -> tuple[str, list[dict], str, list[dict]]:
    name = f"{rng.choice(WORDS)}.txt"
    line = " ".join(rng.sample(WORDS, 3))
    prompt = f"Create a file named {name} in the current folder containing exactly this one line: {line}"
    check = (f"test -f {name} && test \"$(wc -l < {name})\" -le 1 && "
             f"grep -qxF {shlex.quote(line)} {name}")
    return prompt, [], check, []


def _count_lines(rng: random.Random) -> tuple[str, list[dict], str, list[dict]]:
    count = rng.randint(3, 30)
    content = "".join(f"{rng.choice(WORDS)} {rng.randint(0, 999)}\n" for _ in range(count))
    prompt = ("Count the lines of the file data.txt and write the number alone to a new "
              "file count.txt.")
    check = f"test \"$(tr -d '[:space:]' < count.txt)\" = {count}"
    return prompt, [{"path": "data.txt", "content": content}], check, []


# The hidden test of `fix_bug`. The policy's code is untrusted even in the check: imported
# into the test's own process it could end it with status 0 (`os._exit(0)` in calc.py), or
# read the test's file for the answers. So the test (run with `python3 -I`: no workspace
# module shadows what it imports) deletes its own file, runs the policy's function in a
# child process given only the cases, and judges the child's printed results itself; the
# child's exit status counts for nothing.
_FIX_BUG_TEST = """\
import json, os, subprocess, sys
os.unlink(os.path.abspath(__file__))  # the policy's code, run below, never sees it
CASES = {cases!r}
EXPECTED = {expected!r}
CHILD = ("import json, os, sys; sys.path.insert(0, os.getcwd()); from calc import {name}; "
         "print(json.dumps([{name}(a, b) for a, b in json.load(sys.stdin)]))")
try:
    run = subprocess.run([sys.executable, "-I", "-c", CHILD], input=json.dumps(CASES),
                         capture_output=True, text=True, timeout=20)
    got = json.loads(run.stdout.strip().splitlines()[-1])
except Exception as err:  # no answer, no JSON, a timeout: failed
    sys.exit(f"no results from calc.{name}: {{err}}")
sys.exit(0 if got == EXPECTED else f"calc.{name} gave {{got}}, expected {{EXPECTED}}")
"""


def _fix_bug(rng: random.Random) -> tuple[str, list[dict], str, list[dict]]:
    name = rng.choice(sorted(OPERATIONS))
    right, wrong = OPERATIONS[name]
    calc = f"def {name}(a, b):\n    return a {wrong} b\n"
    cases = [[rng.randint(2, 20), rng.randint(2, 20)] for _ in range(3)]
    expected = [eval(f"{a} {right} {b}") for a, b in cases]
    test = _FIX_BUG_TEST.format(cases=cases, expected=expected, name=name)
    prompt = (f"calc.py has a one-line bug: {name}(a, b) must return a {right} b. Fix it "
              "(a hidden test checks it).")
    return (prompt, [{"path": "calc.py", "content": calc}], "python3 -I test_calc.py",
            [{"path": "test_calc.py", "content": test}])


MAKERS = {"create_file": _create_file, "count_lines": _count_lines, "fix_bug": _fix_bug}


def make_shell_task_rows(n: int, split: str, seed: int) -> list[dict[str, Any]]:
    """``n`` rows cycling through the kinds; the same ``(n, split, seed)`` gives the same rows."""
    if n < 1:
        raise ValueError(f"the number of rows must be >= 1, got {n}")
    rng = random.Random(f"{seed}-{split}")
    rows = []
    for index in range(n):
        kind = KINDS[index % len(KINDS)]
        prompt, files, check, check_files = MAKERS[kind](rng)
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": prompt}],
            "ability": "shell",
            "reward_model": {"style": "rule", "ground_truth": check},
            "extra_info": {"index": index, "split": split, "kind": kind, "files": files,
                           "check": check, "check_files": check_files},
        })
    return rows


def write_shell_task_dataset(out_dir: str | Path, n_train: int, n_test: int,
                             seed: int) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``test.parquet`` into ``out_dir``; return both paths."""
    out_dir = Path(out_dir).expanduser()
    train = write_parquet(make_shell_task_rows(n_train, "train", seed), out_dir / "train.parquet")
    test = write_parquet(make_shell_task_rows(n_test, "test", seed), out_dir / "test.parquet")
    logger.info("wrote %d train rows to %s, %d test rows to %s", n_train, train, n_test, test)
    return train, test


__all__ = ["DATA_SOURCE", "KINDS", "make_shell_task_rows", "write_shell_task_dataset"]
