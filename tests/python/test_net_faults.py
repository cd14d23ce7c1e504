"""The failure model of the TCP channel between hosts (contexts made from a store whose ranks
span hosts), in a private network namespace whose loopback carries the hosts' traffic:

- host_killed: 2 hosts x 2 ranks; after a first all_reduce, host 1's ranks are killed; host 0's
  ranks call again and get TIMEOUT naming a rank of host 1 within timeout_s plus a little.
- link_cut: 2 hosts x 1 rank; after a first all_reduce the link is cut (the loopback set down:
  every packet dropped, the connections left open), then both ranks call again: each gets TIMEOUT naming the other within
  timeout_s plus a little; then the link comes back and each destroys its context (local, the
  context being broken).
- slow_link: 2 hosts x 1 rank, an AllToAllSingle of blocks past the handshake's payload, which
  the TCP channel moves straight between the callers' tensors (A2aExchange::Direct); the link is
  slowed so that the blocks are still on it when the call times out; each rank then writes a
  sentinel into its output, the link comes back at full speed, and the sentinel must stay: once
  the call has failed nothing writes into the caller's memory (the channel closed its pairs).
In every scenario, nothing is left in /dev/shm. Run as one process (no mpirun): it re-runs itself under
`unshare -n` (root: a network namespace of its own) and starts the ranks itself."""
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from procs import in_network_namespace, join_all, segments_of

STARTED = time.time()  # segments older than this are not this test's (procs.segments_of)

TIMEOUT = 3.0
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr, flush=True)


def rank_main(scenario, rank, world, hosts, store_path, barrier, results, cut):
    import torch
    import torch.distributed as dist
    import fluxcpp
    per_host = world // hosts
    os.environ["FLUXCPP_HOST_ID"] = f"simulated-host-{rank // per_host}"
    os.environ["FLUXCPP_SOCKET_IFNAME"] = "lo"
    results.put(("pid", rank, os.getpid()))
    store = dist.FileStore(store_path, world)
    ctx = fluxcpp.Context.from_store(store, rank, world, timeout_s=TIMEOUT)
    if scenario == "slow_link":
        return slow_link(ctx, rank, world, barrier, results, cut)
    op = fluxcpp.AllReduce(ctx, 1 << 16, torch.float32)
    x = torch.full((1 << 16,), float(rank + 1))
    got = op.forward(x)
    results.put(("first_call", rank,
                 torch.equal(got, torch.full((1 << 16,), float(world * (world + 1) // 2)))))
    barrier.wait()
    if scenario == "host_killed" and rank // per_host == 1:
        results.close()
        results.join_thread()  # flush the queue before dying
        os.kill(os.getpid(), signal.SIGKILL)
    if scenario == "link_cut":
        cut.wait(60)  # the parent dropped every packet on the link
    failing_call(rank, results, lambda: op.forward(x))
    if scenario == "link_cut":
        barrier.wait()  # the link is back (the parent waits for every error first)
    destroy(rank, results, op, ctx)


def failing_call(rank, results, call):
    """Runs the call that must fail; reports its status, text and duration."""
    import fluxcpp
    t0 = time.monotonic()
    try:
        call()
        results.put(("error", rank, "no error", "", time.monotonic() - t0))
    except fluxcpp.Error as e:
        results.put(("error", rank, e.status.name, str(e), time.monotonic() - t0))


def destroy(rank, results, op, ctx):
    """Destroys the op and the context (local: the context is broken); reports how it went."""
    import fluxcpp
    t0 = time.monotonic()
    try:
        op.close()
        ctx.close()
        results.put(("closed", rank, "", time.monotonic() - t0))
    except fluxcpp.Error as e:
        results.put(("closed", rank, str(e), time.monotonic() - t0))


def slow_link(ctx, rank, world, barrier, results, cut):
    import torch
    import fluxcpp
    n, rows = 1000, 160  # 640 KB blocks of f32 rows: past the handshake's 256 KiB payload
    op = fluxcpp.AllToAllSingle(ctx, rows * world, n, torch.float32)
    x = torch.arange(rows * world * n, dtype=torch.float32).reshape(rows * world, n) + rank
    splits = [rows] * world
    out = torch.empty_like(x)
    op(x, splits, splits, out=out)
    want = torch.cat([torch.arange(rows * world * n, dtype=torch.float32).reshape(
        rows * world, n)[rows * rank:rows * (rank + 1)] + s for s in range(world)])
    results.put(("first_call", rank, torch.equal(out, want)))
    barrier.wait()
    cut.wait(60)  # the parent slowed the link: the blocks take longer than the timeout
    failing_call(rank, results, lambda: op(x, splits, splits, out=out))
    out.fill_(-7.0)  # the sentinel, written after the call returned
    barrier.wait()   # the parent restored the link's speed
    time.sleep(1.0)  # what was still queued would arrive now
    results.put(("sentinel", rank, bool((out == -7.0).all())))
    destroy(rank, results, op, ctx)


def slow(on):
    """The link at 400 kbit/s (a 640 KB block takes ~13 s), or back at full speed."""
    if on:
        subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "400kbit",
                        "burst", "16kb", "latency", "60s"], check=True)
    else:
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=True)


def link(up):
    """The link between the simulated hosts: the namespace's loopback. Down, it drops every
    packet; the connections stay open (nothing tells the ranks)."""
    subprocess.run(["ip", "link", "set", "lo", "up" if up else "down"], check=True)


def run(scenario, world, hosts):
    tmp = tempfile.mkdtemp(prefix="fluxcpp_netfaults_")
    ctx = mp.get_context("spawn")
    n_barrier = world if scenario == "link_cut" else world
    results, barrier, cut = ctx.Queue(), ctx.Barrier(n_barrier), ctx.Event()
    procs = [ctx.Process(target=rank_main, args=(scenario, r, world, hosts,
                                                 os.path.join(tmp, "store"), barrier, results,
                                                 cut))
             for r in range(world)]
    for p in procs:
        p.start()
    out = []
    if scenario in ("link_cut", "slow_link"):
        firsts = 0
        deadline = time.monotonic() + 120
        while firsts < world and time.monotonic() < deadline:
            m = results.get(timeout=120)
            out.append(m)
            firsts += m[0] == "first_call"
        slowed = scenario == "slow_link"
        if slowed:
            slow(True)
        else:
            link(False)
        cut.set()
        errors_seen = 0
        while errors_seen < world and time.monotonic() < deadline:
            m = results.get(timeout=120)
            out.append(m)
            errors_seen += m[0] == "error"
        if slowed:
            slow(False)
        else:
            link(True)
    hung = join_all(procs)
    check(not hung, f"{scenario}: rank(s) {hung} still running after 120 s (watchdog)")
    while not results.empty():
        out.append(results.get())
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def no_leftovers(scenario, out):
    pids = [m[2] for m in out if m[0] == "pid"]
    left = segments_of(pids, STARTED)
    check(not left, f"{scenario}: left in /dev/shm: {left}")


def check_run(scenario, out, world, error_ok):
    """The checks every scenario shares: the first calls right on every rank, the failing call's
    error on ranks 0 and 1 (error_ok(rank, status, text)) within the timeout plus a little, their
    destroys clean and quick, nothing left in /dev/shm."""
    firsts = [m for m in out if m[0] == "first_call"]
    check(len(firsts) == world and all(m[2] for m in firsts), f"{scenario}: first calls {firsts}")
    err = {m[1]: m[2:] for m in out if m[0] == "error"}
    for r in (0, 1):
        status, text, secs = err.get(r, ("missing", "", 0.0))
        check(error_ok(r, status, text) and secs < TIMEOUT + 3,
              f"{scenario}: rank {r} got {status} after {secs:.1f} s: {text}")
        print(f"{scenario}: rank {r} after {secs:.1f} s: {status}: {text}", flush=True)
    closed = {m[1]: m[2:] for m in out if m[0] == "closed"}
    check(sorted(closed) == [0, 1] and all(not e and secs < TIMEOUT + 3
                                           for e, secs in closed.values()),
          f"{scenario}: destroys {closed}")
    print(f"{scenario}: destroys {closed}", flush=True)
    no_leftovers(scenario, out)


def names(text, *ranks):
    return any(f"rank {g}" in text or f"rank(s) {g}" in text for g in ranks)


def main():
    check_run("host_killed", run("host_killed", 4, 2), 4,
              lambda r, status, text: status == "TIMEOUT" and names(text, 2, 3))
    check_run("link_cut", run("link_cut", 2, 2), 2,
              lambda r, status, text: status == "TIMEOUT" and names(text, 1 - r))
    out = run("slow_link", 2, 2)
    check_run("slow_link", out, 2, lambda r, status, text: status not in ("missing", "no error"))
    sentinel = {m[1]: m[2] for m in out if m[0] == "sentinel"}
    check(sentinel == {0: True, 1: True},
          f"slow_link: the output written after the failed call: {sentinel}")

    print(f"python.net_faults: {'ok' if not failures else f'{len(failures)} failure(s)'}",
          flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    # A network namespace of our own: its loopback is the link we cut.
    in_network_namespace("FLUXCPP_NET_FAULTS_NETNS")
    main()
