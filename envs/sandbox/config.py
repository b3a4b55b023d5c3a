"""``SandboxConfig``: every limit of the code sandbox server, documented where it is defined.

The same fields are the server's command-line options (``agentrl sandbox --max-processes 32``):
``envs/sandbox/cli.py`` builds its parser from the ``help`` metadata below.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


def _opt(default, help_text: str):
    return field(default=default, metadata={"help": help_text})


@dataclass
class SandboxConfig:
    """Limits and isolation switches of one sandbox server. Sizes are per run."""

    max_concurrent: int = _opt(4, "runs executing at once; further requests wait their turn")
    default_run_timeout: float = _opt(
        10.0, "wall-clock seconds of a run when the request gives no run_timeout"
    )
    max_run_timeout: float = _opt(60.0, "largest run_timeout a request may ask for (seconds)")
    cpu_time_slack: float = _opt(
        1.0, "RLIMIT_CPU = ceil(run_timeout + slack) CPU seconds per process (SIGXCPU after)"
    )
    memory_limit_mb: int = _opt(
        1024, "RLIMIT_AS, address space per process in MiB (a request may only lower it)"
    )
    max_file_size_mb: int = _opt(16, "RLIMIT_FSIZE, largest file a run may write, MiB")
    max_processes: int = _opt(
        64, "RLIMIT_NPROC, processes + threads of the run's user at once (fork floods fail)"
    )
    max_open_files: int = _opt(128, "RLIMIT_NOFILE, open file descriptors per process")
    max_output_bytes: int = _opt(
        1 << 20, "stdout and stderr are each cut at this many bytes; the run is then stopped"
    )
    max_code_bytes: int = _opt(1 << 20, "largest code + stdin + files of one request, bytes")
    tmpfs_size_mb: int = _opt(
        64, "the run's disk budget: one private tmpfs shared by the workdir, /tmp, /var/tmp, "
            "/dev/shm and /run/lock (with a mount namespace)"
    )
    python_executable: str = _opt(
        "",
        "interpreter for user code; empty: the server's own if the sandbox user can run it, "
        "else python3 on the sandbox PATH",
    )
    uid_base: int = _opt(
        1_500_000, "when the server is root, run k uses uid/gid uid_base + k (k < max_concurrent)"
    )
    workdir_root: str = _opt("", "where run directories are staged; empty: the system temp dir")
    network_namespace: bool = _opt(True, "cut the network with a new network namespace")
    pid_namespace: bool = _opt(True, "a new pid namespace: the run sees and outlives none else")
    mount_namespace: bool = _opt(
        True, "host file systems read-only; one private tmpfs for /tmp, /var/tmp, /dev/shm, "
              "/run/lock and the workdir; a private /proc")
    ipc_namespace: bool = _opt(True, "a new IPC namespace: SysV shared memory of the run's own")
    seccomp: bool = _opt(
        True, "a seccomp filter denying new namespaces, ptrace, mount, bpf, kexec, perf, "
              "keyrings to user code")
    cgroup: bool = _opt(
        True, "a cgroup per run (root, cgroup v1 or v2) limiting the memory and processes of "
              "all its processes together")
    max_queue: int = _opt(
        16, "requests waiting for a free run slot; one more is answered 503 at once")
    max_files: int = _opt(64, "files one request may send")
    max_body_bytes: int = _opt(
        8 << 20, "largest HTTP request body, bytes (base64 files included); larger: 413")
    body_timeout: float = _opt(30.0, "seconds to receive a whole request body; slower: 408")
    require_isolation: bool = _opt(
        False, "refuse to start unless network, pid namespace and a separate user all work"
    )

    def validate(self) -> SandboxConfig:
        """Check every value; raise ``ValueError`` naming the field. Returns self."""
        positive = (
            "max_concurrent",
            "default_run_timeout",
            "max_run_timeout",
            "memory_limit_mb",
            "max_file_size_mb",
            "max_processes",
            "max_open_files",
            "max_output_bytes",
            "max_code_bytes",
            "tmpfs_size_mb",
            "uid_base",
            "max_queue",
            "max_files",
            "max_body_bytes",
            "body_timeout",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.cpu_time_slack < 0:
            raise ValueError(
                f"SandboxConfig.cpu_time_slack must be >= 0, got {self.cpu_time_slack}"
            )
        if self.default_run_timeout > self.max_run_timeout:
            raise ValueError(
                f"SandboxConfig.default_run_timeout ({self.default_run_timeout}) exceeds "
                f"max_run_timeout ({self.max_run_timeout})"
            )
        return self

    def limits(self) -> dict:
        """The limits as shown by ``GET /health``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.type in ("int", "float")}
