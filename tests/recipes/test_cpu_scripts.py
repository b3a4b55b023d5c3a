"""The CPU recipe scripts: usage errors, and the exact `agentrl quickstart` command they
run (a stand-in `agentrl` records its arguments; the runs themselves are tested in
tests/quickstart)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {
    "search": "recipes/search_r1/run_cpu.sh",
    "retool": "recipes/retool/run_cpu.sh",
}
ENVS = "recipes/envs/run_cpu.sh"


def _recorded_calls(script: str, argv: list[str], tmp_path, **env: str) -> list[list[str]]:
    """Run a recipe script with a stand-in `agentrl` that records each call's arguments."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    fake = venv / "bin" / "agentrl"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" --- >> {tmp_path}/args\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "AGENTRL_VENV": str(venv), **env}
    subprocess.run(["bash", ROOT / script, *argv], cwd=tmp_path, env=env, check=True)
    calls = (tmp_path / "args").read_text().split("---\n")
    return [call.splitlines() for call in calls if call]


def _recorded_args(script: str, argv: list[str], tmp_path) -> list[str]:
    (args,) = _recorded_calls(script, argv, tmp_path)
    return args


def test_envs_script_runs_reasoning_gym_then_the_game_each_in_its_own_dir(tmp_path):
    calls = _recorded_calls(ENVS, ["out dir", "--seed", "2"], tmp_path)
    assert calls == [
        ["quickstart", "--task", task, "--out-dir", f"out dir/{task}", "--seed", "2"]
        for task in ("reasoning_gym", "blackjack")
    ]
    (tmp_path / "args").unlink()
    (one,) = _recorded_calls(ENVS, ["o"], tmp_path, AGENTRL_ENVS_TASKS="blackjack")
    assert one == ["quickstart", "--task", "blackjack", "--out-dir", "o/blackjack"]
    bad = subprocess.run(["bash", ROOT / ENVS, "o"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "AGENTRL_ENVS_TASKS": "chess"})
    assert bad.returncode == 2 and "unknown task 'chess'" in bad.stderr


@pytest.mark.parametrize("task", sorted(SCRIPTS))
def test_script_runs_its_quickstart_task_with_the_given_flags(task, tmp_path):
    args = _recorded_args(SCRIPTS[task], ["out dir", "--seed", "2"], tmp_path)
    assert args == ["quickstart", "--task", task, "--out-dir", "out dir", "--seed", "2"]


@pytest.mark.parametrize("script", [*sorted(SCRIPTS.values()), ENVS])
@pytest.mark.parametrize("argv", [[], ["--seed", "1"]])
def test_script_without_out_dir_prints_its_usage(script, argv):
    done = subprocess.run(["bash", ROOT / script, *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert f"usage: bash {script} OUT_DIR" in done.stderr


def test_dapo_script_runs_the_calculator_task_with_dapo_overrides_that_load(tmp_path):
    from agentrl.config import load_config

    args = _recorded_args("recipes/dapo/run_cpu.sh", ["out", "--seed", "2"], tmp_path)
    assert args[:7] == ["quickstart", "--task", "calculator", "--out-dir", "out", "--seed", "2"]
    cfg = load_config(ROOT / "recipes/quickstart/config.yaml", args[7:])
    assert cfg.algorithm.filter_groups.enable and cfg.reward_model.reward_manager == "dapo"
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28


def test_distill_script_trains_a_teacher_then_distils_the_student_from_it(tmp_path):
    """The teacher run (a larger model, no control), then the student run with --teacher
    pointing at the teacher's last export; the student's report becomes OUT/report.json."""
    import json
    import sys

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    report = {k: {"accuracy": 0.5, "accuracy_stderr": 0.03}
              for k in ("eval_sft", "eval_rl", "control", "teacher")}
    fake = venv / "bin" / "agentrl"
    fake.write_text(f"""#!/bin/sh
printf "%s\\n" "$@" >> {tmp_path}/calls; echo --- >> {tmp_path}/calls
out=$3
mkdir -p "$out/rl/global_step_7/actor/huggingface"
echo 7 > "$out/rl/latest_checkpointed_iteration.txt"
echo '{json.dumps(report)}' > "$out/report.json"
""")
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "AGENTRL_VENV": str(venv)}
    done = subprocess.run(["bash", ROOT / "recipes/distill/run_cpu.sh", "out", "--seed", "3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    teacher_call, student_call, _ = (tmp_path / "calls").read_text().split("---\n")
    assert teacher_call.split() == ["quickstart", "--out-dir", "out/teacher", "--size", "tiny",
                                    "--no-control", "--seed", "3"]
    assert student_call.split() == [
        "quickstart", "--out-dir", "out/student", "--teacher",
        "out/teacher/rl/global_step_7/actor/huggingface", "--seed", "3"]
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report
    assert "teacher   accuracy 0.500 ± 0.030" in done.stdout
    # a given teacher: no teacher run
    (tmp_path / "calls").unlink()
    subprocess.run(["bash", ROOT / "recipes/distill/run_cpu.sh", "again"], cwd=tmp_path,
                   env={**env, "AGENTRL_DISTILL_TEACHER": "/models/t"}, check=True,
                   capture_output=True)
    (only, _) = (tmp_path / "calls").read_text().split("---\n")
    assert only.split() == ["quickstart", "--out-dir", "again/student", "--teacher", "/models/t"]
    usage = subprocess.run(["bash", ROOT / "recipes/distill/run_cpu.sh"], capture_output=True,
                           text=True)
    assert usage.returncode == 2 and "usage: bash recipes/distill/run_cpu.sh OUT_DIR" in (
        usage.stderr)


@pytest.mark.parametrize("failing", ["teacher", "student"])
def test_distill_script_stops_with_the_status_and_message_of_a_run_that_missed_its_target(
    failing, tmp_path
):
    """A run that stops (a missed target: exit status 3) stops the recipe with that status,
    the run's own message and a line naming the run; a stopped teacher trains no student."""
    import json
    import sys

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    fails = '"$4" = "--teacher"' if failing == "student" else '"$4" = "--size"'
    fake = venv / "bin" / "agentrl"
    fake.write_text(f"""#!/bin/sh
echo "$3" >> {tmp_path}/calls
out=$3
mkdir -p "$out/rl/global_step_1/actor/huggingface"
echo 1 > "$out/rl/latest_checkpointed_iteration.txt"
echo '{json.dumps({"targets": {"x": {"target_met": False}}})}' > "$out/report.json"
if [ {fails} ]; then echo "stopped after the x stage, which missed its target" >&2; exit 3; fi
""")
    fake.chmod(0o755)
    done = subprocess.run(["bash", ROOT / "recipes/distill/run_cpu.sh", "out", "--seed", "3"],
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "AGENTRL_VENV": str(venv)},
                          capture_output=True, text=True)
    assert done.returncode == 3
    assert "stopped after the x stage, which missed its target" in done.stderr
    calls = (tmp_path / "calls").read_text().split()
    if failing == "teacher":
        assert calls == ["out/teacher"]
        assert ("the teacher run stopped (exit status 3): no student was trained; its report: "
                "out/teacher/report.json") in done.stderr
    else:
        assert calls == ["out/teacher", "out/student"]
        assert "the student run stopped (exit status 3): the student was not distilled" in (
            done.stderr)
        assert (tmp_path / "out" / "report.json").is_file()  # what the student's run has
    assert "accuracy" not in done.stdout


@pytest.mark.parametrize("script", [*sorted(SCRIPTS.values()), ENVS, "recipes/dapo/run_cpu.sh"])
def test_a_script_exits_with_the_status_and_message_of_a_run_that_missed_its_target(
    script, tmp_path
):
    """`agentrl quickstart` stopping on a missed target (status 3) stops the recipe with
    that status and its message; the envs recipe runs no further task."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "agentrl"
    fake.write_text(f'#!/bin/sh\necho "$5" >> {tmp_path}/calls\n'
                    'echo "o: stopped after the sft stage, which missed its target" >&2\nexit 3\n')
    fake.chmod(0o755)
    done = subprocess.run(["bash", ROOT / script, "o"], cwd=tmp_path, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "AGENTRL_VENV": str(venv)})
    assert done.returncode == 3
    assert "o: stopped after the sft stage, which missed its target" in done.stderr
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
