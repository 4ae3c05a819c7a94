"""Init process of the isolated sandbox: builds a minimal root, drops privileges, runs one command.

Executed as a script (``python -I -S jail.py SPEC_FD``) by util-linux ``unshare --user --mount
--net --pid --ipc --uts --fork --kill-child --keep-caps`` (see :mod:`isolation`, which writes
the spec and the user-id maps). It is PID 1 of the new PID namespace, so when it exits the kernel
kills every process left inside. Steps, in order (each one needs the one before):

  1. handshake: tell the host the user namespace exists, wait until the host has written the
     uid/gid maps (the host may map us to an unprivileged id that we could not map ourselves);
  2. open the bind sources with the host's file access, then switch to the mapped ids;
  3. mounts: a size-limited tmpfs as the new root, read-only bind mounts of the system and
     interpreter folders, the basic /dev nodes, a fresh /proc of the new PID namespace, a few
     /etc files; ``pivot_root`` into it and detach the old root: nothing of the host's tree
     stays reachable;
  4. unpack the workspace from a tar file descriptor, bring up loopback;
  5. drop every capability (bounding, ambient, permitted) and set no_new_privs, so the command
     cannot remount the read-only folders writable; fork, set the limits, exec the command;
  6. reap children until the command exits; report its wait status on a pipe; exit.

Setup failures go to the status pipe as ``E<message>``. Like runner.py this file imports only
the stdlib, and everything it needs is imported at the top: after step 2 the interpreter's own
folder may be out of reach until the bind mounts are in place.
"""

import ctypes
import errno
import fcntl
import json
import os
import platform
import re
import resource
import signal
import socket
import struct
import sys
import tarfile

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _b(text):
    return None if text is None else os.fsencode(text)


def mount(src, target, fstype, flags, data=None) -> None:
    _check(_libc.mount(_b(src), _b(target), _b(fstype), flags, _b(data)),
           f"mount {src} on {target}")


def prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(option, arg, 0, 0, 0)


def _mounts_under(path: str) -> list:
    """(mount point, per-mount options) of every mount at or below ``path``, outermost first."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == path or point.startswith(path.rstrip("/") + "/"):
                out.append((point, fields[5].split(",")))
    return out


def bind(src: str, dst: str, read_only: bool = True) -> None:
    """Bind ``src`` (file or folder, with its submounts) at ``dst``; read-only and nosuid.

    A remount must keep the flags the kernel locked on mounts inherited from the host (noexec,
    atime), so each submount is remounted with its own noexec flag added back.
    """
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | MS_REC)
    if not read_only:
        return
    for point, options in _mounts_under(dst):
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
        flags |= MS_NOEXEC if "noexec" in options else 0
        mount(None, point, None, flags)


def open_sources(spec: dict) -> list:
    """O_PATH descriptors of the bind sources, opened with the host's file access.

    After the switch to the sandbox ids the host's folders may not be traversable any more (a
    root-only home holding the interpreter); a descriptor reaches the folder without a path walk.
    """
    return [(os.open(src, os.O_PATH | os.O_CLOEXEC), dst) for src, dst in spec["ro_binds"]]


def build_root(spec: dict, sources: list) -> str:
    """Mounts the new root on ``spec["root"]`` (covering a host folder); returns its path.

    Runs as the sandbox user: the kernel refuses to create files in the new tmpfs for an owner
    that is not mapped in the namespace.
    """
    root = spec["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={spec['size_mb']}m,mode=0755,uid=0,gid=0")
    for fd, dst in sources:
        bind(f"/proc/self/fd/{fd}", root + dst)
        os.close(fd)
    for target, link in spec["symlinks"]:
        os.symlink(target, root + link)
    for name in spec["dev"]:
        bind("/dev/" + name, f"{root}/dev/{name}", read_only=False)
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{fd}", f"{root}/dev/{name}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    for path, text in spec["files"].items():
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        with open(root + path, "w") as f:
            f.write(text)
    for path in ("/tmp", "/dev/shm", "/proc"):
        os.makedirs(root + path, exist_ok=True)
    for path in ("/tmp", "/dev/shm"):
        os.chmod(root + path, 0o1777)
    try:  # needs a fully visible /proc in this mount namespace: before the pivot
        mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # some containers mask parts of /proc; the sandbox then runs without one
    return root


def pivot(root: str) -> None:
    """Makes ``root`` the root of this mount namespace and detaches the host's tree."""
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root: unknown system call number on {platform.machine()}")
    os.chdir(root)
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def become_sandbox_user() -> None:
    """Switches to the ids the host mapped to 0 inside (capabilities in the namespace stay)."""
    os.setresgid(0, 0, 0)
    try:
        os.setgroups([])  # drops the host's supplementary groups where the host allowed it
    except PermissionError:
        pass
    os.setresuid(0, 0, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a uid change clears it


def unpack_workspace(fd: int, workspace: str) -> None:
    os.makedirs(workspace, exist_ok=True)
    with os.fdopen(fd, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
        if hasattr(tarfile, "tar_filter"):
            tar.extractall(workspace, filter="tar")
        else:
            tar.extractall(workspace)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING)
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, ifreq)


def drop_privileges() -> None:
    """No capability survives, now or after exec; setuid binaries gain nothing."""
    _check(prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    cap = 0
    while prctl(PR_CAPBSET_DROP, cap) == 0:  # EINVAL past the last capability
        cap += 1
    if cap == 0:
        raise OSError("could not drop the capability bounding set")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    _check(_libc.capset(header, data), "capset")


def _set_limits(limits: dict) -> None:
    mem = limits["memory_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    size = limits["file_size_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Counted per user namespace (Linux >= 5.14): this sandbox's processes and threads only.
    n = limits["processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (n, n))


def run_command(spec: dict) -> int:
    """Forks the command (limits set in the child: the init itself must be able to fork) and
    reaps every child until the command exits; returns its wait status."""
    child = os.fork()
    if child == 0:
        try:
            _set_limits(spec["limits"])
            os.chdir(spec["cwd"])
            os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
        except BaseException as e:  # noqa: BLE001 - report any failure to start
            os.write(2, f"sandbox: cannot run {spec['argv'][0]}: {e}\n".encode())
        os._exit(127)
    while True:
        pid, status = os.wait()
        if pid == child:
            return status


def main(spec_fd: int) -> None:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    with os.fdopen(spec_fd) as f:
        spec = json.load(f)
    fds = spec["fds"]
    status_fd = fds["status"]
    os.write(fds["ready"], b"r")
    os.close(fds["ready"])
    go = os.read(fds["go"], 1)
    os.close(fds["go"])
    try:
        if go != b"g":
            raise OSError("the host did not map the user ids")
        sources = open_sources(spec)
        become_sandbox_user()
        pivot(build_root(spec, sources))
        try:
            unpack_workspace(fds["tar"], spec["cwd"])
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            raise OSError(f"the workspace does not fit in its {spec['size_mb']} MiB tmpfs "
                          f"(raise Limits.workspace_mb): {e}") from e
        loopback_up()
        _libc.sethostname(b"sandbox", 7)
        prctl(PR_SET_DUMPABLE, 0)
        drop_privileges()
    except BaseException as e:  # noqa: BLE001 - the host turns this into a clear error
        os.write(status_fd, f"E{type(e).__name__}: {e}".encode())
        os._exit(125)
    os.set_inheritable(status_fd, False)
    status = run_command(spec)
    os.write(status_fd, str(status).encode())
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
