"""`trainer.trace`: one Chrome / Perfetto trace file per training step.

    trace = StepTrace(enabled=True, directory=run_dir / "trace")
    with trace.step(7):                        # -> run_dir/trace/step_7.json
        with timer("gen", timing, trace.stages): ...     # the trainer's stages (PPOTrainer.stage)
        trace.request(batch)                   # the rollout of `batch` records its requests
        out = actor_rollout.generate_sequences(batch)
        trace.absorb(out)                      # ... and hands them back in its meta_info

The file (`trace/step_N.json` beside `metrics.jsonl`, in the run directory) opens in
ui.perfetto.dev or chrome://tracing, offline. Its processes and tracks:

- the driver (`trainer`): the step and every stage `PPOTrainer.stage` times (`gen`,
  `reward`, `old_log_prob`, `ref`, `adv`, `update_actor`, `weight_sync`, `testing`, ...),
  the same intervals as the `timing_s/*` metrics;
- each rank's rollout (`rollout`): one track per request, `request` holding one span per
  state it ran (`PENDING`, `RUNNING`, `TOOL_CALLING`, `INTERACTING`) and `end_plugins`, each
  `generate` call (server, prompt and output tokens, policy version) and `tool` call
  (tool, latency, outcome) inside its state;
- each rank's worker (`worker rank R`): `update_policy` and, when the actor syncs the
  rollout in its update, `weight_sync`;
- the off-policy producer (`producer`): its requests as they ran, drained after each
  step's weight sync, so they overlap the trainer's stages of the step they ran in.

Recording is cheap (a tuple per span, agentrl/utils/trace.py); the file is not built
in the step: when a step ends its events go to a `TraceWriter` (agentrl/utils/trace_writer.py),
whose thread builds the trace and writes it while the next step runs. `flush` waits for the
files so far (the trainer's `fit` does before it returns), `close` also stops the thread
(`PPOTrainer.close`).

Off (the default) the trainer holds a `StepTrace` whose `stages` is None and whose methods
return at once: no recorder exists, no batch asks for events, and no thread is started.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from agentrl.protocol import DataProto
from agentrl.utils.trace import (
    TRACE_EVENTS,
    TRACE_FLAG,
    Event,
    TraceRecorder,
    Track,
    wall_us,
)
from agentrl.utils.trace_writer import TraceWriter

DRIVER = "trainer"  # the driver's process in the trace
STAGES = "stages"  # the driver's track of the step and its stages


def trace_path(directory: Path, step: int) -> Path:
    """Where step `step`'s trace goes."""
    return directory / f"step_{step}.json"


class StepTrace:
    """The trace of the step in progress (module docstring); `directory` is
    `trace/` of the run directory."""

    def __init__(self, enabled: bool, directory: Path) -> None:
        self.enabled = enabled
        self.directory = directory
        self.recorder: TraceRecorder | None = None  # while a step is traced
        self._started_us = 0
        self._writer: TraceWriter | None = None  # made by the first traced step

    @property
    def stages(self) -> Track | None:
        """The driver's stage track of the step in progress; None when not tracing."""
        return None if self.recorder is None else self.recorder.track(STAGES)

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Trace step `step`: its file is written (by the writer's thread: `flush`) when
        the block ends without an error."""
        if not self.enabled:
            yield
            return
        self.recorder = recorder = TraceRecorder(DRIVER)
        started = time.perf_counter()
        self._started_us = wall_us(started)
        try:
            yield
            ended = time.perf_counter()
            recorder.complete(STAGES, "step", started, ended, {"step": step})
            if self._writer is None:
                self._writer = TraceWriter()
            self._writer.submit(trace_path(self.directory, step), recorder.drain(),
                                step=step, window_us=[wall_us(started), wall_us(ended)])
        finally:
            self.recorder = None

    def flush(self) -> None:
        """Wait until the files of the steps traced so far are written (raises a file's
        `TraceWriteError`)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Write the files still pending and stop the writer's thread (a failure is
        logged); a later traced step starts a new one."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def request(self, batch: DataProto) -> None:
        """Ask the worker calls on `batch` (and the batches made from it) for their events."""
        if self.recorder is not None:
            batch.meta_info[TRACE_FLAG] = True

    def absorb(self, data: DataProto) -> None:
        """Take the events a worker call returned in `data.meta_info` (always removed, so
        they never travel on to the next call). Events from before the step began (a
        replayed rollout's, `rollout.skip_rollout`) are left out."""
        events = data.meta_info.pop(TRACE_EVENTS, None)
        if self.recorder is not None and events:
            self.add(e for e in events if e[3] >= self._started_us)

    def add(self, events: Iterable[Event]) -> None:
        """Events recorded elsewhere (the off-policy producer's) into the step's trace."""
        if self.recorder is not None:
            self.recorder.extend(events)


__all__ = ["DRIVER", "STAGES", "StepTrace", "trace_path"]
