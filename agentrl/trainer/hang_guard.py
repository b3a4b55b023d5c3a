"""The hang guard: the watchdog of a training run and what a hang does
(`trainer.watchdog_s`, `trainer.watchdog_action`; docs/trainer.md).

With `watchdog_action: log` a stage that makes no progress for `watchdog_s` seconds is
reported (thread and task stacks) and training goes on. With `stop`, the watchdog's thread
interrupts the training loop (SIGUSR1 to the main thread, whose handler raises
`StageHangError`); when the hang came before anything of the step changed the models, the
last finished step is saved, so a resumed run neither repeats nor skips a step.

    guard = HangGuard(HangGuardSettings.from_config(config.trainer))
    with guard.stage("gen", "step 3"): ...        # guard.watchdog.stage
    guard.remember(lambda: state_of_last_step)    # at each step's start
    guard.install() ... guard.restore()           # around the loop
    except Exception as err: raise guard.hang_error(err, save)  # after a hang
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.trainer.trainer_settings import HangGuardSettings, refuse_raw
from agentrl.trainer.watchdog import HangReport, StageHangError, Watchdog

logger = logging.getLogger(__name__)

# stages of a step that change no model: a hang in one can stop with the last step saved
STAGES_BEFORE_UPDATE = frozenset(
    {"gen", "gen_max", "reward", "old_log_prob", "ref", "teacher", "values", "adv",
     "wait_for_rollouts"}
)


class HangGuard:
    """The run's `Watchdog` and, with `watchdog_action: stop`, the stop on a hang."""

    def __init__(self, settings: HangGuardSettings) -> None:
        refuse_raw(settings, HangGuardSettings, "HangGuard")
        self.action = settings.watchdog_action
        self.watchdog = Watchdog(settings.watchdog_s, on_hang=self._on_hang)
        self.hang: HangReport | None = None
        self._start_state: dict[str, Any] | None = None
        self._previous_handler: Any = None
        self._installed = False  # our SIGUSR1 handler is in place

    @property
    def stops(self) -> bool:
        return self.action == "stop"

    def remember(self, state: Callable[[], dict[str, Any]]) -> None:
        """At a step's start: with `stop`, the driver's state a hang before the update
        saves (the last finished step's)."""
        if self.stops:
            self._start_state = state()

    def start(self) -> None:
        self.watchdog.start()
        self._install()

    def stop(self) -> None:
        self._restore()
        self.watchdog.stop()

    def _on_hang(self, report: HangReport) -> None:
        """The watchdog's callback (its thread): with `stop`, interrupt the training loop,
        which raises StageHangError in the main thread."""
        if self._installed and self.hang is None:  # else SIGUSR1 would kill the process
            self.hang = report
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def _install(self) -> None:
        if not self.stops or not self.watchdog.enabled:
            return
        if threading.current_thread() is not threading.main_thread():
            logger.warning("trainer.watchdog_action=stop needs the trainer in the main "
                           "thread; a hang will only be logged")
            return

        def raise_hang(signum: int, frame: Any) -> None:
            raise StageHangError(self.hang)

        self._previous_handler = signal.signal(signal.SIGUSR1, raise_hang)
        self._installed = True

    def _restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGUSR1, self._previous_handler)
            self._installed, self._previous_handler = False, None

    def hang_error(self, err: BaseException,
                   save: Callable[[dict[str, Any]], Path]) -> BaseException | None:  # fmt: skip
        """After `err` ended the loop: None when no hang stopped it (re-raise `err`);
        else the `StageHangError` to raise, the last finished step saved with `save` when
        the hang came before the update."""
        if self.hang is None:
            return None
        # the signal's StageHangError, possibly wrapped by a worker call it interrupted
        hang = err if isinstance(err, StageHangError) else StageHangError(self.hang)
        stage = hang.report.stage
        if stage not in STAGES_BEFORE_UPDATE or self._start_state is None:
            logger.error("stopped by the watchdog in stage %r; no checkpoint (the models "
                         "may be mid-update): resume from the last one", stage)
        else:
            path = save(self._start_state)
            logger.error("stopped by the watchdog in stage %r; saved the last finished step "
                         "to %s", stage, path)
        return hang
