"""Processes a test started itself (multiprocessing), joined under a watchdog; a test re-run in a
network namespace of its own."""
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time


def join_all(procs, timeout_s=120):
    """Joins every process within timeout_s in all; kills the ones still running (a hang).
    Returns the indices of those that had to be killed."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [i for i, p in enumerate(procs) if p.is_alive()]
    for i in hung:
        procs[i].kill()
        procs[i].join()
    return hung


def in_network_namespace(marker):
    """Re-runs this script under `unshare -n` (root: a network namespace of its own, its loopback
    up) and exits with its status, unless `marker` is set: returns only inside the namespace."""
    if os.environ.get(marker) == "1":
        return
    env = dict(os.environ, **{marker: "1"})
    script = "ip link set lo up && exec " + " ".join([sys.executable, os.path.abspath(sys.argv[0])])
    sys.exit(subprocess.run(["unshare", "-n", "bash", "-c", script], env=env).returncode)


def segments_of(pids, since):
    """The /dev/shm names of fluxcpp segments these pids ("fluxcpp-<pid>-...") left behind: made
    at or after `since` (a time.time()) and held by no live process. One older than that is
    another process's that had the same pid before (pids wrap on a busy machine); one whose
    liveness lock (flock, src/shm/liveness.hpp) a live process holds is that process's, not the
    test's, whose processes are gone: fault.shm_neighbours' squatter takes the names of pids near
    every name it sees, and the sanitizer subset runs beside the suite."""
    def free(n):  # nobody holds it (False when it was removed meanwhile, or is not ours)
        try:
            fd = os.open(os.path.join("/dev/shm", n), os.O_RDONLY)
        except (FileNotFoundError, PermissionError):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False  # a live process holds it
        finally:
            os.close(fd)

    left = []
    for n in os.listdir("/dev/shm"):
        if not any(n.startswith(f"fluxcpp-{pid}-") for pid in pids):
            continue
        try:
            if os.stat(os.path.join("/dev/shm", n)).st_mtime < since - 1:
                continue
        except (FileNotFoundError, PermissionError):
            continue  # unlinked meanwhile, or another user's
        if free(n):
            left.append(n)
    if left:  # a creator may have been about to lock one when we did: it then removes it
        time.sleep(1)
        left = [n for n in left if free(n)]
    return left


def free_port():
    """A TCP port nobody listens on now (the kernel's pick): tests side by side never share one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree(pid):
    """pid and every process below it now, whatever session or group they made for themselves."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    todo, found = [pid], []
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def kill_tree(pid):
    """SIGKILL pid and every process below it, whatever session or group they made for
    themselves (torch 2.x's torchrun starts each worker in a session of its own)."""
    for p in tree(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
