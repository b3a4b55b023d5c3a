"""The sandbox launcher: puts one run of user code in its cage, then execs Python on it.

The server starts this file (standard library only, ``python -I launcher.py SPEC_JSON``) as
the leader of a new session, with stdout/stderr as pipes to the server, stdin as /dev/null
(or the request's stdin), and a status pipe on fd ``spec["status_fd"]``. One run:

    launcher            in the server's namespaces; waits for the init; the server's
     |                  wall-clock timeout SIGKILLs its process group
     +- init (pid 1)    new pid/net/mount namespaces: mounts a private /tmp, /dev/shm,
         |              workdir and /proc, reaps zombies; when it exits the kernel kills
         |              every process left in the namespace. It dies with the launcher
         |              (PR_SET_PDEATHSIG), so killing the launcher's group ends the run.
         +- user code   rlimits, unprivileged uid/gid, no_new_privs, then execve(python)

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
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_PRIVATE = 0x40000

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFREQ = "16sh22x"  # struct ifreq: name, flags, rest of the union

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
REAP_SECONDS = 2.0

# World-writable places that would otherwise be shared between runs (and with the host).
PRIVATE_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")

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


def setup_mounts(spec: dict, with_proc: bool) -> None:
    """Private tmpfs on /tmp, /var/tmp, /dev/shm and the workdir; a /proc of our own pids."""
    size = f"size={int(spec['tmpfs_size_mb'])}m"
    workdir = spec["workdir"]
    files = read_workdir(workdir)
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    for path in PRIVATE_TMP_DIRS:
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=1777")
    os.makedirs(workdir, exist_ok=True)  # hidden by the new /tmp: recreate the same path
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=0700")
    for name, data in files.items():
        with open(os.path.join(workdir, name), "wb") as f:
            f.write(data)
    if with_proc:
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
            report("setup", private_proc=True)
        except OSError as e:  # e.g. a container that masks parts of /proc
            report("setup", private_proc=False, reason=str(e))


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
