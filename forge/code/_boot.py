# ruff: noqa
"""The first code every sandboxed run executes (passed to ``python -I -S -B -c``; never imported).

It is a file so it can be read and linted, but it runs as a string: the checkout is hidden inside the jail.
Arguments are plain ``key=value`` strings (importing json would cost ~10 ms of a ~30 ms run).

Three processes, as root when Forge is root:
- boot (this process): enters the shared network and mount namespaces, joins the run's cgroups, makes a new
  PID + mount namespace for its children, forks ``init`` and waits for it;
- init (pid 1 of the new namespace, stays root, so the code can neither signal nor trace it): mounts a fresh
  /proc and a size- and inode-capped tmpfs over the scratch directory, forks ``user``, waits for it and writes
  its wait status and resource usage to the report pipe; when init exits the kernel kills every process left
  in the namespace (double-forked daemons included);
- user: closes the report pipe, sets rlimits, drops to the run's uid (no new privileges) and runs the code.
"""
import os, sys

A = dict(arg.split("=", 1) for arg in sys.argv[1:])
NET, MNT, REPORT, UID = int(A["net"]), int(A["mnt"]), int(A["report"]), int(A["uid"])
CWD, MODE, TARGET = A["cwd"], A["mode"], A["target"]
PIDNS, TMPFS = A["pidns"] == "1", A["tmpfs"]
if NET >= 0 or PIDNS:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]

    def check(rc, what):
        if rc != 0:
            os.write(2, f"sandbox: {what} failed: {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(120)


if NET >= 0:
    check(libc.setns(NET, 0x40000000), "setns(net)")
    check(libc.setns(MNT, 0x00020000), "setns(mnt)")
    os.close(NET)
    os.close(MNT)
for procs in filter(None, A["cgroups"].split(",")):
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
if PIDNS:
    check(libc.unshare(0x20000000 | 0x00020000), "unshare(CLONE_NEWPID|CLONE_NEWNS)")


def user():
    os.close(REPORT)
    os.chdir(CWD)
    for limit in filter(None, A["limits"].split(",")):
        name, soft, hard = limit.split(":")
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
    if UID >= 0:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binary can give root back
        os.setgroups([])
        os.setresgid(UID, UID, UID)
        os.setresuid(UID, UID, UID)
    if MODE == "exec":
        env = dict(e.split("=", 1) for e in filter(None, A["env"].split("\x1f")))
        argv = A["argv"].split("\x1f")
        try:
            os.execve(argv[0], argv, env)
        except OSError as err:
            os.write(2, f"sandbox: cannot execute {argv[0]}: {err}\n".encode())
            os._exit(126)
    sys.argv = [TARGET]
    sys.path[0] = CWD
    with open(TARGET, encoding="utf-8") as f:
        code = compile(f.read(), TARGET, "exec")
    exec(code, {"__name__": "__main__", "__file__": TARGET, "__builtins__": __builtins__})


def init():
    if PIDNS:
        check(libc.mount(None, b"/", None, 16384 | (1 << 18), None), "make / private")  # MS_REC | MS_PRIVATE
        check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount /proc")  # nosuid nodev noexec
        if TMPFS:
            # Keep the submission's files, cover the scratch dir with a capped tmpfs, put them back.
            files = {}
            for name in os.listdir(CWD):
                with open(os.path.join(CWD, name), "rb") as f:
                    files[name] = (f.read(), os.stat(os.path.join(CWD, name)).st_mode & 0o777)
            opts = f"{TMPFS},mode=0700,uid={max(UID, 0)},gid={max(UID, 0)}".encode()
            check(libc.mount(b"forge-scratch", CWD.encode(), b"tmpfs", 2 | 4, opts), "tmpfs scratch")
            for name, (data, mode) in files.items():
                path = os.path.join(CWD, name)
                with open(path, "wb") as f:
                    f.write(data)
                os.chmod(path, mode)
    pid = os.fork()
    if pid == 0:
        try:
            user()
        except SystemExit:
            raise
        except BaseException:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        return
    _, status, usage = os.wait4(pid, 0)
    os.write(REPORT, f"{status} {usage.ru_utime + usage.ru_stime:.6f} {usage.ru_maxrss}\n".encode())
    os._exit(0)


import resource

if os.fork() == 0:
    init()
else:
    os.close(REPORT)
    for fd in (0, 1, 2):
        os.close(fd)  # only the code's own processes hold the output pipes, so EOF means they are done
    os.wait()
    os._exit(0)
