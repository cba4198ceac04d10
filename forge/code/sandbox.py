"""Run untrusted code (model-generated Python or C++) in a confined process tree and report how it ended.

Every run: an interpreter started isolated (``-I -S -B``), an empty environment, a fresh scratch directory as
cwd, rlimits (CPU, address space, file size, open files, processes, stack, no core dumps), capped stdout and
stderr, and a wall-clock deadline after which the whole tree is killed. When Forge runs as root (the CPU
machines, CI) a run also gets (``isolation_report()`` says what this host allowed):
- its own uid/gid from a private range, locked per run: RLIMIT_NPROC counts exactly this run's processes;
- the shared network namespace with no interface up (even 127.0.0.1, where Prefect and MLflow listen) and a
  mount namespace where homes, temp dirs and the tree holding the checkout are empty read-only tmpfs;
- its own PID namespace, whose init is the run's process: the tree dies with it (double-forked daemons
  included) and ``/proc`` shows only the run's processes;
- a tmpfs scratch directory capped in bytes and inodes (a million small files end in ENOSPC, not on disk);
- a per-run cgroup with ``pids.max`` and a memory limit over the whole tree where cgroup v2 is writable (v1
  only with FORGE_SANDBOX_CGROUP_V1=1: moving a process there costs ~8 ms a run; the per-run uid's
  RLIMIT_NPROC bounds the processes either way).
Runs start from a fork server (``_boot.py``): one warm interpreter inside the jail forks each run, ~1 ms instead
of ~30 ms for a fresh interpreter. ``Channel`` lets Forge talk to a run line by line (the batched judge).
Running without uid and network isolation is refused unless ``allow_weak_isolation=True``.

    from forge.code.sandbox import execute, isolation_report
    print(isolation_report())
    result = execute("python", "print(sum(range(10)))", time_limit_s=2, memory_mb=256)
    assert result.status == "ok" and result.stdout == "45\\n"

``forge sandbox exec --lang cpp prog.cpp`` is the same from the command line (forge/code/cli.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import select
import selectors
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from forge.code._jail import (
    IsolationReport,
    Jail,
    SandboxUnavailable,
    get_jail,
    kill_uid,
    lease_uid,
    make_run_cgroup,
    release_uid,
)

__all__ = [
    "Channel",
    "CompiledProgram",
    "IsolationReport",
    "RunEnded",
    "SandboxResult",
    "SandboxUnavailable",
    "compile_cpp",
    "execute",
    "isolation_report",
    "run_compiled",
    "run_python",
]

Status = Literal["ok", "runtime_error", "timeout", "memory_limit", "output_limit", "compile_error", "killed"]
Lang = Literal["python", "cpp"]

# Limits that do not depend on the submission.
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_OPEN_FILES = 64
MAX_PROCESSES = 32
STACK_BYTES = 64 * 1024 * 1024
SCRATCH_TMPFS = "size=32m,nr_inodes=4096"
INLINE_BYTES = 32 * 1024  # files up to this size travel inside the request to the fork server
GXX = shutil.which("g++") or "/usr/bin/g++"
CXX_FLAGS = ("-O2", "-std=c++17", "-pipe")


@dataclass(frozen=True)
class SandboxResult:
    status: Status
    exit_code: int | None  # negative: killed by that signal
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float = 0.0
    max_rss_mb: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict:
        return asdict(self)


def isolation_report() -> IsolationReport:
    """What this host lets the sandbox do (detected once per process, on first use)."""
    return get_jail().report


def _require(jail: Jail, allow_weak_isolation: bool) -> None:
    if not jail.report.strong and not allow_weak_isolation:
        raise SandboxUnavailable(
            "refusing to run untrusted code without uid and network isolation on this host "
            f"({'; '.join(jail.report.notes)}); pass allow_weak_isolation=True (--allow-weak-isolation) to accept it"
        )


# --- public API ------------------------------------------------------------------------------------------


def execute(
    lang: Lang,
    source: str,
    *,
    time_limit_s: float = 2.0,
    memory_mb: int = 256,
    stdin: str | None = None,
    max_output_bytes: int = 65536,
    allow_weak_isolation: bool = False,
) -> SandboxResult:
    """Compile (C++) and run ``source`` once; the result of the compile step when it fails."""
    if lang == "python":
        return run_python(
            source,
            timeout_s=time_limit_s,
            memory_mb=memory_mb,
            stdin=stdin,
            max_output_bytes=max_output_bytes,
            allow_weak_isolation=allow_weak_isolation,
        )
    if lang != "cpp":
        raise ValueError(f"unknown language {lang!r}: expected 'python' or 'cpp'")
    program, failure = compile_cpp(source, allow_weak_isolation=allow_weak_isolation)
    if program is None:
        return failure
    try:
        return run_compiled(
            program, time_limit_s=time_limit_s, memory_mb=memory_mb, stdin=stdin, max_output_bytes=max_output_bytes
        )
    finally:
        program.remove()


def run_python(
    source: str,
    *,
    timeout_s: float,
    memory_mb: int,
    stdin: str | None = None,
    max_output_bytes: int = 65536,
    allow_weak_isolation: bool = False,
    extra_files: dict[str, str] | None = None,
    trusted_main: bool = False,
    dialogue: Callable[[Channel], None] | None = None,
) -> SandboxResult:
    """Run ``source`` as ``__main__`` in a confined process tree and report how it ended.

    Args:
        source: Python source text.
        timeout_s: wall-clock limit; the whole tree is killed when it passes. RLIMIT_CPU is set just above it.
        memory_mb: address-space limit (RLIMIT_AS) of each process, interpreter included (~20 MiB of it);
            the run's cgroup (where there is one) bounds the whole tree at twice that.
        stdin: text fed on standard input (empty when None).
        max_output_bytes: cap per stream; exceeding it kills the run with status ``output_limit``.
        allow_weak_isolation: run even when the host gives no uid or network isolation.
        extra_files: more files (name -> text) put next to main.py in the scratch dir, read-only.
        trusted_main: ``source`` is Forge's own code (the candidate server), so the fork server may compile it
            once and reuse it; never set it for submitted code.
        dialogue: run interactively: ``dialogue(channel)`` is called once the run has started and talks to it
            line by line (:class:`Channel`); ``stdin`` is not used then. The run's deadline still holds.
    """
    jail = get_jail()
    _require(jail, allow_weak_isolation)
    files: dict[str, tuple[bytes | None, str, int]] = {"main.py": (source.encode("utf-8"), "", 0o644)}
    for name, text in (extra_files or {}).items():
        if "/" in name or name in files or name.startswith("."):
            raise ValueError(f"bad extra file name {name!r}")
        files[name] = (text.encode("utf-8"), "", 0o644)
    trusted = hashlib.sha256(files["main.py"][0]).hexdigest() if trusted_main else ""
    return _run(
        jail,
        files,
        "python",
        "main.py",
        [],
        {},
        timeout_s,
        memory_mb,
        stdin,
        max_output_bytes,
        trusted=trusted,
        dialogue=dialogue,
    )


@dataclass(frozen=True)
class CompiledProgram:
    """A compiled binary kept outside any run's scratch dir, so many runs (one per test) can share it."""

    path: Path

    def remove(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)


def compile_cpp(
    source: str, *, time_limit_s: float = 30.0, allow_weak_isolation: bool = False
) -> tuple[CompiledProgram | None, SandboxResult]:
    """Compile C++17 inside the sandbox (a hostile ``#include "/root/..."`` sees only the jail's files).

    Returns the program (None on failure) and the compiler's run; a failed compile has status
    ``compile_error`` with g++'s diagnostics in ``stderr``."""
    jail = get_jail()
    _require(jail, allow_weak_isolation)
    files: dict[str, tuple[bytes | None, str, int]] = {"main.cpp": (source.encode("utf-8"), "", 0o644)}
    argv = [GXX, *CXX_FLAGS, "-o", "prog", "main.cpp"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    keep: dict[str, bytes] = {}
    result = _run(jail, files, "exec", "", argv, env, time_limit_s, 2048, None, 65536, tmpfs=False, collect=keep)
    if result.status != "ok" or "prog" not in keep:
        status: Status = "compile_error" if result.status in ("ok", "runtime_error") else result.status
        return None, SandboxResult(status, result.exit_code, result.stdout, result.stderr, result.wall_s, result.cpu_s)
    digest = hashlib.sha256(keep["prog"]).hexdigest()[:16]
    home = Path(tempfile.mkdtemp(prefix=f"bin-{digest}-", dir=jail.scratch_base))
    os.chmod(home, 0o700)
    (home / "prog").write_bytes(keep["prog"])
    return CompiledProgram(home / "prog"), result


def run_compiled(
    program: CompiledProgram,
    *,
    time_limit_s: float = 2.0,
    memory_mb: int = 256,
    stdin: str | None = None,
    max_output_bytes: int = 65536,
) -> SandboxResult:
    """Run a binary from :func:`compile_cpp` (its isolation was checked when it was compiled)."""
    jail = get_jail()
    files: dict[str, tuple[bytes | None, str, int]] = {"prog": (None, str(program.path), 0o755)}
    return _run(jail, files, "exec", "", ["./prog"], {}, time_limit_s, memory_mb, stdin, max_output_bytes)


# --- one run -----------------------------------------------------------------------------------------------


def _limits(timeout_s: float, memory_mb: int, own_processes: bool) -> dict[str, tuple[int, int]]:
    cpu = max(1, int(timeout_s + 1.999))
    limits = {
        "RLIMIT_CPU": (cpu, cpu + 1),
        "RLIMIT_AS": (memory_mb * 1024 * 1024,) * 2,
        "RLIMIT_FSIZE": (MAX_FILE_BYTES,) * 2,
        "RLIMIT_NOFILE": (MAX_OPEN_FILES,) * 2,
        "RLIMIT_NPROC": (MAX_PROCESSES,) * 2,
        "RLIMIT_STACK": (min(STACK_BYTES, memory_mb * 1024 * 1024 // 2),) * 2,
        "RLIMIT_CORE": (0, 0),
    }
    if not own_processes:  # RLIMIT_NPROC would count all of our own processes and stop the child from starting
        del limits["RLIMIT_NPROC"]
    return limits


def _run(
    jail: Jail,
    files: dict[str, tuple[bytes | None, str, int]],
    mode: str,
    target: str,
    argv: list[str],
    env: dict[str, str],
    timeout_s: float,
    memory_mb: int,
    stdin: str | None,
    max_output_bytes: int,
    *,
    tmpfs: bool = True,
    collect: dict[str, bytes] | None = None,
    trusted: str = "",
    dialogue: Callable[[Channel], None] | None = None,
) -> SandboxResult:
    """One confined run of ``files`` (name -> (content or None, or a path to copy it from, mode)).

    With a PID namespace the run's scratch dir is a tmpfs of its own mount namespace, mounted on one shared
    (empty, on the host) directory, so no per-run directory is made or removed on disk; the files travel in the
    request (large ones as root-only staging files). Otherwise (and for the compiler, whose output is kept:
    ``tmpfs=False``, ``collect`` receives the new files) the run gets a fresh on-disk directory."""
    report = jail.report
    root = report.running_as_root
    use_tmpfs = tmpfs and report.pid_namespace
    uid = lease_uid(jail) if root else -1
    # As root each run has its own uid; not root, its own user namespace: either way RLIMIT_NPROC counts its alone.
    limits = _limits(timeout_s, memory_mb, root or report.user_namespace)
    cgroup = make_run_cgroup(jail, MAX_PROCESSES, 2 * memory_mb * 1024 * 1024 + 64 * 1024 * 1024) if root else None
    staged: list[Path] = []
    scratch: Path | None = None
    try:
        spec: dict[str, list] = {}
        if use_tmpfs:
            cwd = jail.scratch_base / "work"
            cwd.mkdir(mode=0o755, exist_ok=True)
            for name, (data, src, mode_bits) in files.items():
                if data is not None and len(data) <= INLINE_BYTES and (text := _utf8(data)) is not None:
                    spec[name] = [text, "", mode_bits]
                    continue
                if data is not None:
                    path = jail.scratch_base / f".stage-{uuid.uuid4().hex}"
                    path.write_bytes(data)
                    os.chmod(path, 0o600)
                    staged.append(path)
                    src = str(path)
                spec[name] = [None, src, mode_bits]
        else:
            cwd = scratch = Path(tempfile.mkdtemp(prefix="run-", dir=jail.scratch_base))
            for name, (data, src, mode_bits) in files.items():
                (scratch / name).write_bytes(data if data is not None else Path(src).read_bytes())
                os.chmod(scratch / name, mode_bits)
                if root:
                    os.chown(scratch / name, uid, uid)
            if root:
                os.chown(scratch, uid, uid)
                os.chmod(scratch, 0o700)
        args = {
            "uid": uid,
            "cwd": str(cwd),
            "mode": mode,
            "target": str(cwd / target) if target else "",
            "pidns": report.pid_namespace,
            "rootless": report.user_namespace,
            "tmpfs": SCRATCH_TMPFS if use_tmpfs else "",
            "files": spec,
            "cgroups": cgroup.procs if cgroup else [],
            "limits": [[k, s, h] for k, (s, h) in limits.items()],
            "env": env,
            "argv": argv,
            "trusted_program": trusted,
        }
        if dialogue is not None:
            stdin_r, stdin_w = os.pipe()
            try:
                stopped, out, err, rep, wall = _supervise(
                    jail, args, stdin_r, timeout_s, max_output_bytes, dialogue, stdin_w
                )
            finally:
                os.close(stdin_r)
        else:
            stdin_file = jail.scratch_base / f".stdin-{uuid.uuid4().hex}"
            stdin_file.write_text(stdin or "", encoding="utf-8")
            with open(stdin_file, "rb") as stdin_fh:
                stdin_file.unlink()
                stopped, out, err, rep, wall = _supervise(jail, args, stdin_fh.fileno(), timeout_s, max_output_bytes)
        line = rep.decode().split()
        if collect is not None and scratch is not None:
            for path in scratch.iterdir():
                if path.is_file() and not path.is_symlink() and path.name not in files:
                    collect[path.name] = path.read_bytes()
    finally:
        if root and not report.pid_namespace:
            kill_uid(uid)  # before removing the dir, so nothing can write into it any more
        if cgroup:
            oom = cgroup.oom_killed()
            cgroup.remove()
        else:
            oom = False
        if uid >= 0:
            release_uid(jail, uid)
        for path in staged:
            path.unlink(missing_ok=True)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if len(line) == 3:
        wait_status, cpu_s, rss_mb = int(line[0]), float(line[1]), int(line[2]) / 1024
        exit_code = os.waitstatus_to_exitcode(wait_status)
    else:  # killed (deadline, output cap) before the fork server could report
        cpu_s, rss_mb, exit_code = 0.0, 0.0, None
    status = stopped or _classify(exit_code, stderr, oom, cpu_s, limits["RLIMIT_CPU"][0], line)
    return SandboxResult(status, exit_code, stdout, stderr, wall, cpu_s, round(rss_mb, 2))


_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc")
_FILE_MARKERS = ("File too large", "No space left on device", "Disk quota exceeded", "Too many open files")


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _classify(exit_code: int, stderr: str, oom: bool, cpu_s: float, cpu_limit: int, line: list) -> Status:
    """Status of a finished run from its wait status, its stderr tail and the cgroup's OOM counter."""
    if not line:
        return "killed"
    if exit_code == 0:
        return "ok"
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if oom or any(m in tail for m in _MEMORY_MARKERS) or (exit_code == -signal.SIGABRT and "bad_alloc" in stderr):
        return "memory_limit"
    if exit_code in (-signal.SIGXCPU, -signal.SIGKILL) and cpu_s >= cpu_limit - 0.05:
        return "timeout"  # RLIMIT_CPU: a CPU-bound loop that outran the wall clock check
    if exit_code == -signal.SIGXFSZ or any(m in tail for m in _FILE_MARKERS[:3]):
        return "output_limit"
    if exit_code < 0 and -exit_code not in (signal.SIGSEGV, signal.SIGABRT, signal.SIGFPE, signal.SIGBUS):
        return "killed"
    return "runtime_error"


class RunEnded(Exception):
    """The run's process closed its answers (it exited, crashed or was killed) during a dialogue."""


class Channel:
    """Forge's end of an interactive run: requests are lines on the run's stdin, answers lines on its stdout.
    Reading stderr (capped) goes on meanwhile, so neither side can block the other."""

    def __init__(
        self, pid: int, pidfd: int, stdin_w: int, out_r: int, err_r: int, err_buf: bytearray, cap: int
    ) -> None:
        self.pid, self.pidfd, self.stdin_w, self.out_r, self.err_r = pid, pidfd, stdin_w, out_r, err_r
        self.err_buf, self.cap = err_buf, cap
        self.pending = bytearray()
        self.overflow = False
        self.killed = False
        self.err_open = True
        self.clock = ((~pid) << 3) | 2  # the run's CPU clock (CPUCLOCK_SCHED of the process)
        os.set_blocking(stdin_w, False)

    def kill(self) -> None:
        """End the run now (a test ran past its limit): its whole PID namespace goes."""
        self.killed = True
        _kill_run(self.pid, self.pidfd)

    def cpu_seconds(self) -> float:
        """CPU time the run's process has used so far (read here: load elsewhere does not inflate it and the
        code cannot touch it); NaN once it is gone."""
        try:
            return time.clock_gettime(self.clock)
        except OSError:
            return math.nan

    def ask(self, line: bytes, deadline: float) -> bytes:
        """Send one request (bytes as given: a line ending in a newline, maybe followed by a raw payload whose
        length the line announces), return the next answer line (without the newline).

        Raises TimeoutError past ``deadline`` (time.monotonic), RunEnded when the answers stop, OverflowError
        when an answer or stderr exceeds the cap."""
        todo = memoryview(line)
        while True:
            nl = self.pending.find(b"\n")
            if nl >= 0 and not todo:
                answer = bytes(self.pending[:nl])
                del self.pending[: nl + 1]
                return answer
            if len(self.pending) > self.cap or len(self.err_buf) > self.cap:
                self.overflow = True
                raise OverflowError("answer or stderr over the output cap")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            # poll, not select: a busy Forge process may hold more than FD_SETSIZE descriptors
            poller = select.poll()
            poller.register(self.out_r, select.POLLIN)
            if self.err_open:
                poller.register(self.err_r, select.POLLIN)
            if todo:
                poller.register(self.stdin_w, select.POLLOUT)
            events = poller.poll(left * 1000)
            readable = [fd for fd, ev in events if fd != self.stdin_w]
            if any(fd == self.stdin_w for fd, _ in events):
                try:
                    todo = todo[os.write(self.stdin_w, todo) :]
                except BrokenPipeError:
                    raise RunEnded("the run stopped reading") from None
            for fd in readable:
                chunk = os.read(fd, 1 << 20)
                if fd == self.err_r:
                    self.err_buf += chunk
                    self.err_open = bool(chunk)  # the code may close its stderr and go on
                elif not chunk:
                    raise RunEnded("the run's answers ended")
                else:
                    self.pending += chunk


def _supervise(
    jail: Jail,
    args: dict,
    stdin_fd: int,
    timeout_s: float,
    max_output_bytes: int,
    dialogue: Callable[[Channel], None] | None = None,
    stdin_w: int = -1,
):
    """Start one run through the fork server (after ``dialogue``, if any, is done with it) and read its stdout,
    stderr and report pipe until all three close (i.e. until the run's process, and with it its PID namespace,
    is gone) or the deadline or output cap stops it."""
    start = time.monotonic()
    deadline = start + timeout_s
    pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, report
    try:
        pid, pidfd = jail.zygote.spawn(args, [stdin_fd, *(w for _, w in pipes)])
    except BaseException:
        for r, _ in pipes:
            os.close(r)
        raise
    finally:
        for _, w in pipes:
            os.close(w)
    bufs = {r: bytearray() for r, _ in pipes}
    stopped: Status | None = None
    killed_at: float | None = None
    try:
        if dialogue is not None:
            channel = Channel(pid, pidfd, stdin_w, pipes[0][0], pipes[1][0], bufs[pipes[1][0]], max_output_bytes)
            try:
                dialogue(channel)
            except BaseException:
                _kill_run(pid, pidfd)
                raise
            finally:
                os.close(stdin_w)  # end of requests: the candidate server exits
            if channel.overflow:
                stopped = "output_limit"
            elif channel.killed:
                stopped = "timeout"
        with selectors.DefaultSelector() as sel:
            for r, _ in pipes:
                os.set_blocking(r, False)
                sel.register(r, selectors.EVENT_READ)
            while sel.get_map():
                now = time.monotonic()
                if stopped is None and now >= deadline:
                    stopped = "timeout"
                if stopped is not None and killed_at is None:
                    _kill_run(pid, pidfd)
                    killed_at = now
                if killed_at is not None and now - killed_at > 5.0:
                    break  # a process outside any PID namespace still holds a pipe: give up on it
                wait = (deadline - now) if killed_at is None else 0.1
                for key, _ in sel.select(max(wait, 0.0)):
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:  # pragma: no cover - spurious wake-up
                        continue
                    if not chunk:
                        sel.unregister(key.fd)
                        continue
                    if stopped is not None:
                        continue  # draining after a kill
                    buf = bufs[key.fd]
                    buf += chunk
                    if key.fd != pipes[2][0] and len(buf) > max_output_bytes:
                        del buf[max_output_bytes:]
                        stopped = "output_limit"
    finally:
        os.close(pidfd)
        for r, _ in pipes:
            os.close(r)
    out, err, rep = (bytes(bufs[r]) for r, _ in pipes)
    err = err[:max_output_bytes]
    if stopped is not None:
        rep = b""
    return stopped, out, err, rep, time.monotonic() - start


def _kill_run(pid: int, pidfd: int) -> None:
    """``pid`` is the run's init: a session leader running as root, out of the code's reach. Killing it ends its
    PID namespace, i.e. every process the code started; without a namespace its process group goes with it.
    Through ``pidfd`` the kill reaches the run even before it has made its session (the server hands the pidfd
    over right after the fork, so a deadline or cancel that early would otherwise find no group and miss), and
    never a process that reused the number after the run was reaped."""
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
