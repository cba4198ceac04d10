"""What the host lets the sandbox do, set up once per process: namespaces, cgroups, per-run uids.

Creating a network namespace per run is slow under load (docs/stack.md), so one network + mount namespace is made
by a throwaway holder process and kept through two descriptors; every run enters them with setns(2) and then
makes its own cheap PID + mount namespace (``_boot.py``). Per-run cgroups (v2, or v1 ``pids``/``memory``
hierarchies) bound the whole tree's processes and memory where ``/sys/fs/cgroup`` is writable.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

log = logging.getLogger(__name__)

# Per-run uids/gids come from this range (far above any real account, below the 2**31 some tools choke on).
UID_BASE = 1_900_000_000
UID_SPAN = 65_536
# The real interpreter binary: a venv's bin/python is a symlink into a prefix the child may not see.
PYTHON = os.path.realpath(sys.executable)
CGROUP_ROOT = Path("/sys/fs/cgroup")


class SandboxUnavailable(RuntimeError):
    """The host cannot isolate the child as strongly as asked."""


@dataclass(frozen=True)
class IsolationReport:
    running_as_root: bool
    uid_isolation: bool  # the child never runs as root (and as root: one private uid per run)
    network_isolation: bool  # the child cannot open any connection, loopback included
    filesystem_isolation: bool  # the child sees only its scratch dir as writable; homes/checkout hidden
    pid_namespace: bool = False  # each run is its own PID namespace: the tree dies with its init
    cgroup: str = ""  # "v2", "v1" or "" (no per-run pids/memory cgroup)
    notes: list[str] = field(default_factory=list)
    user_namespace: bool = False  # not root: the namespaces are our own user namespace's; the child has no capability
    syscall_filter: bool = False  # the seccomp filter of forge/code/syscalls.py in every run

    @property
    def strong(self) -> bool:
        return self.uid_isolation and self.network_isolation

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"strong": self.strong}


# Runs in a throwaway process: new mount + network namespaces (as root), or, not root, a new user namespace owning
# them (our uid is its root, mapped to nothing else); hide directories behind empty tmpfs, bind back what the child
# needs, say "ready", then wait for the parent to have opened /proc/<pid>/ns/*.
_PRELUDE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
def check(rc, what):
    if rc != 0:
        e = ctypes.get_errno(); raise OSError(e, f"{what}: {os.strerror(e)}")
def enter_user_namespace(flags, uid, gid):
    check(libc.unshare(0x10000000 | flags), "unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
"""
_HOLDER = _PRELUDE + r"""
cfg = json.loads(sys.argv[1])
if cfg["userns"]:
    enter_user_namespace(0x00020000 | 0x40000000, *cfg["userns"])
else:
    check(libc.unshare(0x00020000 | 0x40000000), "unshare(CLONE_NEWNS|CLONE_NEWNET)")
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
# Flags a user namespace may not clear on a mount it inherited: a read-only remount repeats them (statvfs -> mount).
LOCKED = {1: 1, 2: 2, 4: 4, 8: 8, 1024: 1024, 2048: 2048, 4096: 1 << 21}
mount = libc.mount
check(mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
keep = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in cfg["keep_ro"] + cfg["keep_rw"]}
locked = {p: sum(m for st, m in LOCKED.items() if os.statvfs(p).f_flag & st) for p in keep}
for hidden in cfg["hide"]:
    check(mount(b"forge-hidden", hidden.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m"),
          f"tmpfs over {hidden}")
for path, fd in keep.items():
    os.makedirs(path, exist_ok=True)
    check(mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
    if path in cfg["keep_ro"]:
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | locked[path]
        check(mount(None, path.encode(), None, flags, None), f"ro {path}")
    os.close(fd)
for hidden in cfg["hide"]:
    check(mount(None, hidden.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None), f"ro {hidden}")
print("ready", flush=True)
sys.stdin.read()
"""

# Does this host let a child make its own PID namespace and mount a /proc in it (not root: in a user namespace)?
_PIDNS_PROBE = _PRELUDE + r"""
userns = json.loads(sys.argv[1])
if userns:
    enter_user_namespace(0, *userns)
assert libc.unshare(0x20000000 | 0x00020000) == 0, os.strerror(ctypes.get_errno())
pid = os.fork()
if pid == 0:
    ok = libc.mount(None, b"/", None, 16384 | (1 << 18), None) == 0
    ok = ok and libc.mount(b"proc", b"/proc", b"proc", 14, None) == 0 and os.getpid() == 1
    os._exit(0 if ok else 3)
_, st = os.waitpid(pid, 0)
raise SystemExit(os.waitstatus_to_exitcode(st))
"""


_BOOT = Path(__file__).with_name("_boot.py").read_text(encoding="utf-8")

# glibc's heap, for the fork server and every Python run forked from it: freed memory stays in the process
# (no trim, no mmap below 32 MiB, glibc's largest threshold) instead of going back to the kernel and being
# faulted in again on the next allocation. A run's CPU time then grows with its work, not with page faults
# that multiply once its data outgrows a few hundred KiB: the complexity judge timed a linear program at
# 128k elements ~25% slower per element than at 4k and fitted O(n log n) better than O(n) (the judge:
# forge/code/complexity.py; bench/complexity_judge.py). The server drops the variable once read: runs see none.
_HEAP_TUNABLES = "glibc.malloc.trim_threshold=4294967295:glibc.malloc.mmap_threshold=33554432"


class Zygote:
    """The fork server of ``_boot.py``: one warm interpreter inside the jail that forks every run."""

    def __init__(self, net_fd: int, mnt_fd: int, user_fd: int = -1, seccomp: bytes | None = None) -> None:
        self.net_fd, self.mnt_fd, self.user_fd = net_fd, mnt_fd, user_fd
        self.seccomp = seccomp
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen | None = None
        self.known: set[str] = set()  # trusted programs the server has compiled (sent once, then by key)

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fds = tuple(fd for fd in (theirs.fileno(), self.net_fd, self.mnt_fd, self.user_fd) if fd >= 0)
        argv = [PYTHON, "-I", "-S", "-B", "-c", _BOOT, str(theirs.fileno()), str(self.net_fd), str(self.mnt_fd),
                str(self.user_fd), (self.seccomp or b"").hex()]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={"GLIBC_TUNABLES": _HEAP_TUNABLES}, pass_fds=fds
        )
        theirs.close()
        if ours.recv(16) != b"ready":
            err = self.proc.stderr.read().decode(errors="replace").strip().splitlines()[-1:]
            raise SandboxUnavailable(f"sandbox fork server did not start: {err}")
        self.proc.stderr.close()
        self.sock = ours
        self.known = set()

    def spawn(self, args: dict, fds: list[int]) -> tuple[int, int]:
        """Fork one run (``args`` as _boot.start_run reads them, fds = stdin, stdout, stderr, report); its pid and
        a pidfd of it (the caller closes it)."""
        key = args.get("trusted_program")
        with self.lock:
            for attempt in range(2):
                if self.sock is None:
                    self._start()
                sent = args
                if key and key in self.known:  # the server has it compiled: send the key, not the text
                    sent = {**args, "files": {**args["files"], "main.py": [None, "", args["files"]["main.py"][2]]}}
                payload = json.dumps(sent).encode()
                try:
                    socket.send_fds(self.sock, [payload], fds)
                    reply, pidfds, _, _ = socket.recv_fds(self.sock, 32, 1)
                    if reply:
                        if key:
                            self.known.add(key)
                        return int(reply), pidfds[0]
                except OSError:
                    if attempt:
                        raise
                self.sock = None  # the server died (killed?): start a fresh one once
        raise SandboxUnavailable("sandbox fork server keeps dying")


@dataclass
class Jail:
    report: IsolationReport
    net_fd: int = -1
    mnt_fd: int = -1
    user_fd: int = -1
    scratch_base: Path = Path()
    cgroup_parents: dict[str, Path] = field(default_factory=dict)  # controller ("pids", "memory", "v2") -> dir
    zygote: Zygote | None = None
    seccomp: bytes | None = None  # the BPF program every run installs (forge/code/syscalls.py)
    used_uids: set[int] = field(default_factory=set)  # every uid this process leased (tests look for leftovers)
    leased_uids: set[int] = field(default_factory=set)  # uids of the runs in flight
    uid_lock: threading.Lock = field(default_factory=threading.Lock)


_jail: Jail | None = None
_jail_lock = threading.Lock()


def _hidden_dirs(keep: list[str]) -> list[str]:
    """Directories to cover with an empty tmpfs: homes, temp dirs, the tree holding our checkout, the cwd."""
    from forge.workspace import REPO_ROOT

    candidates = {"/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", "/mnt", "/srv", "/media", os.getcwd()}
    for path in (REPO_ROOT, os.environ.get("FORGE_HOME")):
        if path:
            parts = Path(os.path.realpath(path)).parts
            # The checkout's top-level tree (e.g. /work holding other checkouts and notes), unless it is a
            # system directory the interpreter or compilers need.
            top = "/" + parts[1] if len(parts) > 1 else ""
            candidates.add(top if top not in {"/usr", "/opt", "/etc", "/lib", "/lib64", "/bin", "/var"} else path)
    dirs = sorted(os.path.realpath(p) for p in candidates if p and os.path.isdir(p))
    # An inner directory is already hidden by an outer one; "/" itself can never be hidden.
    top = [d for d in dirs if d != "/" and not any(d != o and d.startswith(o.rstrip("/") + "/") for o in dirs)]
    # Never hide a directory the interpreter lives in outright (it is bound back in, but not over itself).
    return [d for d in top if not any(k == d or d.startswith(k.rstrip("/") + "/") for k in keep)]


def _probe_pidns(userns: list[int] | None = None) -> bool:
    try:
        probe = subprocess.run([PYTHON, "-I", "-S", "-c", _PIDNS_PROBE, json.dumps(userns)], env={},
                               capture_output=True, check=False)
        return probe.returncode == 0
    except OSError:
        return False


def _setup_cgroups(notes: list[str]) -> tuple[str, dict[str, Path]]:
    """Make Forge's parent cgroup(s), v2 when the unified hierarchy is mounted at the root, else v1."""
    parent_name = f"forge-sandbox-{os.getpid()}"
    try:
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            parent = CGROUP_ROOT / parent_name
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text("+pids +memory")
            atexit.register(_remove_cgroup, parent)
            return "v2", {"v2": parent}
        if os.environ.get("FORGE_SANDBOX_CGROUP_V1") != "1":
            # Measured here: moving a process into a v1 cgroup costs ~8 ms, a third of a whole run. The per-run
            # uid's RLIMIT_NPROC already bounds the processes (and so, with RLIMIT_AS, the memory) of a run.
            notes.append("cgroup v1 only: not used per run (set FORGE_SANDBOX_CGROUP_V1=1 to use it)")
            return "", {}
        parents = {}
        for controller in ("pids", "memory"):
            if (CGROUP_ROOT / controller / "cgroup.procs").exists():
                parent = CGROUP_ROOT / controller / parent_name
                parent.mkdir(exist_ok=True)
                atexit.register(_remove_cgroup, parent)
                parents[controller] = parent
        if parents:
            return "v1", parents
        notes.append("no cgroup hierarchy with pids/memory controllers: per-process rlimits only")
    except OSError as err:
        notes.append(f"cgroups not writable ({err}): per-process rlimits only")
    return "", {}


def _remove_cgroup(path: Path) -> None:
    for child in sorted(path.glob("*/"), reverse=True) if path.exists() else []:
        if child.is_dir():
            with contextlib.suppress(OSError):
                child.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


def _make_jail() -> Jail:
    jail = _isolate()
    if jail.report.network_isolation:  # the filter goes with the namespaces (weak isolation stays as it was)
        from forge.code.syscalls import denied_program

        jail.seccomp, note = denied_program()
        jail.report = replace(jail.report, syscall_filter=jail.seccomp is not None,
                              notes=[*jail.report.notes, note])
    return jail


def _isolate() -> Jail:
    notes: list[str] = []
    root = os.geteuid() == 0
    scratch_base = Path(tempfile.mkdtemp(prefix="forge-sandbox-"))
    atexit.register(shutil.rmtree, scratch_base, ignore_errors=True)
    os.chmod(scratch_base, 0o711)  # children may enter their own dir, never list the others
    prefixes = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, Path(PYTHON).parent)})
    keep_ro = [p for p in prefixes if not any(p != o and p.startswith(o + "/") for o in prefixes)]
    # Not root: our own user namespace (our uid its root, nothing else mapped) owns the namespaces, and each run
    # makes one more inside it where it is uid 65534 with no capability (_boot.py).
    userns = None if root else [os.geteuid(), os.getegid()]
    cfg = {"keep_ro": keep_ro, "keep_rw": [str(scratch_base)], "hide": _hidden_dirs(keep_ro), "userns": userns}
    if not root:
        def weak(why: str) -> Jail:
            notes.append(f"not root and {why}: the child runs as our own uid, without namespaces or cgroups")
            return Jail(IsolationReport(False, True, False, False, notes=notes), scratch_base=scratch_base)

        try:
            net_fd, mnt_fd, user_fd = _hold_namespaces(cfg)
        except OSError as err:
            return weak(f"no user namespace ({err})")
        if not _probe_pidns(userns):
            for fd in (net_fd, mnt_fd, user_fd):
                os.close(fd)
            return weak("no PID namespace inside the user namespace, so nothing would bound a run's processes")
        notes.append("not root: user + PID + mount + network namespaces of our own; each run is uid 65534 of its own "
                     "user namespace with no capability, its processes bounded by RLIMIT_NPROC (no cgroup)")
        notes.append(f"hidden: {', '.join(cfg['hide'])}; read-only: {', '.join(keep_ro)}")
        report = IsolationReport(False, True, True, True, True, "", notes, user_namespace=True)
        return Jail(report, net_fd, mnt_fd, user_fd, scratch_base)
    cgroup, parents = _setup_cgroups(notes)
    pidns = _probe_pidns()
    if not pidns:
        notes.append("no PID namespace: daemons are found by the run's uid instead")
    try:
        net_fd, mnt_fd, _ = _hold_namespaces(cfg)
    except OSError as err:
        notes.append(f"namespaces unavailable ({err}): no network or filesystem isolation")
        report = IsolationReport(True, True, False, False, False, cgroup, notes)
        return Jail(report, scratch_base=scratch_base, cgroup_parents=parents)
    notes.append(f"hidden: {', '.join(cfg['hide'])}; read-only: {', '.join(keep_ro)}")
    report = IsolationReport(True, True, True, True, pidns, cgroup, notes)
    return Jail(report, net_fd, mnt_fd, scratch_base=scratch_base, cgroup_parents=parents)


def _hold_namespaces(cfg: dict) -> tuple[int, int, int]:
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
        user_fd = os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC) if cfg["userns"] else -1
    finally:
        holder.stdin.close()  # the namespaces live on through our descriptors
        holder.wait()
    return net_fd, mnt_fd, user_fd


def get_jail() -> Jail:
    global _jail
    with _jail_lock:
        if _jail is None:
            _jail = _make_jail()
            _jail.zygote = Zygote(_jail.net_fd, _jail.mnt_fd, _jail.user_fd, _jail.seccomp)
        return _jail


# --- per-run resources -------------------------------------------------------------------------------------


def lease_uid(jail: Jail) -> int:
    """A per-run uid no other run of this process holds (an in-memory set: a lock file per run cost ~0.7 ms
    once thousands of them had piled up). Two Forge processes draw the same uid only by chance (1 in 65,536
    per concurrent pair), and a PID namespace keeps even those runs apart."""
    with jail.uid_lock:
        for _ in range(1000):
            uid = UID_BASE + random.randrange(UID_SPAN)
            if uid not in jail.leased_uids:
                jail.leased_uids.add(uid)
                jail.used_uids.add(uid)
                return uid
    raise SandboxUnavailable("no free sandbox uid (more than 1000 collisions)")


def release_uid(jail: Jail, uid: int) -> None:
    with jail.uid_lock:
        jail.leased_uids.discard(uid)


def kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (escaped daemons included): kill(-1) sent *as* that uid reaches exactly
    the processes it may signal, i.e. its own. Only needed without a PID namespace."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


@dataclass
class RunCgroup:
    """One run's cgroup(s): ``procs`` files the boot process joins, and the limits they enforce."""

    dirs: list[Path]
    version: str

    @property
    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def oom_killed(self) -> bool:
        for d in self.dirs:
            events = d / ("memory.events" if self.version == "v2" else "memory.oom_control")
            with contextlib.suppress(OSError):
                for line in events.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        return False

    def remove(self) -> None:
        """Remove the cgroup(s) once empty; the boot process may still be exiting, so a background thread
        retries instead of making the run wait."""
        _reaper.put(self.dirs)


class _CgroupReaper:
    def __init__(self) -> None:
        self.pending: list[tuple[float, Path]] = []
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None

    def put(self, dirs: list[Path]) -> None:
        with self.cond:
            self.pending += [(time.monotonic(), d) for d in dirs]
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="forge-cgroup-reaper", daemon=True)
                self.thread.start()
            self.cond.notify()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
                batch, self.pending = self.pending, []
            keep = []
            for since, d in batch:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    if time.monotonic() - since > 2.0:  # something outlived its run: kill it
                        with contextlib.suppress(OSError):
                            for pid in (d / "cgroup.procs").read_text().split():
                                os.kill(int(pid), signal.SIGKILL)
                    keep.append((since, d))
            if keep:
                time.sleep(0.02)
                with self.cond:
                    self.pending += keep


_reaper = _CgroupReaper()


def make_run_cgroup(jail: Jail, max_pids: int, memory_bytes: int) -> RunCgroup | None:
    """A cgroup bounding the whole run's process count and memory (tmpfs pages included), if the host allows."""
    if not jail.cgroup_parents:
        return None
    name = uuid.uuid4().hex[:12]
    dirs: list[Path] = []
    try:
        if "v2" in jail.cgroup_parents:
            d = jail.cgroup_parents["v2"] / name
            d.mkdir()
            dirs.append(d)
            (d / "pids.max").write_text(str(max_pids))
            (d / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (d / "memory.swap.max").write_text("0")
            return RunCgroup(dirs, "v2")
        for controller, parent in jail.cgroup_parents.items():
            d = parent / name
            d.mkdir()
            dirs.append(d)
            if controller == "pids":
                (d / "pids.max").write_text(str(max_pids))
            else:
                (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
        return RunCgroup(dirs, "v1")
    except OSError as err:
        log.debug("per-run cgroup failed: %s", err)
        for d in dirs:
            with contextlib.suppress(OSError):
                d.rmdir()
        return None
