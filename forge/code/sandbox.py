"""Run untrusted Python (model-generated code) in a separate, confined process.

One process per submission: the same interpreter as ours, started isolated (``-I -S -B``, no site-packages),
with an empty environment, a fresh scratch directory as cwd, resource limits (CPU, address space, file size,
open files, processes, no core dumps), its own session and a wall-clock deadline after which everything it
started is killed; stdout/stderr are capped.

When we run as root (as on the Forge CPU machines) the child also gets:
- its own uid/gid for the run (taken from a private range and locked, so concurrent runs never share one):
  RLIMIT_NPROC counts exactly this run's processes, runs cannot touch each other's scratch directories, and
  after the run every process of that uid is killed, including daemons that left the process group;
- a network namespace with no interfaces up (even 127.0.0.1, where Prefect's and MLflow's servers listen);
- a mount namespace where the home, temporary and checkout directories are empty read-only tmpfs (the
  interpreter's prefix and the scratch directories are bound back in), so the only writable place it sees
  is its scratch directory.
The namespaces are made once per process (``isolation_report()`` says what the host allowed) and entered by
each child with setns(2), which is cheap; creating a namespace per run is slow under load (STACK.md).
Running without uid and network isolation is refused unless ``allow_weak_isolation=True``.

    from forge.code.sandbox import run_python, isolation_report
    print(isolation_report())
    result = run_python("print(sum(range(10)))", timeout_s=2, memory_mb=256)
    assert result.status == "ok" and result.stdout == "45\\n"

Known gaps for the hardening issue: no pid namespace (``/proc`` shows host command lines), no seccomp filter,
no cgroup memory accounting (RLIMIT_AS bounds each process, not the sum of a run's processes).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Status = Literal["ok", "runtime_error", "timeout", "memory_limit", "output_limit", "killed"]

# Per-run uids/gids come from this range (far above any real account, below the 2**31 some tools choke on).
UID_BASE = 1_900_000_000
UID_SPAN = 65_536
# Limits that do not depend on the submission.
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_OPEN_FILES = 64
MAX_PROCESSES = 32

# The real interpreter binary: a venv's bin/python is a symlink into a prefix the child may not see.
PYTHON = os.path.realpath(sys.executable)


class SandboxUnavailable(RuntimeError):
    """The host cannot isolate the child as strongly as asked."""


@dataclass(frozen=True)
class SandboxResult:
    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class IsolationReport:
    running_as_root: bool
    uid_isolation: bool  # the child never runs as root (and as root: one private uid per run)
    network_isolation: bool  # the child cannot open any connection, loopback included
    filesystem_isolation: bool  # the child sees only its scratch dir as writable; homes/checkout hidden
    notes: list[str] = field(default_factory=list)

    @property
    def strong(self) -> bool:
        return self.uid_isolation and self.network_isolation


# --- the namespaces, made once per process -------------------------------------------------------------------

# Runs as root in a throwaway process: new mount + network namespaces, hide directories behind empty tmpfs,
# bind back what the child needs, say "ready", then wait for the parent to have opened /proc/<pid>/ns/*.
_HOLDER = r"""
import ctypes, json, os, sys
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
def check(rc, what):
    if rc != 0:
        e = ctypes.get_errno(); raise OSError(e, f"{what}: {os.strerror(e)}")
check(libc.unshare(0x00020000 | 0x40000000), "unshare(CLONE_NEWNS|CLONE_NEWNET)")
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
mount = libc.mount
mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
check(mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
keep = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in cfg["keep_ro"] + cfg["keep_rw"]}
for hidden in cfg["hide"]:
    check(mount(b"forge-hidden", hidden.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m"),
          f"tmpfs over {hidden}")
for path, fd in keep.items():
    os.makedirs(path, exist_ok=True)
    check(mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
    if path in cfg["keep_ro"]:
        check(mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, None), f"ro {path}")
    os.close(fd)
for hidden in cfg["hide"]:
    check(mount(None, hidden.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None), f"ro {hidden}")
print("ready", flush=True)
sys.stdin.read()
"""

# Runs first in every child, as root when we are root: enter the namespaces, set limits, drop to the run's
# uid, then execute the submission as __main__. Arguments are plain strings: importing json would cost ~10 ms
# of the ~35 ms a run takes.
_BOOT = r"""
import os, resource, sys
net_fd, mnt_fd, uid, cwd, path, *limits = sys.argv[1:]
net_fd, mnt_fd, uid = int(net_fd), int(mnt_fd), int(uid)
if net_fd >= 0:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for fd, kind in ((net_fd, 0x40000000), (mnt_fd, 0x00020000)):
        if libc.setns(fd, kind) != 0:
            raise SystemExit(f"sandbox: setns failed: {os.strerror(ctypes.get_errno())}")
        os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binary can give root back
    del ctypes, libc
os.chdir(cwd)
for limit in limits:
    name, soft, hard = limit.split(":")
    resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
if uid >= 0:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
sys.argv = [path]
sys.path[0] = cwd
with open(path, encoding="utf-8") as f:
    code = compile(f.read(), path, "exec")
exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
"""


@dataclass
class _Jail:
    report: IsolationReport
    net_fd: int = -1
    mnt_fd: int = -1
    scratch_base: Path = Path()
    uid_locks: Path = Path()


_jail: _Jail | None = None
_jail_lock = threading.Lock()


def _hidden_dirs(keep: list[str]) -> list[str]:
    """Directories to cover with an empty tmpfs: homes, temp dirs, our checkout and home, the cwd."""
    from forge.workspace import REPO_ROOT

    candidates = {"/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", str(REPO_ROOT), os.getcwd()}
    if os.environ.get("FORGE_HOME"):
        candidates.add(os.environ["FORGE_HOME"])
    dirs = sorted(os.path.realpath(p) for p in candidates if os.path.isdir(p))
    # An inner directory is already hidden by an outer one; "/" itself can never be hidden.
    top = [d for d in dirs if d != "/" and not any(d != o and d.startswith(o.rstrip("/") + "/") for o in dirs)]
    # Never hide a directory the interpreter lives in outright (it is bound back in, but not over itself).
    return [d for d in top if not any(k == d or d.startswith(k.rstrip("/") + "/") for k in keep)]


def _make_jail() -> _Jail:
    notes: list[str] = []
    root = os.geteuid() == 0
    scratch_base = Path(tempfile.mkdtemp(prefix="forge-sandbox-"))
    atexit.register(shutil.rmtree, scratch_base, ignore_errors=True)
    os.chmod(scratch_base, 0o711)  # children may enter their own dir, never list the others
    uid_locks = scratch_base / ".uids"
    uid_locks.mkdir(mode=0o700)
    if not root:
        notes.append("not root: the child runs as our own uid, without network or mount namespaces")
        report = IsolationReport(
            False, uid_isolation=True, network_isolation=False, filesystem_isolation=False, notes=notes
        )
        return _Jail(report, scratch_base=scratch_base, uid_locks=uid_locks)
    prefixes = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, Path(PYTHON).parent)})
    keep_ro = [p for p in prefixes if not any(p != o and p.startswith(o + "/") for o in prefixes)]
    cfg = {"keep_ro": keep_ro, "keep_rw": [str(scratch_base)], "hide": _hidden_dirs(keep_ro)}
    try:
        holder = subprocess.Popen(
            [PYTHON, "-I", "-S", "-c", _HOLDER, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
        )
        try:
            line = holder.stdout.readline().decode().strip()
            if line != "ready":
                raise OSError(holder.stderr.read().decode().strip().splitlines()[-1:] or ["holder died"])
            net_fd = os.open(f"/proc/{holder.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            mnt_fd = os.open(f"/proc/{holder.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            holder.stdin.close()  # the namespaces live on through our two descriptors
            holder.wait()
    except OSError as err:
        notes.append(f"namespaces unavailable ({err}): no network or filesystem isolation")
        report = IsolationReport(
            True, uid_isolation=True, network_isolation=False, filesystem_isolation=False, notes=notes
        )
        return _Jail(report, scratch_base=scratch_base, uid_locks=uid_locks)
    notes.append(f"hidden: {', '.join(cfg['hide'])}; read-only: {', '.join(keep_ro)}")
    report = IsolationReport(True, uid_isolation=True, network_isolation=True, filesystem_isolation=True, notes=notes)
    return _Jail(report, net_fd=net_fd, mnt_fd=mnt_fd, scratch_base=scratch_base, uid_locks=uid_locks)


def _get_jail() -> _Jail:
    global _jail
    with _jail_lock:
        if _jail is None:
            _jail = _make_jail()
        return _jail


def isolation_report() -> IsolationReport:
    """What this host lets the sandbox do (detected once per process, on first use)."""
    return _get_jail().report


# --- one run -----------------------------------------------------------------------------------------------


def _lease_uid(jail: _Jail) -> tuple[int, int]:
    """Lock a free per-run uid; returns (uid, lock fd). Locks are per scratch base, i.e. per parent process,
    so two Forge processes may draw the same uid only by chance (1 in 65,536 per concurrent pair)."""
    for _ in range(1000):
        uid = UID_BASE + random.randrange(UID_SPAN)
        fd = os.open(jail.uid_locks / str(uid), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except BlockingIOError:
            os.close(fd)
    raise SandboxUnavailable("no free sandbox uid (more than 1000 collisions)")


def _kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (escaped daemons included): kill(-1) sent *as* that uid reaches exactly
    the processes it may signal, i.e. its own."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _classify(returncode: int, stderr: str) -> Status:
    if returncode == 0:
        return "ok"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if last.startswith("MemoryError") or "Cannot allocate memory" in last:
        return "memory_limit"
    if returncode == -signal.SIGXCPU:
        return "timeout"  # RLIMIT_CPU: a CPU-bound loop that outran the wall clock check
    if returncode < 0:
        return "killed"
    return "runtime_error"


def run_python(
    source: str,
    *,
    timeout_s: float,
    memory_mb: int,
    stdin: str | None = None,
    max_output_bytes: int = 65536,
    allow_weak_isolation: bool = False,
) -> SandboxResult:
    """Run ``source`` as ``__main__`` in a confined child process and report how it ended.

    Args:
        source: Python source text.
        timeout_s: wall-clock limit; the whole process group (and, as root, every process of the run's uid)
            is killed when it passes. RLIMIT_CPU is set just above it.
        memory_mb: address-space limit (RLIMIT_AS) of each process, interpreter included (~20 MiB of it).
        stdin: text fed on standard input (empty when None).
        max_output_bytes: cap per stream; exceeding it kills the run with status ``output_limit``.
        allow_weak_isolation: run even when the host gives no uid or network isolation.
    """
    jail = _get_jail()
    if not jail.report.strong and not allow_weak_isolation:
        raise SandboxUnavailable(
            "refusing to run untrusted code without uid and network isolation on this host "
            f"({'; '.join(jail.report.notes)}); pass allow_weak_isolation=True to accept it"
        )
    root = jail.report.running_as_root
    uid, lock_fd = _lease_uid(jail) if root else (-1, -1)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=jail.scratch_base))
    try:
        main = scratch / "main.py"
        main.write_text(source, encoding="utf-8")
        stdin_file = scratch / ".stdin"
        stdin_file.write_text(stdin or "", encoding="utf-8")
        if root:
            os.chown(scratch, uid, uid)
            os.chown(main, uid, uid)
            os.chmod(scratch, 0o700)
        cpu = max(1, int(timeout_s + 1.999))
        limits = {
            "RLIMIT_CPU": (cpu, cpu + 1),
            "RLIMIT_AS": (memory_mb * 1024 * 1024,) * 2,
            "RLIMIT_FSIZE": (MAX_FILE_BYTES,) * 2,
            "RLIMIT_NOFILE": (MAX_OPEN_FILES,) * 2,
            "RLIMIT_NPROC": (MAX_PROCESSES,) * 2,
            "RLIMIT_CORE": (0, 0),
        }
        # Not root: RLIMIT_NPROC would count all of our own processes and stop the child from starting.
        if not root:
            del limits["RLIMIT_NPROC"]
        args = [str(jail.net_fd), str(jail.mnt_fd), str(uid), str(scratch), str(main)]
        args += [f"{name}:{soft}:{hard}" for name, (soft, hard) in limits.items()]
        pass_fds = (jail.net_fd, jail.mnt_fd) if jail.net_fd >= 0 else ()
        with open(stdin_file, "rb") as stdin_fh:
            stdin_file.unlink()
            return _supervise(
                [PYTHON, "-I", "-S", "-B", "-c", _BOOT, *args],
                stdin_fh,
                pass_fds,
                timeout_s,
                max_output_bytes,
            )
    finally:
        if root:
            _kill_uid(uid)  # before removing the dir, so nothing can write into it any more
            os.close(lock_fd)
        shutil.rmtree(scratch, ignore_errors=True)


def _supervise(argv, stdin_fh, pass_fds, timeout_s, max_output_bytes) -> SandboxResult:
    start = time.monotonic()
    deadline = start + timeout_s
    proc = subprocess.Popen(
        argv,
        stdin=stdin_fh,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={},
        cwd="/",
        start_new_session=True,
        pass_fds=pass_fds,
        close_fds=True,
    )
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    out = {out_fd: bytearray(), err_fd: bytearray()}
    stopped: Status | None = None
    with selectors.DefaultSelector() as sel:
        for pipe in (proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe.fileno(), selectors.EVENT_READ)
        # Read until both pipes close (a grandchild holding them keeps them open: the deadline ends that).
        while sel.get_map() and stopped is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped = "timeout"
                break
            for key, _ in sel.select(remaining):
                try:
                    chunk = os.read(key.fd, 65536)
                except OSError as err:  # pragma: no cover - EAGAIN after a spurious wake-up
                    if err.errno == errno.EAGAIN:
                        continue
                    raise
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = out[key.fd]
                buf += chunk
                if len(buf) > max_output_bytes:
                    del buf[max_output_bytes:]
                    stopped = "output_limit"
                    break
    if stopped is None:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped = "timeout"
    if stopped is not None:
        _kill_group(proc)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    wall = time.monotonic() - start
    stdout = out[out_fd].decode("utf-8", "replace")
    stderr = out[err_fd].decode("utf-8", "replace")
    status = stopped or _classify(proc.returncode, stderr)
    return SandboxResult(status=status, exit_code=proc.returncode, stdout=stdout, stderr=stderr, wall_s=wall)
