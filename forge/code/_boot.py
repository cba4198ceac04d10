# ruff: noqa
"""The sandbox's fork server (passed to ``python -I -S -B -c``; never imported: the checkout is hidden in the
jail). It is a file so it can be read and linted.

Started once per Forge process, as root when Forge is root: it enters the shared network and mount namespaces,
imports what runs need, then forks one *boot* process per request that arrives on its socket (with the run's
stdin, stdout, stderr and report pipe as passed descriptors). Forking this warm interpreter costs a few
milliseconds where starting a fresh one costs ~30 (the per-run cost that bounds the judge's throughput).

Per run, three processes:
- boot: takes the descriptors, starts its own session, joins the run's cgroups, makes a new PID + mount
  namespace for its children, forks ``init`` and waits for it;
- init (pid 1 of the new namespace, stays root, so the code can neither signal nor trace it): mounts a fresh
  /proc and a size- and inode-capped tmpfs over the scratch directory, forks ``user``, waits for it and writes
  its wait status and resource usage to the report pipe; when init exits the kernel kills every process left
  in the namespace (double-forked daemons included);
- user: closes the report pipe, sets rlimits, drops to the run's uid (no new privileges) and runs the code.
"""

import ctypes, io, json, os, resource, select, signal, socket, sys, traceback

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
REPORT_FD = 3
COMPILED = {}


def check(rc, what):
    if rc != 0:
        os.write(2, f"sandbox: {what} failed: {os.strerror(ctypes.get_errno())}\n".encode())
        os._exit(120)


def user(A, uid):
    os.close(REPORT_FD)
    os.chdir(A["cwd"])
    for name, soft, hard in A["limits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    if uid >= 0:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binary can give root back
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # Python's own default, as in a fresh interpreter
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
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=False)
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


def init(A, uid):
    cwd = A["cwd"]
    if A["pidns"]:
        check(libc.mount(None, b"/", None, 16384 | (1 << 18), None), "make / private")  # MS_REC | MS_PRIVATE
        check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount /proc")  # nosuid nodev noexec
        if A["tmpfs"]:
            # Keep the submission's files, cover the scratch dir with a capped tmpfs, put them back.
            files = {}
            for name in os.listdir(cwd):
                with open(os.path.join(cwd, name), "rb") as f:
                    files[name] = (f.read(), os.stat(os.path.join(cwd, name)).st_mode & 0o777)
            opts = f"{A['tmpfs']},mode=0700,uid={max(uid, 0)},gid={max(uid, 0)}".encode()
            check(libc.mount(b"forge-scratch", cwd.encode(), b"tmpfs", 2 | 4, opts), "tmpfs scratch")
            for name, (data, mode) in files.items():
                path = os.path.join(cwd, name)
                with open(path, "wb") as f:
                    f.write(data)
                os.chmod(path, mode)
    pid = os.fork()
    if pid == 0:
        user(A, uid)
    _, status, usage = os.wait4(pid, 0)
    os.write(REPORT_FD, f"{status} {usage.ru_utime + usage.ru_stime:.6f} {usage.ru_maxrss}\n".encode())
    os._exit(0)


def boot(A, fds):
    for target, fd in zip((0, 1, 2, REPORT_FD), fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > REPORT_FD:
            os.close(fd)
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    uid = A["uid"]
    for procs in A["cgroups"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    if A["pidns"]:
        check(libc.unshare(0x20000000 | 0x00020000), "unshare(CLONE_NEWPID|CLONE_NEWNS)")
    if os.fork() == 0:
        init(A, uid)
    os.close(REPORT_FD)
    for fd in (0, 1, 2):
        os.close(fd)  # only the code's own processes hold the output pipes, so EOF means they are done
    os.wait()
    os._exit(0)


def serve(sock):
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # boot processes are reaped by the kernel
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        if not msg:
            os._exit(0)  # Forge went away
        A = json.loads(msg)
        if A.get("trusted_program"):
            # Forge's own harness: compiled once here, so each run skips it (never done for submitted code,
            # which could crash or stall the compiler).
            key = A["trusted_program"]
            if key not in COMPILED:
                with open(A["target"], encoding="utf-8") as f:
                    COMPILED[key] = compile(f.read(), A["target"], "exec")
            A["_compiled"] = COMPILED[key]
        pid = os.fork()
        if pid == 0:
            sock.close()
            try:
                boot(A, fds)
            finally:
                os._exit(121)
        for fd in fds:
            os.close(fd)
        sock.send(str(pid).encode())


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    net, mnt = int(sys.argv[2]), int(sys.argv[3])
    if net >= 0:
        check(libc.setns(net, 0x40000000), "setns(net)")
        check(libc.setns(mnt, 0x00020000), "setns(mnt)")
        os.close(net)
        os.close(mnt)
    os.chdir("/")
    sock.send(b"ready")
    serve(sock)


main()
