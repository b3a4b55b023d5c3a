"""Atomic checkpoints: a process killed in the middle of a save leaves the previous
checkpoint as the one that resumes, and the next save clears the debris."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.trainer import PPOTrainer
from agentrl.trainer import checkpointing as ckpt

# Trains with save_freq=1 and stops for good inside the save of step 2, after every part of
# the step is on disk but before it is committed (the test kills it there).
SCRIPT = textwrap.dedent("""
    import sys, time
    from agentrl.config import load_config
    from agentrl.trainer import PPOTrainer
    from agentrl.trainer import checkpointing as ckpt

    config, flag = sys.argv[1], sys.argv[2]
    write_state = ckpt.save_trainer_state

    def save_then_hang(path, state):
        write_state(path, state)
        if state["global_step"] == 2:
            open(flag, "w").close()
            time.sleep(600)

    ckpt.save_trainer_state = save_then_hang
    PPOTrainer(load_config(config)).fit()
""")


def test_partial_directories_are_committed_by_rename(tmp_path):
    partial = ckpt.partial_dir(tmp_path, 4)
    (partial / "actor").mkdir(parents=True)
    ckpt.save_trainer_state(partial, {"global_step": 4})
    assert ckpt.latest_checkpoint(tmp_path) is None  # nothing resumes from a partial save
    assert ckpt.commit(tmp_path, 4) == tmp_path / "global_step_4"
    assert not partial.exists() and ckpt.latest_checkpoint(tmp_path) == tmp_path / "global_step_4"
    ckpt.partial_dir(tmp_path, 5).mkdir()
    assert ckpt.remove_partial(tmp_path) == [ckpt.partial_dir(tmp_path, 5)]


@pytest.mark.slow
def test_a_save_killed_midway_leaves_the_previous_checkpoint_to_resume(make_config, tmp_path):
    cfg = make_config("trainer.total_training_steps=2", "trainer.save_freq=1")
    config = tmp_path / "config.yaml"
    OmegaConf.save(cfg, config)
    root = Path(cfg.trainer.default_local_dir)
    flag = tmp_path / "saving_step_2"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(config), str(flag)],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 600
    while not flag.exists():
        assert proc.poll() is None, "the training process ended before its second save"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)  # no clean-up code runs
    proc.wait()
    assert (root / ckpt.LATEST_FILE).read_text() == "1"
    assert ckpt.latest_checkpoint(root) == root / "global_step_1"
    ckpt.check_complete(root / "global_step_1", ("actor",))
    assert not (root / "global_step_2").exists() and ckpt.partial_dir(root, 2).is_dir()

    trainer = PPOTrainer(load_config(config))  # resume_mode auto: from step 1
    try:
        assert trainer.load_checkpoint() == 1
        (metrics,) = trainer.fit()
    finally:
        trainer.close()
    assert metrics["training/global_step"] == 2
    assert (root / ckpt.LATEST_FILE).read_text() == "2"
    assert sorted(p.name for p in root.glob("global_step_*")) == ["global_step_1",
                                                                  "global_step_2"]
