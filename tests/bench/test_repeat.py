"""bench/repeat.py: every figure of a bench's JSON line as the median of fresh runs with
its range, the package versions beside them, and a clear error for a run that fails."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_repeat", ROOT / "bench" / "repeat.py")
repeat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repeat)


def test_numbers_flatten_nested_figures_and_skip_the_rest():
    line = {"a": 1, "b": {"c": 2.5, "d": "x", "e": True}, "f": [1, 2]}
    assert repeat.numbers(line) == {"a": 1.0, "b.c": 2.5}
    assert repeat.last_json_line('x\n{"a": 1}\n{"a": 2}\nnot json {\n') == {"a": 2}
    assert repeat.last_json_line("no json here\n[1, 2]\n") is None


def test_three_fresh_runs_give_the_median_and_the_range(tmp_path, capsys):
    # each run is a new process that counts itself in a file and reports that count
    counter = tmp_path / "count"
    bench = tmp_path / "bench.py"
    bench.write_text(
        "import json, pathlib\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "print('warming up')\n"
        "print(json.dumps({'ratio': [3.0, 1.0, 2.0][n - 1], 'nested': {'s': n * 10}}))\n"
    )
    out = tmp_path / "result.json"
    assert repeat.main(["--runs", "3", "--out", str(out), "--", sys.executable, str(bench)]) == 0
    line = json.loads(out.read_text())
    assert line["runs"] == 3 and len(line["each"]) == 3
    assert line["median"] == {"ratio": 2.0, "nested.s": 20.0}
    assert line["min"] == {"ratio": 1.0, "nested.s": 10.0}
    assert line["max"] == {"ratio": 3.0, "nested.s": 30.0}
    assert line["versions"]["torch"] != "-" and "python" in line["versions"]
    printed = capsys.readouterr().out
    assert printed.count("warming up") == 3 and json.loads(printed.splitlines()[-1]) == line


def test_a_failing_or_silent_run_is_named(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise SystemExit(3)\n")
    with pytest.raises(SystemExit, match="run 1 of .* exited with 3"):
        repeat.main(["--runs", "2", "--", sys.executable, str(bad)])
    silent = tmp_path / "silent.py"
    silent.write_text("print('no figures')\n")
    with pytest.raises(SystemExit, match="run 1 of .* printed no JSON line"):
        repeat.main(["--", sys.executable, str(silent)])
