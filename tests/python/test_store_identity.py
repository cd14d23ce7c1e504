"""Context.from_store keeps two jobs that share a store apart, and its store waits are bounded.

- default_key: two jobs of 2 ranks share one FileStore file and the default key, started together,
  3 times: each job's ranks meet each other only (the key names the job), every rank returns its
  own job's sum.
- shared_key: the same key passed by both jobs, job B arriving while job A's rank 0 waits: B's
  rank 0 finds the key claimed, every later rank of either job finds the key marked
  (INVALID_USAGE naming it); A's rank 0 times out; no rank returns a sum.
- retry: rank 0 times out alone under an explicit key, then both ranks call again with that key:
  the claim was given back and the failed call's id removed, so the retry succeeds.
- blocking_store: a store without set_timeout whose get never returns: TIMEOUT within timeout_s.
- exit_after_timeout: a process whose from_store over a FileStore times out (rank 0 never comes)
  exits normally afterwards (status 0, no "terminate called": the store wait's helper thread
  must not be inside the store when the interpreter ends), twice.
Run as one process (no mpirun): it starts the ranks itself; a watchdog kills a hung rank."""
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from procs import join_all

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr, flush=True)


def rank_main(store_path, job, rank, key, timeout_s, results, go, retry):
    import torch
    import torch.distributed as dist
    import fluxcpp
    if go is not None:
        go.wait(60)
    store = dist.FileStore(store_path, -1)
    try:
        if retry is not None and rank == 0:  # the first call fails alone, then the retry
            try:
                fluxcpp.Context.from_store(store, 0, 2, timeout_s=1.0, key=key)
                results.put((job, rank, "first call: no error", ""))
            except fluxcpp.Error as e:
                results.put((job, rank, "first call", e.status.name))
            retry.set()
        elif retry is not None:
            retry.wait(60)
        ctx = fluxcpp.Context.from_store(store, rank, 2, timeout_s=timeout_s, key=key)
        with ctx, fluxcpp.AllReduce(ctx, 256, torch.float32) as op:
            got = op.forward(torch.full((256,), float(10 * job + rank + 1)))
            results.put((job, rank, "sum", float(got[0]) if torch.all(got == got[0]) else None))
    except fluxcpp.Error as e:
        results.put((job, rank, e.status.name, str(e)))


def start(ctx, args):
    p = ctx.Process(target=rank_main, args=args)
    p.start()
    return p


def finish(procs, results, what):
    hung = join_all(procs)
    check(not hung, f"{what}: process(es) {hung} still running after 120 s (watchdog)")
    out = {}
    while not results.empty():
        job, rank, kind, detail = results.get()
        out.setdefault((job, rank), []).append((kind, detail))
    return out


def job_main(path, job, results, go):
    """A job's launcher: its 2 ranks are its children (as torchrun's or a serving stack's)."""
    ctx = mp.get_context("spawn")
    procs = [start(ctx, (path, job, r, None, 10.0, results, go, None)) for r in (0, 1)]
    for p in procs:
        p.join(100)
        if p.is_alive():
            p.kill()


def default_key(ctx, path):
    results, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=job_main, args=(path, job, results, go)) for job in (0, 1)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # both launchers have started their ranks: they meet the store together
    go.set()
    out = finish(procs, results, "default_key")
    for job in (0, 1):
        want = float(2 * 10 * job + 3)
        for r in (0, 1):
            got = out.get((job, r), [("missing", "")])
            check(got == [("sum", want)], f"default_key: job {job} rank {r}: {got}, want {want}")


def wait_for_key(path, key):
    import torch.distributed as dist
    import datetime
    store = dist.FileStore(path, -1)
    store.set_timeout(datetime.timedelta(seconds=60))
    store.get(key)  # waits until it is set


def shared_key(ctx, path):
    results = ctx.Queue()
    # Job A's rank 0 waits longer than the three processes after it take to start one by one
    # (each imports torch: 3-7 s on a loaded machine), so that its id is still there when job
    # A's rank 1 reads it; with 8 s it had timed out and removed the id on a loaded run.
    a0 = start(ctx, (path, 0, 0, "shared", 30.0, results, None, None))
    wait_for_key(path, "shared")  # job A's rank 0 has claimed and set its id
    procs = [a0]
    for job, r in ((1, 0), (1, 1), (0, 1)):
        p = start(ctx, (path, job, r, "shared", 8.0, results, None, None))
        p.join(60)
        procs.append(p)
    out = finish(procs, results, "shared_key")
    for (job, r), got in sorted(out.items()):
        print(f"shared_key: job {job} rank {r}: {got}", flush=True)
        check(all(kind != "sum" for kind, _ in got), f"shared_key: job {job} rank {r}: {got}")
    for job, r in ((1, 0), (1, 1), (0, 1)):
        kind, text = out.get((job, r), [("missing", "")])[0]
        check(kind == "INVALID_USAGE" and "'shared'" in text and "a key of this job's own" in text,
              f"shared_key: job {job} rank {r} got {kind}: {text}")
    kind, text = out.get((0, 0), [("missing", "")])[0]
    check(kind == "TIMEOUT" and "rank(s) 1 did not take part" in text,
          f"shared_key: job 0 rank 0 got {kind}: {text}")


def retry(ctx, path):
    results, again = ctx.Queue(), ctx.Event()
    procs = [start(ctx, (path, 0, r, "again", 10.0, results, None, again)) for r in (0, 1)]
    out = finish(procs, results, "retry")
    check(out.get((0, 0)) == [("first call", "TIMEOUT"), ("sum", 3.0)] and
          out.get((0, 1)) == [("sum", 3.0)], f"retry: {out}")


class BlockingStore:
    """set/add as a store has them; get never returns (no set_timeout to bound it)."""

    def __init__(self):
        self.counts = {}

    def set(self, key, value):
        pass

    def add(self, key, n):
        self.counts[key] = self.counts.get(key, 0) + n
        return self.counts[key]

    def get(self, key):
        threading.Event().wait()


def blocking_store():
    import fluxcpp
    t0 = time.monotonic()
    try:
        fluxcpp.Context.from_store(BlockingStore(), 1, 2, timeout_s=1.0, key="k")
        check(False, "blocking_store: no error")
    except fluxcpp.Error as e:
        secs = time.monotonic() - t0
        check(e.status == fluxcpp.Status.TIMEOUT and "'k'" in str(e) and secs < 5,
              f"blocking_store: {e.status.name} after {secs:.1f} s: {e}")
        print(f"blocking_store: after {secs:.1f} s: {e}", flush=True)


def exit_after_timeout(path):
    code = ("import sys, torch.distributed as dist, fluxcpp\n"
            f"store = dist.FileStore({path!r}, 2)\n"
            "try:\n"
            "    fluxcpp.Context.from_store(store, 1, 2, timeout_s=1.0)\n"
            "    print('no error')\n"
            "except fluxcpp.Error as e:\n"
            "    print(e.status.name, flush=True)\n")
    for i in range(2):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
        check(r.returncode == 0 and r.stdout.strip() == "TIMEOUT" and "terminate" not in r.stderr,
              f"exit_after_timeout run {i}: status {r.returncode}, printed {r.stdout.strip()!r}, "
              f"stderr {r.stderr.strip()[-300:]!r}")
    print("exit_after_timeout: 2 runs", flush=True)


def main():
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="fluxcpp_store_id_")
    try:
        for i in range(3):
            default_key(ctx, os.path.join(tmp, f"jobs{i}"))
        shared_key(ctx, os.path.join(tmp, "shared"))
        retry(ctx, os.path.join(tmp, "retry"))
        blocking_store()
        exit_after_timeout(os.path.join(tmp, "exit"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"python.store_identity: {'ok' if not failures else f'{len(failures)} failure(s)'}",
          flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
