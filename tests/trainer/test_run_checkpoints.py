"""Tests for agentrl/trainer/run_checkpoints.py: the driver's share of a checkpoint is saved
with the models' and restored into the driver's parts (the trainer's resume runs:
tests/trainer/test_ppo_trainer.py); an async run, on the engine's path and in agent mode,
killed with kill -9 at random moments and resumed trains every prompt once."""

from __future__ import annotations

import json
import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentrl.algos import get_kl_controller
from agentrl.trainer.alerts import BehaviourMonitor
from agentrl.trainer.run_checkpoints import RunCheckpoints
from agentrl.trainer.trainer_settings import AlertSettings, CheckpointSettings
from tests.trainer.conftest import serve_pids


class Loader:
    def __init__(self, position: int = 0) -> None:
        self.position = position

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


class Source:
    """A batch source with state of its own (as the off-policy producer's queue)."""

    def __init__(self, queued: int = 0) -> None:
        self.queued = queued

    def state_dict(self) -> dict:
        return {"producer": {"queued": self.queued}}


class Part:
    """A worker group's checkpoint calls: saving writes a file, loading records the path."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def save_checkpoint(self, path: str, global_step: int, **kwargs) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "step").write_text(str(global_step))

    def load_checkpoint(self, path: str) -> None:
        self.loaded.append(path)


def _trainer_config(root, mode="auto"):
    return CheckpointSettings(default_local_dir=str(root), resume_mode=mode, resume_from_path=None,
                              save_hf_model_at_end=False, max_actor_ckpt_to_keep=None,
                              max_critic_ckpt_to_keep=None)


def _kl(value: float):
    return get_kl_controller(SimpleNamespace(type="adaptive", kl_coef=value, target_kl=0.1,
                                             horizon=100))


def _monitor() -> BehaviourMonitor:
    return BehaviourMonitor(AlertSettings(window=3, stop_on_alert=False, thresholds={}))


def test_a_saved_step_resumes_every_part_of_the_driver(tmp_path):
    monitor = _monitor()
    monitor.best = {"reward": 0.8}
    kl = _kl(0.05)
    kl.value = 0.0123
    saving = RunCheckpoints(_trainer_config(tmp_path), None, Loader(7), kl, monitor, Source(3))
    models = SimpleNamespace(actor_rollout=Part(), critic=None)
    state = saving.driver_state(4)
    assert state == {"global_step": 4, "dataloader": {"position": 7}, "kl_coef": 0.0123,
                     "alerts": monitor.state_dict(), "producer": {"queued": 3}}
    path = saving.save(models, state)
    assert path == tmp_path.resolve() / "global_step_4"
    assert (path / "actor" / "step").read_text() == "4"

    fresh_monitor = _monitor()
    loader, fresh_kl, source = Loader(), _kl(0.05), Source()
    resuming = RunCheckpoints(_trainer_config(tmp_path), path, loader, fresh_kl, fresh_monitor,
                              source)
    restored = SimpleNamespace(actor_rollout=Part(), critic=None)
    assert resuming.resume(restored, 0) == 4
    assert restored.actor_rollout.loaded == [str(path.resolve() / "actor")]
    assert (loader.position, fresh_kl.value) == (7, 0.0123)
    assert resuming.resumed["producer"] == {"queued": 3}  # for the source's `running`
    assert fresh_monitor.best == {"reward": 0.8}


def test_a_fresh_start_keeps_the_step_and_says_so(tmp_path, caplog):
    checkpoints = RunCheckpoints(_trainer_config(tmp_path, "disable"), None, Loader(), None,
                                 _monitor(), Source())
    with caplog.at_level(logging.INFO, logger="agentrl.trainer.run_checkpoints"):
        assert checkpoints.resume(SimpleNamespace(actor_rollout=Part(), critic=None), 0) == 0
    assert "training from scratch (resume_mode=disable)" in caplog.text
    assert "kl_coef" not in checkpoints.driver_state(0)  # no adaptive KL controller
    assert checkpoints.resumed == {}


# --- a run killed with kill -9 at random moments, resumed each time (issue 53's item 2) ---

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _saved(marker: Path) -> int:
    """The last step whose checkpoint is complete (0: none yet)."""
    try:
        return int(marker.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _wait_for(marker: Path, step: int, proc: subprocess.Popen, deadline: float) -> float:
    while _saved(marker) < step:
        assert proc.poll() is None, f"the run ended before saving step {step}"
        assert time.monotonic() < deadline, f"no checkpoint of step {step} in time"
        time.sleep(0.02)
    return time.monotonic()


@pytest.mark.slow
@pytest.mark.parametrize("agent", [False, True], ids=["engine", "agent_mode"])
def test_an_async_run_killed_at_random_moments_trains_every_prompt_once(
    agent, tiny_model_dir, trainer_data, tmp_path
):
    """kill -9 twice, each time at a random moment of a step (a uniform time within one
    step's length after two steps of this run were saved: generation, the update, the
    checkpoint's write alike), resume each time, and finish: the steps each run saved (and
    the last run's) trained every prompt of the data order exactly once, n samples each, and
    no rollout server outlived a killed trainer. The moments' seed is printed
    (AGENTRL_KILL_SEED reruns them)."""
    seed = int(os.environ.get("AGENTRL_KILL_SEED") or secrets.randbelow(1_000_000))
    print(f"kill moments seed: {seed} (AGENTRL_KILL_SEED={seed} reruns them)")
    rng = random.Random(seed)
    model = tmp_path / "model"  # a path of its own, to find this test's servers
    model.symlink_to(tiny_model_dir, target_is_directory=True)
    steps, batch, n, kills = 8, 2, 2, 2
    args = [
        f"actor_rollout_ref.model.path={model}", f"data.train_files={trainer_data['train']}",
        f"data.train_batch_size={batch}", "data.max_prompt_length=768", "trainer.seed=0",
        f"actor_rollout_ref.rollout.n={n}", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "algorithm.adv_estimator=grpo", f"custom_reward_function.path={FIXTURES / 'easy_reward.py'}",
        "custom_reward_function.name=compute_score",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.logger=[console]",
        "trainer.val_before_train=false", f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1", "trainer.mode=async", "off_policy.max_staleness=1",
    ]  # fmt: skip
    if agent:  # three calls an episode with pauses: kills land mid-episode too
        args += [f"actor_rollout_ref.rollout.agent_function={FIXTURES / 'multi_call_agent.py'}:run",
                 "actor_rollout_ref.rollout.agent_timeout=60", "data.max_response_length=64",
                 "actor_rollout_ref.rollout.multi_turn.enable=false"]  # fmt: skip
    else:
        args += ["data.max_response_length=24", "actor_rollout_ref.rollout.multi_turn.enable=true",
                 f"actor_rollout_ref.rollout.multi_turn.tool_config_path={trainer_data['tools']}"]
    command = [sys.executable, "-m", "agentrl.trainer.main_ppo", *args]
    env = {**os.environ, "PYTHONPATH": f"{Path.cwd()}:{os.environ.get('PYTHONPATH', '')}"}
    marker = tmp_path / "ckpt" / "latest_checkpointed_iteration.txt"
    saved = [0]  # the last step saved before each run
    for run in range(kills):
        proc = subprocess.Popen([*command, f"trainer.rollout_data_dir={tmp_path / f'run{run}'}"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 240
        first = _wait_for(marker, saved[-1] + 1, proc, deadline)
        step_s = _wait_for(marker, saved[-1] + 2, proc, deadline) - first
        time.sleep(rng.uniform(0, step_s))  # somewhere in the next step
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        until = time.monotonic() + 30
        while serve_pids(model) and time.monotonic() < until:
            time.sleep(0.1)
        assert not serve_pids(model), "a rollout server outlived the killed trainer"
        saved.append(_saved(marker))
        assert saved[-1] >= saved[-2] + 2
    assert saved[-1] < steps, "the runs finished before the last kill"
    last = subprocess.run([*command, f"trainer.rollout_data_dir={tmp_path / 'last'}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, last.stderr[-3000:]
    dumps = [tmp_path / f"run{run}" for run in range(kills)] + [tmp_path / "last"]
    bounds = [*saved, steps]
    rows = []
    for dump, lo, hi in zip(dumps, bounds[:-1], bounds[1:], strict=True):  # what each run saved
        for step in range(lo + 1, hi + 1):
            rows += [json.loads(line) for line in (dump / f"{step}.jsonl").read_text().splitlines()]
    trained = Counter(row["uid"] for row in rows)
    assert trained == {f"{b}-{i}": n for b in range(1, steps + 1) for i in range(batch)}
    # no trained trajectory staler than the bound (the dumped per-token versions)
    assert all(row["step"] - 1 - min(row["policy_versions"]) <= 1
               for row in rows if row["policy_versions"])  # fmt: skip
    if agent:
        assert all(row["policy_versions"] for row in rows)  # every call's tokens versioned
