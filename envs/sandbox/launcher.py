"""The sandbox launcher: puts one run of user code in its cage, then execs Python on it.

The server starts this file (standard library only, ``python -I launcher.py SPEC_JSON``) as
the leader of a new session, with stdout/stderr as pipes to the server, stdin as /dev/null
(or the request's stdin), and a status pipe on fd ``spec["status_fd"]``. One run:

    launcher            in the server's namespaces, in the run's cgroup (when the server
     |                  made one); dies with the server (PR_SET_PDEATHSIG); waits for the
     |                  init; the server's wall-clock timeout SIGKILLs its process group
     +- init (pid 1)    new pid/net/mount/IPC namespaces: makes the host's file systems
         |              read-only, mounts one private tmpfs (the run's disk budget) on /tmp
         |              and binds parts of it on every other writable place (/var/tmp,
         |              /dev/shm, /run/lock, the workdir), mounts /proc, reaps zombies;
         |              when it exits the kernel kills every process left in the namespace.
         |              It dies with the launcher (PR_SET_PDEATHSIG).
         +- user code   rlimits, unprivileged uid/gid, no_new_privs, a seccomp filter
                        (no new namespaces, ptrace, mount, bpf, kexec, ...), then execve

Without a pid namespace the launcher plays the init itself: it is the subreaper of the run,
and once the user code exits it SIGKILLs every process of the run's uid and reaps them (with
no per-run uid, i.e. a non-root server, stragglers that left the process group survive).

Status lines, one JSON object each: ``{"event": "setup", ...}`` facts about the cage,
``{"event": "error", "message": ...}`` a step the kernel refused (the run did not start), and
last ``{"event": "exit", "return_code": n}`` or ``{"event": "exit", "signal": n}`` for the
user code. See docs/sandbox.md.
"""

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys
import time

STATUS_FD = -1  # set from the spec in main()

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

# mount_setattr(2) (Linux 5.12): the same number on every architecture
SYS_MOUNT_SETATTR = 442
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFREQ = "16sh22x"  # struct ifreq: name, flags, rest of the union

PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
REAP_SECONDS = 2.0

# The run's one writable tmpfs (its disk budget), and the other world-writable places that
# get a directory of it bound over them, so nothing a run writes is shared with the host or
# outlives the run.
BUDGET_DIR = "/tmp"
PRIVATE_DIRS = ("/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")

# seccomp: classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM, ENOSYS = 1, 38
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
NEW_NAMESPACE_FLAGS = (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC
                       | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | 0x80)  # 0x80: NEWTIME
# machine -> (AUDIT_ARCH_*, clone, {denied syscall: number}); the code of a run never needs
# these: new namespaces, tracing other processes, mounts, kernel modules and images, bpf,
# perf, keyrings, reading other processes' memory, userfaultfd.
SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 56, {
        "ptrace": 101, "mount": 165, "umount2": 166, "pivot_root": 155, "swapon": 167,
        "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176,
        "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
        "unshare": 272, "perf_event_open": 298, "open_by_handle_at": 304, "setns": 308,
        "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313,
        "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442}),
    "aarch64": (0xC00000B7, 220, {
        "ptrace": 117, "mount": 40, "umount2": 39, "pivot_root": 41, "swapon": 224,
        "swapoff": 225, "reboot": 142, "init_module": 105, "delete_module": 106,
        "kexec_load": 104, "add_key": 217, "request_key": 218, "keyctl": 219,
        "unshare": 97, "perf_event_open": 241, "open_by_handle_at": 265, "setns": 268,
        "process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273,
        "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442}),
}
SYS_CLONE3 = 435

_libc = ctypes.CDLL(None, use_errno=True)


def report(event: str, **fields) -> None:
    """Write one status line for the server (raw write: safe in forked children)."""
    line = json.dumps({"event": event, **fields}) + "\n"
    with contextlib.suppress(OSError):  # the server is gone: nothing left to tell
        os.write(STATUS_FD, line.encode())


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {fstype or source} on {target}",
    )


def _write_id_maps(uid: int, gid: int) -> None:
    """In a fresh user namespace, map our own uid/gid to themselves (no root inside)."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def enter_namespaces(ns: dict) -> None:
    """unshare() the namespaces the spec asks for (user first when not root)."""
    flags = 0
    if ns.get("net"):
        flags |= CLONE_NEWNET
    if ns.get("pid"):
        flags |= CLONE_NEWPID
    if ns.get("mount"):
        flags |= CLONE_NEWNS
    if ns.get("ipc"):
        flags |= CLONE_NEWIPC  # SysV shared memory, semaphores and queues of the run's own
    if not flags:
        return
    if ns.get("user"):
        uid, gid = os.getuid(), os.getgid()
        _check(_libc.unshare(CLONE_NEWUSER | flags), "unshare(user namespace)")
        _write_id_maps(uid, gid)
    else:
        _check(_libc.unshare(flags), f"unshare(flags={flags:#x})")
    if ns.get("net"):
        bring_up_loopback()


def bring_up_loopback() -> None:
    """A new network namespace has only ``lo``, down: bring it up so code can talk to itself.

    127.0.0.1 then reaches only listeners inside the run; the host's are unreachable.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack(IFREQ, b"lo", 0)
        flags = struct.unpack(IFREQ, fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def read_workdir(workdir: str) -> dict[str, bytes]:
    """The staged files (the server wrote them) to copy into the private workdir."""
    files = {}
    for name in os.listdir(workdir):
        path = os.path.join(workdir, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                files[name] = f.read()
    return files


def _bind_private(source_root: str, target: str, index: int) -> None:
    """Bind a fresh directory of the run's tmpfs over ``target`` (kept world-writable with
    the sticky bit, as /tmp-like places are)."""
    source = os.path.join(source_root, f"private-{index}")
    os.makedirs(source, exist_ok=True)
    os.chmod(source, 0o1777)
    _mount(source, target, None, MS_BIND, None)


def make_host_read_only() -> bool:
    """Every mount the run inherited becomes read-only (mount_setattr, AT_RECURSIVE): no
    host directory the run could write to survives it. False where the kernel lacks it."""
    attr = struct.pack("QQQQ", MOUNT_ATTR_RDONLY, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    result = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, buf, len(attr))
    if result != 0:
        report("setup", read_only_host=False, reason=os.strerror(ctypes.get_errno()))
        return False
    report("setup", read_only_host=True)
    return True


def setup_mounts(spec: dict, with_proc: bool) -> None:
    """The host's mounts read-only; one private tmpfs on /tmp (the run's whole disk budget)
    with directories of it bound over the other writable places and the workdir; a /proc of
    the run's own pids."""
    workdir = spec["workdir"]
    files = read_workdir(workdir)
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    make_host_read_only()
    size = f"size={int(spec['tmpfs_size_mb'])}m"
    _mount("tmpfs", BUDGET_DIR, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=1777")
    private_root = os.path.join(BUDGET_DIR, ".private")
    os.makedirs(private_root, mode=0o755, exist_ok=True)
    done = {os.path.realpath(BUDGET_DIR)}
    for index, path in enumerate(PRIVATE_DIRS):
        real = os.path.realpath(path)
        if real in done or not os.path.isdir(real):
            continue
        done.add(real)
        _bind_private(private_root, real, index)
    tmp_view = os.path.join(private_root, "tmp")  # what the run sees as /tmp
    os.makedirs(tmp_view, exist_ok=True)
    os.chmod(tmp_view, 0o1777)
    under_tmp = os.path.dirname(os.path.realpath(workdir)) == os.path.realpath(BUDGET_DIR)
    if under_tmp:  # hidden by the new /tmp: the same path in the run's /tmp
        os.makedirs(os.path.join(tmp_view, os.path.basename(workdir)))
    else:  # a workdir_root elsewhere: a directory of the budget bound over it
        source = os.path.join(private_root, "workdir")
        os.makedirs(source, exist_ok=True)
        _mount(source, workdir, None, MS_BIND, None)
    # Last: /tmp shows its own directory of the budget, hiding the others' sources.
    _mount(tmp_view, BUDGET_DIR, None, MS_BIND, None)
    os.chmod(workdir, 0o700)
    for name, data in files.items():
        with open(os.path.join(workdir, name), "wb") as f:
            f.write(data)
    if with_proc:
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
            report("setup", private_proc=True)
        except OSError as e:  # e.g. a container that masks parts of /proc
            report("setup", private_proc=False, reason=str(e))


def seccomp_program(machine: str) -> bytes | None:
    """The BPF filter for ``machine`` (None: an architecture without a table here).

    A foreign architecture (i386 calls on x86_64) or the x32 ABI kills the process; the
    denied calls fail with EPERM; clone with a new-namespace flag fails with EPERM; clone3
    (whose flags the filter cannot read) fails with ENOSYS, so libc falls back to clone.
    """
    if machine not in SECCOMP_ARCHES:
        return None
    arch, clone_nr, denied = SECCOMP_ARCHES[machine]
    eperm, allow = SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    prog = [
        (BPF_LD_W_ABS, 0, 0, 4),  # arch
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, 0),  # nr
    ]
    if machine == "x86_64":
        prog += [(BPF_JGE_K, 0, 1, 0x40000000), (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    for number in sorted(denied.values()):
        prog += [(BPF_JEQ_K, 0, 1, number), (BPF_RET_K, 0, 0, eperm)]
    prog += [(BPF_JEQ_K, 0, 1, SYS_CLONE3), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS)]
    prog += [
        (BPF_JEQ_K, 0, 4, clone_nr),
        (BPF_LD_W_ABS, 0, 0, 16),  # the low 32 bits of args[0]: clone's flags
        (BPF_JSET_K, 0, 1, NEW_NAMESPACE_FLAGS),
        (BPF_RET_K, 0, 0, eperm),
        (BPF_RET_K, 0, 0, allow),
        (BPF_RET_K, 0, 0, allow),
    ]
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)


def install_seccomp(program: bytes) -> None:
    """Load the filter (needs no_new_privs or CAP_SYS_ADMIN); raises OSError if refused."""
    count = len(program) // 8
    filters = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HxxxxxxQ", count, ctypes.addressof(filters))
    fprog_buf = ctypes.create_string_buffer(fprog, len(fprog))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buf, 0, 0), "seccomp filter")


def chown_tree(path: str, uid: int, gid: int) -> None:
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid)
    os.chown(path, uid, gid)


def exec_user_code(spec: dict) -> None:
    """In the forked child: limits, drop privileges, exec. Never returns."""
    try:
        uid, gid = spec.get("uid"), spec.get("gid")
        if uid is not None:
            chown_tree(spec["workdir"], uid, gid)
        os.chdir(spec["workdir"])
        for name, (soft, hard) in spec["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        if uid is not None:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        # After the uid change: the kernel clears the parent-death signal on credential change.
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        if spec.get("seccomp"):
            program = seccomp_program(os.uname().machine)
            if program is None:
                raise OSError(f"no seccomp table for {os.uname().machine}")
            install_seccomp(program)
            report("setup", seccomp=True)
        os.execve(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as e:  # any failure before the exec is a setup error
        report("error", message=f"starting the user code failed: {e}")
    os._exit(127)


def exit_fields(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"return_code": os.waitstatus_to_exitcode(status)}


def end_descendants(uid: int | None) -> None:
    """Without a pid namespace: SIGKILL every process of the run's uid, then reap them.

    A helper drops to ``uid`` and calls kill(-1): that signals every process the uid owns
    (the run's uid is its own), wherever they moved (new session, new process group). The
    launcher is their subreaper, so it reaps them and leaves no zombie behind.
    """
    if uid is None:
        return  # the code runs as our own uid: kill(-1) would hit the server
    helper = os.fork()
    if helper == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(helper, 0)
    deadline = time.monotonic() + REAP_SECONDS
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.005)


def run_init(spec: dict, in_pid_namespace: bool) -> int:
    """Mount, start the user code, reap until it exits, then end whatever it left behind.

    As pid 1 of a new pid namespace, returning is enough: the kernel kills the rest.
    """
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if not in_pid_namespace:  # orphans of the run are re-parented to us, not to init
        _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")
    try:
        if spec["namespaces"].get("mount"):
            setup_mounts(spec, with_proc=in_pid_namespace)
    except OSError as e:
        report("error", message=f"sandbox mount setup failed: {e}")
        return 1
    user_pid = os.fork()
    if user_pid == 0:
        exec_user_code(spec)
    while True:
        pid, status = os.wait()
        if pid == user_pid:
            report("exit", **exit_fields(status))
            break
    if not in_pid_namespace:
        end_descendants(spec.get("uid"))
    return 0


def main(argv: list[str]) -> int:
    global STATUS_FD
    spec = json.loads(argv[1])
    STATUS_FD = spec["status_fd"]
    os.set_inheritable(STATUS_FD, False)  # closed when the user code execs
    # Die with the server: a crashed server leaves no run behind (the init and the user
    # code die with us in turn). The check covers a server that died before the prctl.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if spec.get("server_pid") and os.getppid() != spec["server_pid"]:
        return 1
    try:
        for procs_file in spec.get("cgroup_procs") or ():
            with open(procs_file, "w") as f:  # before any child: all of the run is inside
                f.write(str(os.getpid()))
    except OSError as e:
        report("error", message=f"joining the run's cgroup failed: {e}")
        return 1
    try:
        enter_namespaces(spec["namespaces"])
    except OSError as e:
        report("error", message=f"sandbox namespace setup failed: {e}")
        return 1
    if not spec["namespaces"].get("pid"):
        return run_init(spec, in_pid_namespace=False)
    init_pid = os.fork()  # unshare(CLONE_NEWPID) puts our children, not us, in the namespace
    if init_pid == 0:
        os._exit(run_init(spec, in_pid_namespace=True))
    os.waitpid(init_pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
