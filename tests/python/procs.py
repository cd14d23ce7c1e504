"""Processes a test started itself (multiprocessing), joined under a watchdog."""
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
