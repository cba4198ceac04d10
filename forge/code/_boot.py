# ruff: noqa
"""The sandbox's fork server (passed to ``python -I -S -B -c``; never imported: the checkout is hidden in the
jail). It is a file so it can be read and linted.

Started once per Forge process, as root when Forge is root: it enters the shared network and mount namespaces
(not root: the user namespace of ours that owns them first, where it is root without any power outside),
imports what runs need, freezes its heap (so children's garbage collection copies no pages), then forks one
process per request that arrives on its socket (with the run's stdin, stdout, stderr and report pipe as passed
descriptors). Forking this warm interpreter costs about a millisecond where starting a fresh one costs ~30, and
one process per run (no intermediate init) halves the forks: the per-run cost bounds the judge's throughput.

The run's process is pid 1 of a new PID namespace (when the host allows one): it takes the descriptors, starts
its own session (at the deadline Forge kills it through the pidfd the server hands over, and that process
group), joins the run's cgroups, makes its own mount namespace with a fresh /proc and a size- and inode-capped
tmpfs scratch directory holding the submission's files, sets rlimits, drops to the run's uid (no new
privileges) and runs the code. When it exits the kernel kills
every process left in the namespace (double-forked daemons included). The server, outside the namespace and
root, waits for it through a pidfd and writes its wait status and resource usage to the run's report pipe, which
the run never holds.
"""

import ctypes, gc, io, json, os, resource, select, signal, socket, sys, traceback

os.environ.pop("GLIBC_TUNABLES", None)  # read by glibc at start (_jail.py: _HEAP_TUNABLES); runs get an empty environment
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
COMPILED = {}


def check(rc, what):
    if rc != 0:
        os.write(2, f"sandbox: {what} failed: {os.strerror(ctypes.get_errno())}\n".encode())
        os._exit(120)


def prepare(A):
    """As root, in the new namespaces: session, cgroups, mounts, the submission's files."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for procs in A["cgroups"]:
        with open(procs, "w") as f:
            f.write("0")  # "0": the writer itself
    cwd, uid = A["cwd"], A["uid"]
    if A["pidns"]:
        check(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
        check(libc.mount(None, b"/", None, 16384 | (1 << 18), None), "make / private")  # MS_REC | MS_PRIVATE
        check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount /proc")  # nosuid nodev noexec
    files = {}
    for name, (text, src, mode) in A["files"].items() if A["tmpfs"] else ():
        if text is None and not src:
            continue  # a trusted program the server runs from its compiled copy
        if src:
            with open(src, "rb") as f:
                files[name] = (f.read(), mode)
        else:
            files[name] = (text.encode("utf-8"), mode)
    if A["rootless"]:
        # Every run is our uid outside, so the scratch base (other runs' staged files and directories) would be
        # theirs to read and write: an empty tmpfs covers it in this run's mount namespace, an on-disk run
        # directory (the compiler's) bound back on top.
        own = None if A["tmpfs"] else os.open(cwd, os.O_PATH | os.O_DIRECTORY)
        base = os.path.dirname(cwd)
        check(libc.mount(b"forge-base", base.encode(), b"tmpfs", 2 | 4, b"size=64k,mode=0755"), "tmpfs over base")
        os.mkdir(cwd)
        if own is not None:
            check(libc.mount(f"/proc/self/fd/{own}".encode(), cwd.encode(), None, 4096, None), "bind run dir")
            os.close(own)
    if A["tmpfs"]:
        opts = f"{A['tmpfs']},mode=0700,uid={max(uid, 0)},gid={max(uid, 0)}".encode()
        check(libc.mount(b"forge-scratch", cwd.encode(), b"tmpfs", 2 | 4, opts), "tmpfs scratch")
        for name, (data, mode) in files.items():
            path = os.path.join(cwd, name)
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, mode)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def shed_user_namespace():
    """Not root: the run gets a user namespace of its own, where it is uid 65534 (our uid outside), and gives up
    every capability it holds there, bounding set included, so neither it nor anything it execs holds one. Its
    processes count against RLIMIT_NPROC under that namespace alone."""
    check(libc.unshare(0x10000000), "unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", "65534 0 1"), ("gid_map", "65534 0 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (EINVAL past the last capability)
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    none = (CapData * 2)()
    check(libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), none), "capset(none)")  # _LINUX_CAPABILITY_VERSION_3
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


FILTER = None  # the BPF program of forge/code/syscalls.py, as prctl wants it


def deny_syscalls():
    """Install the system-call filter: the last step before the code runs (it forbids mount and unshare)."""
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: what lets an unprivileged process install a filter
    check(libc.prctl(22, 2, ctypes.byref(FILTER), 0, 0), "prctl(PR_SET_SECCOMP)")  # SECCOMP_MODE_FILTER


def user(A):
    uid = A["uid"]
    os.chdir(A["cwd"])
    for name, soft, hard in A["limits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    if A["rootless"]:
        shed_user_namespace()
    if uid >= 0:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binary can give root back
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if FILTER is not None:
        deny_syscalls()
    if A["mode"] == "exec":
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; a native program should not
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execve(A["argv"][0], A["argv"], A["env"])
        except OSError as err:
            os.write(2, f"sandbox: cannot execute {A['argv'][0]}: {err}\n".encode())
            os._exit(126)
    target = A["target"]
    sys.argv = [target]
    sys.path[0] = A["cwd"]
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    code = 0
    try:
        program = A.get("_compiled")
        if program is None:
            with open(target, encoding="utf-8") as f:
                program = compile(f.read(), target, "exec")
        exec(program, {"__name__": "__main__", "__file__": target, "__builtins__": __builtins__})
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def run(A, fds):
    """The run's process (pid 1 of its namespace): descriptors 0-2 only, then prepare as root, then the code."""
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)  # the server's socket, pidfds and other runs' report pipes
    prepare(A)
    user(A)


def serve(sock, own_pidns):
    running = {}  # pidfd -> (pid, report fd)
    while True:
        ready, _, _ = select.select([sock, *running], [], [])
        for fd in ready:
            if fd is sock:
                start_run(sock, own_pidns, running)
            else:
                pid, report = running.pop(fd)
                _, status, usage = os.wait4(pid, 0)
                try:
                    os.write(report, f"{status} {usage.ru_utime + usage.ru_stime:.6f} {usage.ru_maxrss}\n".encode())
                except OSError:
                    pass  # Forge stopped listening (a killed run)
                os.close(report)
                os.close(fd)


def start_run(sock, own_pidns, running):
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 24, 4)
    if not msg:
        os._exit(0)  # Forge went away
    A = json.loads(msg)
    if A.get("trusted_program"):
        # Forge's own harness: compiled once here, so each run skips it (never done for submitted code, which
        # could crash or stall the compiler).
        key = A["trusted_program"]
        if key not in COMPILED:
            text, src, _ = A["files"]["main.py"]
            if text is None:  # (never both empty for an unknown key: Forge sends the text until we answered)
                with open(src, encoding="utf-8") as f:
                    text = f.read()
            COMPILED[key] = compile(text, A["target"], "exec")
        A["_compiled"] = COMPILED[key]
    if A["pidns"]:
        # The next child is pid 1 of a new namespace; afterwards point our children back at our own.
        check(libc.unshare(0x20000000), "unshare(CLONE_NEWPID)")
    try:
        pid = os.fork()
        if pid == 0:
            try:
                run(A, fds)
            finally:
                os._exit(121)
    finally:
        if A["pidns"]:
            check(libc.setns(own_pidns, 0x20000000), "setns(own pid namespace)")
    for fd in fds[:3]:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    running[pidfd] = (pid, fds[3])
    # The pidfd goes along: Forge kills through it, which reaches the run even before its setsid (a deadline or
    # a cancel can come that early on a loaded host), and never a later process that reused the number.
    socket.send_fds(sock, [str(host_pid(pidfd) if A["rootless"] else pid).encode()], [pidfd])


def host_pid(pidfd):
    """The run's pid as Forge sees it (not root, this server is pid 1 of a namespace of its own): the pid its
    pidfd shows in /proc, which is Forge's."""
    with open(f"/proc/self/fdinfo/{pidfd}") as f:
        for line in f:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise RuntimeError("no Pid in pidfd fdinfo")


WARM = """
import sys
class A:
    def f(self, x: int = 1, *a, **k) -> list:
        return [i * x for i in range(3) if i] + list({j: j for j in a}) + [f"{x!r:>3}", b"b", 1.5, 2j, ...]
async def g():
    async with a as b:
        yield (lambda y: y)(b)
try:
    assert A().f(2) and sys.argv is not None
except (AssertionError, ValueError) as e:
    raise
finally:
    pass
"""


# Standard modules submissions import most (HumanEval's prompts: typing in 1 of 8, math, collections, re; MBPP's
# solutions: math, re, heapq, itertools, collections, bisect): imported once here, so a run that imports them
# finds them in sys.modules instead of paying for it (typing alone costs ~3 ms, re and collections with it).
# Each run's copy is its own (fork), so a submission that changes one changes nothing for the next run.
PRELOAD = ("time", "typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string")


def preload():
    for name in PRELOAD:
        __import__(name)


def warm_up():
    """Compile and run once here what every run does once: the first compile() in a process costs ~3.5 ms
    (the parser's first use), which a forked child would otherwise pay every time."""
    exec(compile(WARM, "<warm-up>", "exec"), {"__name__": "warm"})
    json.loads(json.dumps({"a": [1, 2.5, "x", None, {"b": True}]}))
    wrapper = io.TextIOWrapper(io.BytesIO(b"x\n"), encoding="utf-8")
    wrapper.read()
    try:
        raise ValueError("warm-up")
    except ValueError:
        traceback.format_exc()


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    net, mnt, user_ns = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    global FILTER
    if sys.argv[5]:
        program = bytes.fromhex(sys.argv[5])
        FILTER = SockFprog(len(program) // 8, program)  # struct sock_filter: 8 bytes each (ctypes keeps the bytes)
    if user_ns >= 0:  # not root: the user namespace that owns the other two, first
        check(libc.setns(user_ns, 0x10000000), "setns(user)")
        os.close(user_ns)
    if net >= 0:
        check(libc.setns(net, 0x40000000), "setns(net)")
        check(libc.setns(mnt, 0x00020000), "setns(mnt)")
        os.close(net)
        os.close(mnt)
    os.chdir("/")
    if user_ns >= 0:
        # Runs go back to the server's PID namespace after each fork (setns), which needs one our user namespace
        # owns: make it, and serve from its pid 1 while this process waits.
        check(libc.unshare(0x20000000), "unshare(CLONE_NEWPID)")
        server = os.fork()
        if server:
            sock.close()
            _, status = os.waitpid(server, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    preload()
    warm_up()
    gc.collect()
    gc.freeze()  # children touching these objects' GC headers would copy every page
    sock.send(b"ready")
    serve(sock, own_pidns)


main()
