"""The sandbox's system-call filter: what no judged program needs, denied with EPERM in every sandboxed run.

Built once per Forge process with libseccomp (through ``pyseccomp``) and exported as a classic BPF program, which
the fork server (``_boot.py``) installs in each run with one ``prctl`` after the run has dropped its privileges,
just before the submitted code starts: the jail holds neither the library nor our venv.

Denied: debugging other processes (ptrace, process_vm_*), the kernel keyring, eBPF, perf events, io_uring,
userfaultfd, kernel modules, kexec, reboot, swap, clocks, accounting, mounting and every new-mount-API call,
namespaces (unshare, setns, and clone with any CLONE_NEW* flag; clone3, whose flags live in memory a filter
cannot read, answers ENOSYS so the C library falls back to clone), chroot/pivot_root, file handles
(open_by_handle_at) and raw I/O ports. Everything else a Python or C++ program uses (fork, threads, pipes, files
in its scratch directory) is allowed.
"""

from __future__ import annotations

import errno
import tempfile

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr",
    "unshare", "setns",
    "open_by_handle_at", "name_to_handle_at", "quotactl", "lookup_dcookie",
    "iopl", "ioperm", "vhangup", "fanotify_init",
)
CLONE_NEW = {  # clone(2) flags that make a namespace
    "CLONE_NEWTIME": 0x00000080, "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000,
}


def denied_program() -> tuple[bytes | None, str]:
    """The filter as BPF bytes (``struct sock_filter`` array), and a line for the isolation report; ``None`` where
    libseccomp is missing or the filter cannot be built here (the report says so)."""
    try:
        import pyseccomp as sc

        f = sc.SyscallFilter(defaction=sc.ALLOW)
        known = []
        for name in DENIED:
            try:
                f.add_rule(sc.ERRNO(errno.EPERM), name)
                known.append(name)
            except (ValueError, OSError):  # a call this architecture does not have (iopl on arm64, …)
                continue
        for flag in CLONE_NEW.values():
            f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        with tempfile.TemporaryFile() as out:
            f.export_bpf(out)
            out.seek(0)
            program = out.read()
    except (ImportError, OSError, RuntimeError, ValueError) as err:
        return None, f"no system-call filter ({type(err).__name__}: {err})"
    return program, f"seccomp: {len(known)} system calls and namespace-making clone flags denied (EPERM)"
