"""Context.from_store(ranks_per_host=n): the ranks of one machine in consecutive groups of n act
as hosts of their own (their traffic between groups over the TCP channel), as with the MPI
context's grouping.

- grouped: 4 ranks, ranks_per_host=2: every rank sees host_size 2 and its host rank (r % 2); an
  AllReduce across the two simulated hosts returns the exact sum of small integers on every rank.
- disagree: rank 0 passes ranks_per_host=2, the others 0: INVALID_ARGUMENT on every rank, naming
  ranks_per_host and both values.
- negative: ranks_per_host=-1: ValueError before anything meets.
Run as one process (no mpirun): it starts the ranks itself; a watchdog kills a hung rank."""
import multiprocessing as mp
import os
import shutil
import sys
import tempfile

from procs import join_all

problems = []  # what went wrong, said at the end (every case runs)


def expect(cond, what):
    if not cond:
        problems.append(what)


def rank_main(store_path, key, rank, world, per_host, results):
    import torch
    import torch.distributed as dist
    import fluxcpp
    store = dist.FileStore(store_path, -1)
    try:
        ctx = fluxcpp.Context.from_store(store, rank, world, timeout_s=30.0, key=key,
                                         ranks_per_host=per_host[rank])
        with ctx, fluxcpp.AllReduce(ctx, 1000, torch.float32) as op:
            got = op.forward(torch.arange(1000, dtype=torch.float32) + rank)
            want = torch.arange(1000, dtype=torch.float32) * world + world * (world - 1) // 2
            results.put((rank, "ok", (ctx.host_rank, ctx.host_size, bool(torch.equal(got, want)))))
    except fluxcpp.Error as e:
        results.put((rank, e.status.name, str(e)))


def run(ctx, path, key, per_host):
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(path, key, r, len(per_host), per_host, results))
             for r in range(len(per_host))]
    for p in procs:
        p.start()
    hung = join_all(procs)
    expect(not hung, f"{key}: process(es) {hung} still running after 120 s (watchdog)")
    out = {}
    while not results.empty():
        rank, kind, detail = results.get()
        out[rank] = (kind, detail)
    return out


def main():
    import fluxcpp
    os.environ.setdefault("FLUXCPP_SOCKET_IFNAME", "lo")  # the simulated hosts meet on loopback
    tmp = tempfile.mkdtemp(prefix="fluxcpp_store_grouping_")
    try:
        ctx = mp.get_context("spawn")
        out = run(ctx, os.path.join(tmp, "grouped"), "grouped", [2, 2, 2, 2])
        for r in range(4):
            got = out.get(r, ("missing", ""))
            expect(got == ("ok", (r % 2, 2, True)), f"grouped: rank {r}: {got}")
        out = run(ctx, os.path.join(tmp, "disagree"), "disagree", [2, 0, 0, 0])
        for r in range(4):
            kind, text = out.get(r, ("missing", ""))
            expect(kind == "INVALID_ARGUMENT" and "ranks_per_host=2 on rank 0 but 0 on rank 1" in
                  text, f"disagree: rank {r}: {kind}: {text}")
        try:
            fluxcpp.Context.from_store(None, 0, 1, ranks_per_host=-1)
            expect(False, "negative: no error")
        except ValueError as e:
            expect("ranks_per_host" in str(e), f"negative: {e}")
    finally:
        shutil.rmtree(tmp, True)
    for what in problems:
        print(f"FAIL: {what}", file=sys.stderr)
    if problems:
        sys.exit(f"{len(problems)} failure(s)")
    print("store grouping: all passed")


if __name__ == "__main__":
    main()
