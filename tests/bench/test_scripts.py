"""Every bench script still runs against the package as it is now: its imports and its
argument parser (`--help`), and the rollout bench end to end on a tiny workload (a renamed
config key once broke it with nothing to notice)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "bench").glob("*.py"))
SCRIPTS = [p.name for p in FILES if '__name__ == "__main__"' in p.read_text()]
HELPERS = [p.stem for p in FILES if p.name not in SCRIPTS]  # modules the scripts import


def _bench_module(name: str) -> Any:
    """A module of bench/ (scripts import their helpers from beside them)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_every_bench_script_is_listed():
    assert {"repeat.py", "grpo_step.py", "async_vs_sync.py", "rollout_async_vs_sync.py",
            "update_memory.py", "kv_cache.py", "decode_attention.py"} <= set(
        SCRIPTS)
    assert {"latency_calculator", "fresh_process", "engine_timing", "stage_profile"} <= set(HELPERS)


def test_fresh_processes_return_each_variants_line_in_order_and_name_a_failure(tmp_path):
    in_fresh_processes = _bench_module("fresh_process").in_fresh_processes
    script = tmp_path / "child.py"
    script.write_text(
        "import json, os, sys\n"
        "if sys.argv[2] == 'bad': sys.exit('no such variant: bad')\n"
        "print('noise')\n"
        "print(json.dumps({'variant': sys.argv[2], 'pid': os.getpid(), 'rest': sys.argv[3:]}))\n"
    )
    got = in_fresh_processes(str(script), "--v", ["a", "b"], ["--x", "1"])
    assert list(got) == ["a", "b"] and got["a"]["rest"] == ["--x", "1"]
    assert got["a"]["pid"] != got["b"]["pid"]  # one process each
    with pytest.raises(RuntimeError, match="no such variant: bad"):
        in_fresh_processes(str(script), "--v", ["a", "bad"], [])


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_imports_and_parses_its_arguments(script):
    done = _run(f"bench/{script}", "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:300]


@pytest.mark.slow
@pytest.mark.parametrize("module", HELPERS)
def test_the_helper_modules_import(module):
    done = _run("-c", f"import sys; sys.path.insert(0, 'bench'); import {module}")
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_rollout_bench_runs_a_tiny_workload(workers):
    if workers != "1":
        pytest.importorskip("ray")
    done = _run("bench/rollout_async_vs_sync.py", "--requests", "8", "--max-tool-turns", "1",
                "--tool-median", "0.001", "--tool-cap", "0.01", "--engine-workers", workers)
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
    # the figure line bench/repeat.py reads
    assert line["requests"] == 8 and line["engine_workers"] == int(workers)
    assert line["async_s"] > 0 and line["async_over_bound"] > 0


@pytest.mark.slow
def test_the_update_memory_bench_compares_both_paths_on_a_small_model():
    done = _run("bench/update_memory.py", "--rows", "2", "--length", "256", "--repeats", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"peak_ratio", "time_ratio"} <= set(line)
    assert line["new"]["tokens"] == line["old"]["tokens"] == 512
    # 2 x 192 response positions x 151,936 fp32 logits: ~0.23 GB per copy on the full path,
    # several of them alive at once (measured: 1.0 GB peak against 1.5 GB)
    assert line["new"]["peak_rss_gb"] < line["old"]["peak_rss_gb"] - 0.2


@pytest.mark.slow
def test_the_kv_cache_bench_runs_each_cache_in_its_own_process():
    done = _run("bench/kv_cache.py", "--size", "nano", "--rows", "4", "--tokens", "40",
                "--generations", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"first_ratio", "steady_time_ratio", "peak_ratio"} <= set(line)
    assert line["chunked"]["kv_layer"] == "ChunkedKVLayer"
    assert line["dynamic"]["kv_layer"] == "DynamicLayer"  # the reference really ran
    assert line["chunked"]["tokens_per_generation"] == line["dynamic"]["tokens_per_generation"] == 160


@pytest.mark.slow
def test_the_decode_attention_bench_runs_both_paths_in_their_own_processes():
    done = _run("bench/decode_attention.py", "--rows", "4", "--tokens", "12", "--layers", "1",
                "--heads", "4", "--kv-heads", "2", "--head-dim", "8", "--intermediate", "32",
                "--generations", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["same_tokens"] is True and line["time_ratio"] > 0
    assert line["packed"]["attn_implementation"] == "agentrl_packed_sdpa"
    assert line["transformers"]["attn_implementation"] == "sdpa"  # the reference really ran


@pytest.mark.slow
def test_the_gpu_step_bench_records_the_engine_it_really_ran(tmp_path):
    out = tmp_path / "step.json"
    done = _run("bench/gpu_step.py", "--shape", "nano", "--prompts", "2", "--n", "2",
                "--prompt-length", "256", "--response-length", "8", "--warmup", "1",
                "--steps", "1", "--configs", "resident", "--kv-cache", "dynamic",
                "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    resident = json.loads(out.read_text())["resident"]
    assert [e["kv_cache"] for e in resident["engine"]] == ["dynamic"]
    assert [e["attention"] for e in resident["engine"]] == ["agentrl_packed_sdpa"]  # 4 heads / 2
    assert resident["rollout_log_probs_diff_max"] < 1e-5  # engine and trainer agree (fp32)


@pytest.mark.slow
def test_the_gpu_step_bench_profiles_one_more_step_without_timing_it(tmp_path):
    out = tmp_path / "step.json"
    done = _run("bench/gpu_step.py", "--shape", "nano", "--prompts", "2", "--n", "2",
                "--prompt-length", "256", "--response-length", "8", "--warmup", "1",
                "--steps", "1", "--configs", "resident", "--profile", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    resident = json.loads(out.read_text())["resident"]
    assert len(resident["step_s_per_step"]) == 2  # the profiled step is not among the timed
    profile = resident["profile"]
    assert profile["step_s"] > 0 and set(profile["stages"]) == {"compute_log_prob", "update_actor"}
    update = profile["stages"]["update_actor"]
    assert update["device_busy_s"] is None and update["top_by"] == "cpu"  # no GPU here
    assert update["top_ops"] and all(op["ms"] >= 0 and op["calls"] > 0 for op in update["top_ops"])
    assert "gpu_util_pct" not in resident  # NVML reads a GPU; none here


def _blackjack_report(with_21: bool) -> dict:
    def evaluation(acc: float, hit: float) -> dict:
        m = {"accuracy": acc, "accuracy_stderr": 0.01, "sampled_accuracy": acc,
             "sampled_accuracy_stderr": 0.01, "tool_call_rate": 0.0, "hit_rate_low": hit,
             "hit_rate_mid": hit, "hit_rate_high": hit, "invalid_move_rate": 0.0,
             "moves_per_game": 9.0 if hit else 5.0, "trajectories": 300}  # fmt: skip
        return m | ({"hit_rate_21": hit} if with_21 else {})

    return {"eval_sft": evaluation(0.0, 1.0), "eval_rl": evaluation(0.37, 0.0),
            "control": evaluation(0.0, 1.0), "sft": {"steps": 300},
            "timing_s": {"sft": 70.0, "rl": 300.0, "total": 800.0}}  # fmt: skip


def test_the_seeds_table_shows_the_hit_rate_on_21_when_every_report_has_it():
    quickstart_seeds = _bench_module("quickstart_seeds")
    both = quickstart_seeds.table({10: _blackjack_report(True), 11: _blackjack_report(True)})
    header = next(line for line in both.splitlines() if "hit rate on 11 or less" in line)
    assert "| on 21 |" in header
    row = both.splitlines()[both.splitlines().index(header) + 2]
    assert row.startswith("| 10 |") and row.count("1.00 -> 0.00 (1.00)") == 4
    assert "9.0 -> 5.0" in row
    # an older report without hit_rate_21: the column is left out, not filled with a guess
    mixed = quickstart_seeds.table({10: _blackjack_report(True), 2: _blackjack_report(False)})
    assert "on 21" not in mixed and mixed.count("1.00 -> 0.00 (1.00)") == 6


def test_the_seeds_table_puts_the_worst_seed_first():
    quickstart_seeds = _bench_module("quickstart_seeds")
    reports = {}
    for seed, acc in [(3, 0.9), (1, 0.5), (7, 0.7), (4, 0.5)]:
        report = _blackjack_report(True)
        report["eval_rl"] = report["eval_rl"] | {"accuracy": acc}
        reports[seed] = report
    ordered = quickstart_seeds.worst_first(reports)
    assert list(ordered) == [1, 4, 7, 3]  # worst first; a tie keeps the order given
    rows = [line for line in quickstart_seeds.table(ordered).splitlines()
            if line.startswith("| ") and line[2].isdigit()]  # fmt: skip
    assert [int(r.split("|")[1]) for r in rows[:4]] == [1, 4, 7, 3]  # the main table's rows


@pytest.mark.slow
def test_the_gateway_overhead_bench_replays_a_cli_shaped_episode(tmp_path):
    out = tmp_path / "gateway.json"
    done = _run("bench/gateway_overhead.py", "--synthesize", "--runs", "1", "--turns", "2",
                "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    (episode,) = json.loads(out.read_text())["episodes"].values()
    assert episode["source"] == "synthesized" and episode["requests"] == 3
    assert episode["body_bytes_max"] > 70_000  # Claude Code's default-mode size
    assert all(t["overhead_ms_median"] > 0 for t in episode["turns"])
    reuse = episode["prefix_reuse"]
    assert reuse["every_prompt_extends_previous"] and reuse["full_render_matches_recording"]
    assert reuse["rewrites"] == 0 and reuse["segments"] == 1
    later = reuse["turns"][1:]
    assert all(t["shared_prefix"] == t["previous_tokens"] > 0 for t in later)


def test_the_seeds_script_runs_the_vllm_variant_apart_with_its_own_time_target(tmp_path):
    quickstart_seeds = _bench_module("quickstart_seeds")
    cmd = quickstart_seeds.seed_command("calculator", tmp_path / "vllm_seed_2", 2,
                                        rollout="vllm", server_python="/v/bin/python")  # fmt: skip
    assert cmd[1:] == ["quickstart", "--task", "calculator", "--out-dir",
                       str(tmp_path / "vllm_seed_2"), "--seed", "2", "--rollout", "vllm",
                       "--server-python", "/v/bin/python"]  # fmt: skip
    plain = quickstart_seeds.seed_command("calculator", tmp_path / "seed_2", 2)
    assert "--rollout" not in plain and "--server-python" not in plain
    report = {"eval_sft": {"accuracy": 0.3}, "eval_rl": {"accuracy": 0.95, "tool_call_rate": 1.0},
              "control": {"accuracy": 0.3}, "timing_s": {"total": 600.0}}  # fmt: skip
    vllm = quickstart_seeds.check({2: report}, "calculator", "vllm")
    assert [line.split(":")[0] for line in vllm] == [
        "PASS greedy accuracy after SFT <= 0.45", "PASS greedy accuracy after GRPO >= 0.85",
        "PASS tool-call rate after GRPO >= 0.95", "PASS control at least 0.30 below GRPO",
        "PASS end to end < 900 s"]  # fmt: skip
    assert quickstart_seeds.check({2: report}, "calculator")[-1].startswith(
        "FAIL end to end < 300 s")
