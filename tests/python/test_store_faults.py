"""The failure model of a context made without MPI (Context.from_store), ranks started by Python
multiprocessing: a rank that never arrives, a rank killed in a call, a rank with another world
size, rank 0 killed inside the rendezvous. The others get the error naming what happened within timeout_s plus a little, and nothing
is left in /dev/shm. Run as one process (no mpirun): it starts the ranks itself."""
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time

from procs import join_all, segments_of

STARTED = time.time()  # segments older than this are not this test's (procs.segments_of)

W = 3
TIMEOUT = 2.0
VICTIM = W - 1
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr, flush=True)


def rank_main(scenario, rank, store_path, barrier, results, entering, killed):
    import torch
    import torch.distributed as dist
    import fluxcpp
    results.put(("pid", rank, os.getpid()))
    store = dist.FileStore(store_path, W)
    world = W + 1 if scenario == "world_size" and rank == VICTIM else W
    if scenario == "absent" and rank == VICTIM:
        return  # never arrives
    if scenario == "creator_killed":
        if rank == 0:
            entering.set()  # run() kills it inside its rendezvous
        else:
            killed.wait(60)  # the others arrive once it is dead
    # The world_size case times nothing (the others are told when they read the victim's
    # arrival): a long timeout, so that a victim started late on a loaded machine still arrives.
    timeout = 60.0 if scenario == "world_size" else TIMEOUT
    t0 = time.monotonic()
    try:
        if scenario == "world_size" and rank == VICTIM:
            fluxcpp.Context.from_store(store, rank, world, timeout_s=timeout)
            results.put(("error", rank, "no error", "", 0.0))
            return
        ctx = fluxcpp.Context.from_store(store, rank, W, timeout_s=timeout)
        op = fluxcpp.AllReduce(ctx, 1024, torch.float32)
        x = torch.full((1024,), float(rank + 1))
        got = op.forward(x)
        ok = torch.equal(got, torch.full((1024,), float(W * (W + 1) // 2)))
        results.put(("first_call", rank, ok))
        barrier.wait()
        if scenario == "killed" and rank == VICTIM:
            # A Queue's put is sent by a feeder thread: flush it, or SIGKILL may lose the
            # first_call result (seen once in 30 runs).
            results.close()
            results.join_thread()
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        op.forward(x)
        results.put(("error", rank, "no error", "", time.monotonic() - t0))
    except fluxcpp.Error as e:
        results.put(("error", rank, e.status.name, str(e), time.monotonic() - t0))


def run(scenario):
    tmp = tempfile.mkdtemp(prefix="fluxcpp_faults_")
    ctx = mp.get_context("spawn")
    results, barrier = ctx.Queue(), ctx.Barrier(W)
    entering, killed = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=rank_main, args=(scenario, r, os.path.join(tmp, "store"), barrier,
                                                 results, entering, killed))
             for r in range(W)]
    for p in procs:
        p.start()
    if scenario == "creator_killed":
        entering.wait(60)
        time.sleep(1.0)  # it has set the id and published its rendezvous round by now
        procs[0].kill()
        procs[0].join()
        killed.set()
    hung = join_all(procs)
    check(not hung, f"{scenario}: rank(s) {hung} still running after 120 s (watchdog)")
    out = []
    while not results.empty():
        out.append(results.get())
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def no_leftovers(scenario, out):
    pids = [m[2] for m in out if m[0] == "pid"]
    left = segments_of(pids, STARTED)
    check(not left, f"{scenario}: left in /dev/shm: {left}")


def errors(out):
    return {m[1]: m[2:] for m in out if m[0] == "error"}


def main():
    # A rank that never arrives: the others time out in the rendezvous naming it.
    out = run("absent")
    err = errors(out)
    for r in range(W - 1):
        status, text, secs = err.get(r, ("missing", "", 0.0))
        check(status == "TIMEOUT" and f"rank(s) {VICTIM} did not take part" in text,
              f"absent: rank {r} got {status}: {text}")
        print(f"absent: rank {r}: {text}", flush=True)
    no_leftovers("absent", out)

    # A rank killed between two calls: the others time out in the call naming it.
    out = run("killed")
    err = errors(out)
    firsts = [m for m in out if m[0] == "first_call"]
    check(len(firsts) == W and all(m[2] for m in firsts), f"killed: first calls {firsts}")
    for r in range(W - 1):
        status, text, secs = err.get(r, ("missing", "", 0.0))
        check(status == "TIMEOUT" and f"rank {VICTIM}" in text and secs < TIMEOUT + 3,
              f"killed: rank {r} got {status} after {secs:.1f} s: {text}")
        print(f"killed: rank {r} after {secs:.1f} s: {text}", flush=True)
    no_leftovers("killed", out)

    # A rank that passes another world size: it is told, and so are the others, naming it.
    out = run("world_size")
    err = errors(out)
    status, text, _ = err.get(VICTIM, ("missing", "", 0.0))
    check(status == "INVALID_ARGUMENT" and f"world_size={W + 1}" in text and f"passed {W}" in text,
          f"world_size: rank {VICTIM} got {status}: {text}")
    print(f"world_size: rank {VICTIM}: {text}", flush=True)
    for r in range(W - 1):  # they read its arrival in the store: told at once, naming it
        status, text, _ = err.get(r, ("missing", "", 0.0))
        check(status == "INVALID_ARGUMENT" and f"rank {VICTIM} passed {W + 1}" in text,
              f"world_size: rank {r} got {status}: {text}")
    no_leftovers("world_size", out)

    # Rank 0 killed inside the rendezvous after publishing its round: the others still meet,
    # then time out naming it as exited, and the rendezvous name is gone.
    out = run("creator_killed")
    err = errors(out)
    for r in range(1, W):
        status, text, _ = err.get(r, ("missing", "", 0.0))
        # (On a machine too slow for rank 0 to reach its rendezvous within 1 s, the others time
        # out waiting for its id instead: still TIMEOUT naming rank 0, still nothing left.)
        check(status == "TIMEOUT" and "rank 0" in text,
              f"creator_killed: rank {r} got {status}: {text}")
        print(f"creator_killed: rank {r}: {text}", flush=True)
    no_leftovers("creator_killed", out)

    print(f"python.store_faults: {'ok' if not failures else f'{len(failures)} failure(s)'}", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
