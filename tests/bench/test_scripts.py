"""Every bench script still runs against the package as it is now: its imports and its
argument parser (`--help`), and each bench end to end at the smallest size its options allow
(a renamed config key once broke one with nothing to notice).

The `--help` runs and the helpers' imports share one fresh process (the module fixture
`help_and_imports`: torch and transformers imported once, not once per script); a bench whose
`main` takes its arguments runs in the test's own process (its variants still each in a
process of their own, where the bench says so)."""

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

# In one process: import every helper, then run every script as `python bench/X --help`
# would (run as __main__, bench/ first on sys.path); writes {name: {code, stdout, error}}.
HELP_AND_IMPORTS = """
import contextlib, importlib, io, json, runpy, sys, traceback
bench, out, scripts, helpers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
sys.path.insert(0, bench)
results = {}
for module in helpers:
    try:
        importlib.import_module(module)
        results[module] = {"code": 0, "stdout": "", "error": ""}
    except BaseException:
        results[module] = {"code": 1, "stdout": "", "error": traceback.format_exc()}
for script in scripts:
    stdout, stderr = io.StringIO(), io.StringIO()
    sys.argv = [f"{bench}/{script}", "--help"]
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        print(stop.code if isinstance(stop.code, str) else "", file=stderr)
    except BaseException:
        code = 1
        print(traceback.format_exc(), file=stderr)
    results[script] = {"code": code, "stdout": stdout.getvalue()[:300],
                       "error": stderr.getvalue()[-2000:]}
with open(out, "w") as f:
    json.dump(results, f)
"""


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


def _json_line(stdout: str) -> dict:
    """The last JSON line a bench printed (the figure line bench/repeat.py reads)."""
    return json.loads([ln for ln in stdout.splitlines() if ln.startswith("{")][-1])


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


@pytest.fixture(scope="module")
def help_and_imports(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("bench_help") / "results.json"
    done = _run("-c", HELP_AND_IMPORTS, str(ROOT / "bench"), str(out), json.dumps(SCRIPTS),
                json.dumps(HELPERS))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.xdist_group("bench_help")
@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_imports_and_parses_its_arguments(script, help_and_imports):
    done = help_and_imports[script]
    assert done["code"] == 0, done["error"]
    assert done["stdout"].startswith("usage:"), done["stdout"]


@pytest.mark.slow
@pytest.mark.xdist_group("bench_help")
@pytest.mark.parametrize("module", HELPERS)
def test_the_helper_modules_import(module, help_and_imports):
    assert help_and_imports[module]["code"] == 0, help_and_imports[module]["error"]


ROLLOUT_WORKLOAD = ("--requests", "4", "--max-tool-turns", "1", "--tool-median", "0.001",
                    "--tool-cap", "0.01")  # fmt: skip


@pytest.mark.slow
def test_the_rollout_bench_runs_a_tiny_workload_on_a_slowed_machine(tiny_model_dir, capsys):
    rollout_bench = _bench_module("rollout_async_vs_sync")
    rollout_bench.main([*ROLLOUT_WORKLOAD, "--engine-workers", "1", "--busy-share", "0.1",
                        "--model-dir", str(tiny_model_dir)])  # fmt: skip
    line = _json_line(capsys.readouterr().out)
    assert line["requests"] == 4 and line["engine_workers"] == 1
    assert line["async_s"] > 0 and line["async_over_bound"] > 0
    # bench/slowed.py's --busy-share, recorded in the JSON line
    assert line["slowed"]["mechanism"] == "busy_share" and line["slowed"]["share"] == 0.1


@pytest.mark.slow
def test_the_rollout_bench_runs_a_tiny_workload_over_engine_workers(tiny_model_dir):
    pytest.importorskip("ray")
    # a process of its own: the Ray actors unpickle the script's functions by value
    done = _run("bench/rollout_async_vs_sync.py", *ROLLOUT_WORKLOAD, "--engine-workers", "2",
                "--model-dir", str(tiny_model_dir))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = _json_line(done.stdout)
    assert line["requests"] == 4 and line["engine_workers"] == 2
    assert line["async_s"] > 0 and line["async_over_bound"] > 0 and line["slowed"] is None


@pytest.mark.slow
def test_the_update_memory_bench_compares_both_paths_on_a_small_model(capsys):
    update_memory = _bench_module("update_memory")
    # a parent bigger than either child, as the one-process suite is: the children's peaks
    # are their own (VmHWM), not the parent's carried across execve (ru_maxrss tied at 1.66)
    ballast = bytearray(b"\x01") * (3 * 2**30)
    assert update_memory.main(["--rows", "2", "--length", "256", "--repeats", "1"]) == 0
    del ballast
    line = _json_line(capsys.readouterr().out)
    assert line["old"]["peak_rss_gb"] < 2.5
    assert {"peak_ratio", "time_ratio"} <= set(line)
    assert line["new"]["tokens"] == line["old"]["tokens"] == 512
    # at 2 x 256 tokens the full path's fp32 logits copies (151,936 a position) are what its
    # peak is made of: measured 1.03 GiB against 1.46 alone, 1.46 against 1.54 in a
    # fresh-clone run under xdist (at 2 x 128 both were the start-up peak, 1.50): lower
    assert line["new"]["peak_rss_gb"] < line["old"]["peak_rss_gb"]


@pytest.mark.slow
def test_the_kv_cache_bench_runs_each_cache_in_its_own_process(capsys):
    kv_cache = _bench_module("kv_cache")
    assert kv_cache.main(["--size", "nano", "--rows", "4", "--tokens", "40",
                          "--generations", "2"]) == 0  # fmt: skip
    line = _json_line(capsys.readouterr().out)
    assert {"first_ratio", "steady_time_ratio", "peak_ratio"} <= set(line)
    assert line["chunked"]["kv_layer"] == "ChunkedKVLayer"
    assert line["dynamic"]["kv_layer"] == "DynamicLayer"  # the reference really ran
    assert line["chunked"]["tokens_per_generation"] == line["dynamic"]["tokens_per_generation"] == 160


@pytest.mark.slow
def test_the_decode_attention_bench_runs_both_paths_in_their_own_processes(capsys):
    decode_attention = _bench_module("decode_attention")
    assert decode_attention.main(["--rows", "4", "--tokens", "12", "--layers", "1", "--heads", "4",
                                  "--kv-heads", "2", "--head-dim", "8", "--intermediate", "32",
                                  "--generations", "2"]) == 0  # fmt: skip
    line = _json_line(capsys.readouterr().out)
    assert line["same_tokens"] is True and line["time_ratio"] > 0
    assert line["packed"]["attn_implementation"] == "agentrl_packed_sdpa"
    assert line["transformers"]["attn_implementation"] == "sdpa"  # the reference really ran


@pytest.mark.slow
def test_the_gpu_step_bench_records_the_engine_it_really_ran_and_profiles_one_more_step(
        tmp_path):  # fmt: skip
    gpu_step = _bench_module("gpu_step")
    out = tmp_path / "step.json"
    assert gpu_step.main(["--shape", "nano", "--prompts", "2", "--n", "2", "--prompt-length", "64",
                          "--prompt-words", "8", "--response-length", "8", "--warmup", "0",
                          "--steps", "1", "--configs", "resident", "--kv-cache", "dynamic",
                          "--profile", "--out", str(out)]) == 0  # fmt: skip
    resident = json.loads(out.read_text())["resident"]
    assert [e["kv_cache"] for e in resident["engine"]] == ["dynamic"]
    assert [e["attention"] for e in resident["engine"]] == ["agentrl_packed_sdpa"]  # 4 heads / 2
    assert resident["rollout_log_probs_diff_max"] < 1e-5  # engine and trainer agree (fp32)
    # --profile: one more step, under the profiler, not among the timed ones
    assert len(resident["step_s_per_step"]) == 1
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
def test_the_gateway_overhead_bench_replays_a_cli_shaped_episode(tmp_path, tiny_model_dir):
    import transformers

    gateway_overhead = _bench_module("gateway_overhead")
    out = tmp_path / "gateway.json"
    verbosity = transformers.logging.get_verbosity()  # the bench quiets transformers
    try:
        gateway_overhead.main(["--synthesize", "--runs", "1", "--turns", "2", "--tokenizer",
                               str(tiny_model_dir), "--out", str(out)])  # fmt: skip
    finally:
        transformers.logging.set_verbosity(verbosity)
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


def test_the_seeds_script_trains_agent_mode_off_policy_apart(tmp_path):
    quickstart_seeds = _bench_module("quickstart_seeds")
    agent = "examples/agents/calculator_agent.py:run"
    cmd = quickstart_seeds.seed_command("calculator", tmp_path / "s", 3, agent_function=agent,
                                        mode="async")  # fmt: skip
    assert cmd[-3:] == [f"actor_rollout_ref.rollout.agent_function={agent}",
                        "actor_rollout_ref.rollout.multi_turn.enable=false", "trainer.mode=async"]
    assert not any(a.startswith("trainer.mode") for a in quickstart_seeds.seed_command(
        "calculator", tmp_path / "s", 3, agent_function=agent))


def _eval(accuracy: float) -> dict:
    return {"accuracy": accuracy, "accuracy_stderr": 0.02, "sampled_accuracy": accuracy,
            "sampled_accuracy_stderr": 0.03, "tool_call_rate": 1.0, "trajectories": 256}


def test_the_seeds_script_checks_the_distillation_recipe_with_its_own_teacher():
    quickstart_seeds = _bench_module("quickstart_seeds")
    assert quickstart_seeds.RECIPE_SCRIPTS["distill"] == "recipes/distill/run_cpu.sh"

    def report(teacher: float, student: float) -> dict:
        return {"eval_sft": _eval(0.3), "eval_rl": _eval(student), "control": _eval(0.35),
                "teacher": _eval(teacher), "timing_s": {"sft": 90, "rl": 50, "total": 400},
                "sft": {"steps": 600, "skill_check": {"reached_at": 200}},
                "teacher_run": {"sft": {"steps": 1050, "skill_check": {"reached_at": 650}},
                                "eval_sft": _eval(0.32), "eval_rl": _eval(teacher)}}

    good, weak = report(0.95, 0.9), report(0.80, 0.4)
    lines = quickstart_seeds.check({1: good, 2: weak}, "distill")
    assert lines == ["FAIL teacher after GRPO >= 0.85: seed 1 ok, seed 2 missed",
                     "FAIL student at least 0.20 above its SFT: seed 1 ok, seed 2 missed",
                     "FAIL student at least 0.10 above the control: seed 1 ok, seed 2 missed"]
    text = quickstart_seeds.table({2: weak, 1: good})
    assert "| 2 | 1050 (650) | 0.320 ± 0.020 | 0.800 ± 0.020 | 0.800 ± 0.020 |" in text
