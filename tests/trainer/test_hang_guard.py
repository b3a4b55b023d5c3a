"""The hang guard: a hang before the update saves the last finished step, one during it
saves nothing, no hang re-raises the error as it was; SIGUSR1 only with `stop`."""

from __future__ import annotations

import signal
import threading

import pytest
from omegaconf import OmegaConf

from agentrl.trainer.hang_guard import HangGuard
from agentrl.trainer.trainer_settings import HangGuardSettings
from agentrl.trainer.watchdog import HangReport, StageHangError


def _guard(action="stop", watchdog_s=30.0):
    return HangGuard(HangGuardSettings.from_config(
        OmegaConf.create({"watchdog_action": action, "watchdog_s": watchdog_s})))


def _report(stage):
    return HangReport(stage=stage, detail="step 3", stalled_s=31.0, thread_name="MainThread",
                      outer_stages=(), text="stacks")  # fmt: skip


def test_no_hang_means_the_error_is_raised_as_it_is():
    guard = _guard()
    assert guard.hang_error(ValueError("boom"), save=pytest.fail) is None


@pytest.mark.parametrize(("stage", "saved"), [("gen", True), ("update_actor", False)])
def test_a_hang_saves_the_last_finished_step_only_before_the_update(stage, saved):
    guard = _guard()
    guard.remember(lambda: {"global_step": 2})
    guard.hang = _report(stage)
    saves = []
    wrapped = RuntimeError("a worker call the signal interrupted")
    hang = guard.hang_error(wrapped, save=lambda state: saves.append(state) or "ckpt")
    assert isinstance(hang, StageHangError) and hang.report.stage == stage
    assert saves == ([{"global_step": 2}] if saved else [])
    original = StageHangError(guard.hang)
    assert guard.hang_error(original, save=lambda state: "ckpt") is original


def test_remember_keeps_nothing_unless_the_action_is_stop():
    guard = _guard(action="log")
    guard.remember(pytest.fail)  # not even called
    guard.hang = _report("gen")
    assert guard.hang_error(RuntimeError(), save=pytest.fail) is not None


def test_the_sigusr1_handler_is_installed_in_the_main_thread_and_restored():
    before = signal.getsignal(signal.SIGUSR1)
    guard = _guard()
    guard.start()
    try:
        assert signal.getsignal(signal.SIGUSR1) is not before
        guard.hang = _report("gen")
        with pytest.raises(StageHangError):
            signal.raise_signal(signal.SIGUSR1)
    finally:
        guard.stop()
    assert signal.getsignal(signal.SIGUSR1) is before
    logged = _guard(action="log")
    logged.start()
    assert signal.getsignal(signal.SIGUSR1) is before  # `log` never interrupts
    logged.stop()


def test_outside_the_main_thread_a_hang_is_only_logged(caplog):
    before = signal.getsignal(signal.SIGUSR1)
    guard = _guard()
    thread = threading.Thread(target=guard.start)
    thread.start()
    thread.join()
    guard.stop()
    assert signal.getsignal(signal.SIGUSR1) is before
    assert "needs the trainer in the main thread" in caplog.text
