"""The "fluxcpp" torch.distributed backend against torch's gloo backend, in one run on one host:
W ranks (multiprocessing, a FileStore), each collective at each size timed on the default group
(fluxcpp) and on a gloo group of the same ranks, interleaved round by round; then the cost of a
call from Python (dist.all_reduce against the same AllReduce called through fluxcpp's Python
module, both 4 bytes) and a DDP training step. Medians; numbers for docs/history/benchmarks-lab-notes.md.

    PYTHONPATH=build/python scripts/python scripts/bench_torch_backend.py [-np W] [--dtypes f32,bf16]
        [--max-bytes N] [--rounds R] [--json FILE] [--hosts H] [--link RATE]

--hosts H: H simulated hosts of W / H ranks (FLUXCPP_HOST_ID): fluxcpp's legs between them go
over its TCP channel, gloo's over its own, both on the loopback. --link RATE (root): the run
moves into a network namespace of its own whose loopback is shaped with tc tbf at RATE (10gbit:
one core per rank and 10 Gbit/s, as scripts/link_run.sh does for the C++ bench).
    scripts/python scripts/bench_torch_backend.py --report W2.json [W4.json ...]   # markdown tables

Every call is the same torch call on both backends (torch 2.x's gloo sums bf16 and has
reduce_scatter_tensor and all_gather_into_tensor natively)."""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_batch import batch_size  # noqa: E402

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")


def sizes(max_bytes):
    return [s for s in (4, 64, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20,
                        16 << 20, 64 << 20) if s <= max_bytes]


def make_call(op, backend, group, dtype, nbytes, world, rank):
    esize = torch.tensor([], dtype=dtype).element_size()
    n = max(1, nbytes // esize)
    if op == "all_reduce":
        x = torch.ones(n, dtype=dtype)
        return lambda: dist.all_reduce(x, group=group)
    if op == "all_gather":  # the tensor form both backends have natively
        x, out = torch.ones(n, dtype=dtype), torch.empty(n * world, dtype=dtype)
        return lambda: dist.all_gather_into_tensor(out, x, group=group)
    if op == "reduce_scatter":  # n elements per rank out, world * n in
        per = max(1, n // world)
        x, out = torch.ones(per * world, dtype=dtype), torch.empty(per, dtype=dtype)
        return lambda: dist.reduce_scatter_tensor(out, x, group=group)
    if op == "broadcast":
        x = torch.ones(n, dtype=dtype)
        return lambda: dist.broadcast(x, src=0, group=group)
    if op == "alltoall":
        per = max(1, n // world)
        x, out = torch.ones(per * world, dtype=dtype), torch.empty(per * world, dtype=dtype)
        return lambda: dist.all_to_all_single(out, x, group=group)
    raise ValueError(op)


def time_call(fn, reps, group):
    """Seconds per call of a batch of `reps` (bench_batch.batch_size: the same on every rank)."""
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def rank_main(rank, world, store, a, results):
    if a.hosts > 1:
        os.environ["FLUXCPP_HOST_ID"] = f"simulated-host-{rank // (world // a.hosts)}"
        os.environ.setdefault("FLUXCPP_SOCKET_IFNAME", "lo")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import fluxcpp
    torch.set_num_threads(1)
    dist.init_process_group("fluxcpp", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    gloo = dist.new_group(list(range(world)), backend="gloo")
    groups = {"fluxcpp": None, "gloo": gloo}
    for g in groups.values():  # both backends warm before the first timed row
        x = torch.ones(1)
        for _ in range(2000):
            dist.all_reduce(x, group=g)
    rows = []
    for dname in a.dtypes.split(","):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dname]
        for op in (o for o in OPS if o in a.ops.split(",")):
            for nbytes in sizes(a.max_bytes):
                times = {"fluxcpp": [], "gloo": []}
                calls, reps = {}, {}
                for b, g in groups.items():
                    try:
                        calls[b] = make_call(op, b, g, dtype, nbytes, world, rank)
                        calls[b]()  # creates or grows the op's buffers
                        reps[b] = batch_size(calls[b], g)
                        for _ in range(reps[b]):  # untimed warm-up
                            calls[b]()
                    except RuntimeError as e:
                        calls[b] = None
                        if rank == 0:
                            print(f"{op} {b}: {str(e).splitlines()[0][:80]}", file=sys.stderr)
                for r in range(a.rounds):
                    order = list(groups) if r % 2 == 0 else list(groups)[::-1]
                    for b in order:
                        if calls[b] is not None:
                            times[b].append(time_call(calls[b], reps[b], groups[b]))
                if rank == 0:
                    med = {b: statistics.median(v) * 1e6 if v else None for b, v in times.items()}
                    ratio = med["gloo"] / med["fluxcpp"] if med["gloo"] and med["fluxcpp"] else None
                    rows.append(dict(op=op, dtype=dname, bytes=nbytes, world=world, hosts=a.hosts,
                                     link=a.link,
                                     fluxcpp_us=med["fluxcpp"], gloo_us=med["gloo"],
                                     speedup=ratio))
                    print(f"{op:15s} {dname:4s} {nbytes:>10d} B  fluxcpp {med['fluxcpp']:10.1f} us"
                          f"  gloo {med['gloo'] or float('nan'):10.1f} us  "
                          f"x{ratio or float('nan'):.2f}", flush=True)
    # The cost of a call from Python: dist.all_reduce against fluxcpp.AllReduce.forward on the
    # group's own context (the Python module's call), 4 bytes each, interleaved.
    ctx = fluxcpp.Context.from_group()
    op = fluxcpp.AllReduce(ctx, 1, torch.float32)
    x = torch.ones(1)
    d, f = [], []
    for _ in range(a.rounds * 3):
        d.append(time_call(lambda: dist.all_reduce(x), 200, None))
        f.append(time_call(lambda: op.forward(x, out=x), 200, None))
    op.close()
    ctx.close()
    if rank == 0:
        rows.append(dict(op="python_call", world=world, dist_all_reduce_us=statistics.median(d) * 1e6,
                         module_all_reduce_us=statistics.median(f) * 1e6))
        print(f"4 B all_reduce: dist.all_reduce {statistics.median(d) * 1e6:.1f} us, "
              f"fluxcpp.AllReduce.forward {statistics.median(f) * 1e6:.1f} us", flush=True)
    # A DDP step: an MLP of hidden 1024 (4 Linear layers, 16.8 M parameters), batch 32.
    for b, g in groups.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                    torch.nn.Linear(4096, 1024), torch.nn.GELU(),
                                    torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                    torch.nn.Linear(4096, 1024))
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=g)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        xb = torch.randn(32, 1024)
        steps = []
        for i in range(3 + a.rounds * 3):
            dist.barrier(group=g)
            t0 = time.perf_counter()
            opt.zero_grad()
            ddp(xb).square().mean().backward()
            opt.step()
            if i >= 3:
                steps.append(time.perf_counter() - t0)
        if rank == 0:
            rows.append(dict(op="ddp_step", backend=b, world=world,
                             step_ms=statistics.median(steps) * 1e3))
            print(f"DDP step ({b}): {statistics.median(steps) * 1e3:.1f} ms", flush=True)
    if rank == 0:
        results.put(rows)
    dist.destroy_process_group()


def report(paths):
    """docs/history/benchmarks-lab-notes.md's tables from the JSON of one or more runs."""
    def size(b):
        return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
    for path in paths:
        d = json.load(open(path))
        rows = d["rows"]
        w, hosts, link = rows[0]["world"], rows[0].get("hosts", 1), rows[0].get("link", "")
        where = (f", {hosts} hosts x {w // hosts} ranks" if hosts > 1 else "") + \
                (f", link {link}" if link else "")
        print(f"\n**W = {w}{where}** (rev {d['rev']}): fluxcpp µs / gloo µs (gloo ÷ fluxcpp)\n")
        ops = [o for o in OPS if any(r["op"] == o for r in rows)]
        for dname in ("f32", "bf16"):
            sel = [r for r in rows if r.get("dtype") == dname]
            if not sel:
                continue
            print(f"| {dname} | " + " | ".join(ops) + " |")
            print("|---" * (len(ops) + 1) + "|")
            for b in sorted({r["bytes"] for r in sel}):
                cells = []
                for o in ops:
                    r = next((x for x in sel if x["op"] == o and x["bytes"] == b), None)
                    if r is None or r["fluxcpp_us"] is None:
                        cells.append("—")
                    elif r["gloo_us"] is None:
                        cells.append(f"{r['fluxcpp_us']:.1f} / n/a")
                    else:
                        cells.append(f"{r['fluxcpp_us']:.1f} / {r['gloo_us']:.0f} "
                                     f"(**{r['speedup']:.1f}x**)")
                print(f"| {size(b)} | " + " | ".join(cells) + " |")
            print()
        for r in rows:
            if r["op"] == "python_call":
                print(f"- 4 B all_reduce from Python: `dist.all_reduce` {r['dist_all_reduce_us']:.1f}"
                      f" µs, `fluxcpp.AllReduce.forward` {r['module_all_reduce_us']:.1f} µs")
        steps = {r["backend"]: r["step_ms"] for r in rows if r["op"] == "ddp_step"}
        if steps:
            print(f"- DDP step (MLP 1024-4096-1024-4096-1024, batch 32): fluxcpp "
                  f"{steps['fluxcpp']:.1f} ms, gloo {steps['gloo']:.1f} ms "
                  f"({steps['gloo'] / steps['fluxcpp']:.2f}x)")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--report":
        report(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--ops", default=",".join(OPS), help="collectives to run (default: all)")
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--link", default="")
    a = ap.parse_args()
    if a.link and os.environ.get("FLUXCPP_BENCH_TB_NETNS") != "1":
        import subprocess
        env = dict(os.environ, FLUXCPP_BENCH_TB_NETNS="1")
        script = ("ip link set lo up && tc qdisc add dev lo root tbf rate \"$0\" burst 512kb "
                  "latency 100ms && exec \"$@\"")
        return subprocess.run(["unshare", "-n", "bash", "-c", script, a.link, sys.executable,
                               os.path.abspath(__file__)] + sys.argv[1:], env=env).returncode
    if a.np % a.hosts:
        ap.error(f"--hosts {a.hosts} must divide -np {a.np}")
    tmp = tempfile.mkdtemp(prefix="fluxcpp_bench_tb_")
    store = os.path.join(tmp, "store")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, a.np, store, a, q)) for r in range(a.np)]
    try:
        for p in procs:
            p.start()
        rows = q.get()
        for p in procs:
            p.join()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the FileStores' files
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(rev=os.popen("git rev-parse --short HEAD").read().strip(), rows=rows),
                      f, indent=1)
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
