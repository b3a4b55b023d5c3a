"""Run one piece of Python code in the sandbox and supervise it from the server's event loop.

``SandboxRunner.run`` stages the code in a fresh directory and starts ``launcher.py`` (which
builds the cage, see there) as the leader of a new session. The event loop then watches
three things without blocking: the launcher's exit (a pidfd), and stdout and stderr (pipes
read in chunks; the first ``max_output_bytes`` of each are kept). The run ends when the
launcher exits, when the wall-clock ``run_timeout`` passes, or when an output goes over its
cap; in the last two cases the launcher's process group is SIGKILLed, and the kernel ends
the pid namespace with it. Without a pid namespace, a root server also kills every process
of the run's uid. Then the directory is deleted.

Not asyncio's subprocess API: on Python 3.11 its ``Process.wait()`` returns only once the
pipes are closed too, so a stopped reader or a straggler holding a pipe would hang it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from envs.sandbox.cgroups import CgroupManager
from envs.sandbox.config import SandboxConfig
from envs.sandbox.spec import (
    LAUNCHER_ENV,
    READ_CHUNK,
    Isolation,
    build_spec,
    launcher_argv,
    read_status,
    stage_workdir,
)

logger = logging.getLogger(__name__)

# How long the pipes may take to reach EOF once every process of the run is dead.
DRAIN_SECONDS = 2.0
# Exit polling interval on kernels without pidfd_open (before Linux 5.3).
POLL_SECONDS = 0.02


@dataclass
class RunResult:
    """One run. ``status`` uses SandboxFusion's CommandRunStatus strings."""

    status: str  # "Finished" | "TimeLimitExceeded" | "Error"
    return_code: int | None
    stdout: str
    stderr: str
    execution_time: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    message: str = ""
    sandbox_error: str | None = None  # the sandbox itself failed to run the code


class _PipeReader:
    """Reads one pipe from the event loop: keeps the first ``cap`` bytes, discards the rest.

    Reading on past the cap (until the run is killed) keeps a writer from blocking on a full
    pipe, and no more than ``cap`` bytes are ever held.
    """

    def __init__(self, fd: int, cap: int, on_over_cap: Callable[[], None]) -> None:
        self.loop = asyncio.get_running_loop()
        self.fd = fd
        self.cap = cap
        self.on_over_cap = on_over_cap
        self.data = bytearray()
        self.truncated = False
        self.eof = self.loop.create_future()
        os.set_blocking(fd, False)
        self.loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        room = self.cap - len(self.data)
        self.data += chunk[:room]
        if len(chunk) > room and not self.truncated:
            self.truncated = True
            self.on_over_cap()

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if not self.eof.done():
            self.eof.set_result(None)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def _wait_exit(proc: subprocess.Popen) -> int:
    """Await the process's exit without blocking the loop; reaps it."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        while proc.poll() is None:
            await asyncio.sleep(POLL_SECONDS)
        return proc.returncode
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return proc.wait()


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def kill_leftovers(pgid: int, uid: int | None) -> None:
    """SIGKILL the run's process group and, given a per-run uid, every process of that uid."""
    _killpg(pgid)
    if uid is None:
        return
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if uids is not None and uids.real == uid:
            with contextlib.suppress(psutil.Error):
                proc.kill()


@dataclass
class _Observed:
    out: _PipeReader
    err: _PipeReader
    timed_out: bool
    elapsed: float


class QueueFullError(RuntimeError):
    """Every run slot is busy and ``max_queue`` requests already wait for one."""


class SandboxRunner:
    """Runs code under ``config``'s limits with the isolation the machine allows.

    At most ``max_concurrent`` runs execute and ``max_queue`` wait; one more request raises
    ``QueueFullError`` at once. A cancelled ``run`` (a client that went away) ends its run.
    """

    def __init__(self, config: SandboxConfig, isolation: Isolation) -> None:
        self.config = config
        self.isolation = isolation
        self._semaphore = asyncio.Semaphore(config.max_concurrent)
        self._free_slots = list(range(config.max_concurrent))
        self.waiting = 0  # requests queued for a slot
        self._cgroups: CgroupManager | None = None
        if isolation.cgroup is not None:
            try:
                self._cgroups = CgroupManager.create()
            except OSError as e:
                logger.warning("sandbox: per-run cgroups off: %s", e)

    @property
    def busy(self) -> int:
        """Runs executing now."""
        return self.config.max_concurrent - len(self._free_slots)

    def close(self) -> None:
        """Remove this runner's cgroups (runs still going are killed)."""
        if self._cgroups is not None:
            self._cgroups.close()
            self._cgroups = None

    async def run(
        self,
        code: str,
        run_timeout: float,
        memory_limit_mb: int | None = None,
        stdin: str | None = None,
        files: dict[str, bytes] | None = None,
    ) -> RunResult:
        """Run ``code`` as ``python -u main.py``; waits while ``max_concurrent`` runs are busy
        (raises ``QueueFullError`` when ``max_queue`` already wait)."""
        memory = min(memory_limit_mb or self.config.memory_limit_mb, self.config.memory_limit_mb)
        if self._semaphore.locked() and self.waiting >= self.config.max_queue:
            raise QueueFullError(
                f"all {self.config.max_concurrent} run slots are busy and "
                f"{self.waiting} requests wait (max_queue={self.config.max_queue}); retry later"
            )
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        try:
            slot = self._free_slots.pop()
            try:
                return await self._run(slot, code, run_timeout, memory, stdin, files or {})
            finally:
                self._free_slots.append(slot)
        finally:
            self._semaphore.release()

    async def _run(self, slot, code, run_timeout, memory_mb, stdin, files) -> RunResult:
        # Per-run uid (root server): its RLIMIT_NPROC count is the run's alone.
        uid = self.config.uid_base + slot if self.isolation.separate_user else None
        start = time.monotonic()
        workdir = stage_workdir(self.config, code, files)
        cgroup = None
        try:
            if self._cgroups is not None:
                # + the launcher and the init, which are the sandbox's, not the run's
                cgroup = self._cgroups.make(slot, memory_mb, self.config.max_processes + 2)
            spec = build_spec(
                self.config,
                self.isolation.namespaces(),
                self.isolation.python,
                workdir,
                uid,
                run_timeout,
                memory_mb,
                status_fd=-1,  # set by _supervise
                seccomp=self.isolation.seccomp,
                server_pid=os.getpid(),
                cgroup_procs=cgroup.procs_files() if cgroup is not None else (),
            )
            with _stdin_file(stdin) as stdin_fd:
                observed, events = await self._supervise(spec, stdin_fd, run_timeout, start)
            result = _classify(observed, events, run_timeout, self.config)
            if cgroup is not None and cgroup.oom_killed():
                result.message = (f"the run went over its memory limit of {memory_mb} MiB "
                                  f"(all its processes together) and was killed")
            return result
        except OSError as e:
            logger.exception("sandbox run failed to start")
            problem = f"could not start the sandbox launcher: {e}"
            elapsed = round(time.monotonic() - start, 4)
            return RunResult("Error", None, "", "", elapsed, message=problem, sandbox_error=problem)
        finally:
            if cgroup is not None:
                cgroup.close()
            shutil.rmtree(workdir, ignore_errors=True)

    async def _supervise(self, spec, stdin_fd, run_timeout, start) -> tuple[_Observed, list]:
        # Without a pid namespace, stragglers may outlive the launcher: end them by uid.
        sweep_uid = spec["uid"] if not self.isolation.pid_namespace else None
        status_r, status_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        spec["status_fd"] = status_w
        try:
            proc = subprocess.Popen(
                launcher_argv(spec),
                stdin=stdin_fd,
                stdout=out_w,
                stderr=err_w,
                pass_fds=(status_w,),
                start_new_session=True,
                env=LAUNCHER_ENV,
            )
        except BaseException:
            for fd in (status_r, out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (status_w, out_w, err_w):
                os.close(fd)
        over_cap = asyncio.Event()
        out = _PipeReader(out_r, self.config.max_output_bytes, over_cap.set)
        err = _PipeReader(err_r, self.config.max_output_bytes, over_cap.set)
        exit_task = asyncio.create_task(_wait_exit(proc))
        capped = asyncio.create_task(over_cap.wait())
        try:
            done, _ = await asyncio.wait(
                {exit_task, capped}, timeout=run_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not exit_task.done():
                _killpg(proc.pid)
                await exit_task
            elapsed = time.monotonic() - start
            kill_leftovers(proc.pid, sweep_uid)
            # Every writer of the pipes is dead now: read what they left in them.
            await asyncio.wait({out.eof, err.eof}, timeout=DRAIN_SECONDS)
            events = read_status(status_r)
        finally:
            capped.cancel()
            if not exit_task.done():  # cancelled from outside: still end the run
                exit_task.cancel()
                kill_leftovers(proc.pid, sweep_uid)
                proc.wait()
            out.close()
            err.close()
            os.close(status_r)
        return _Observed(out, err, not done, elapsed), events


@contextlib.contextmanager
def _stdin_file(stdin: str | None):
    """The request's stdin as an unlinked temp file (or /dev/null), open for the child."""
    if not stdin:
        with open(os.devnull, "rb") as f:
            yield f.fileno()
        return
    with tempfile.TemporaryFile() as f:
        f.write(stdin.encode())
        f.seek(0)
        yield f.fileno()


def _classify(obs: _Observed, events: list[dict], run_timeout: float, config) -> RunResult:
    """Turn what was observed into SandboxFusion's statuses and a message saying why."""
    result = RunResult(
        status="Finished",
        return_code=None,
        stdout=obs.out.text(),
        stderr=obs.err.text(),
        execution_time=round(obs.elapsed, 4),
        stdout_truncated=obs.out.truncated,
        stderr_truncated=obs.err.truncated,
    )
    errors = [e["message"] for e in events if e.get("event") == "error"]
    exits = [e for e in events if e.get("event") == "exit"]
    if obs.out.truncated or obs.err.truncated:
        which = " and ".join(
            n for n, r in (("stdout", obs.out), ("stderr", obs.err)) if r.truncated
        )
        result.status = "Error"
        result.message = (
            f"{which} exceeded {config.max_output_bytes} bytes: output cut, the run was stopped"
        )
    elif obs.timed_out:
        result.status = "TimeLimitExceeded"
        result.message = f"run_timeout of {run_timeout:g} s exceeded: the run was killed"
    elif errors:
        result.status = "Error"
        result.sandbox_error = result.message = "; ".join(errors)
    elif not exits:
        result.status = "Error"
        result.sandbox_error = "the sandbox launcher ended without reporting the run's exit"
        result.message = result.sandbox_error
    elif "signal" in exits[-1]:
        sig = exits[-1]["signal"]
        result.return_code = -sig
        if sig == signal.SIGXCPU:
            result.status = "TimeLimitExceeded"
            result.message = "CPU time limit exceeded (SIGXCPU)"
        else:
            result.message = f"killed by signal {_signal_name(sig)}"
    else:
        result.return_code = exits[-1]["return_code"]
    return result


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)
