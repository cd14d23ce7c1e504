#!/usr/bin/python3
"""Per-call overhead of the Python module over the C ABI: the same calls with tiny shapes as
bench/capi_call_overhead.c (ag_gemm, all_gather: m = W, n = k = 8, f32; grouped_gemm: one row),
made through fluxcpp with out= given, and compared with that program's numbers.

Usage: mpirun -np W /usr/bin/python3 scripts/bench_python_overhead.py [iterations] [C program]
(C program: build/bench/fluxcpp_capi_call_overhead, run by rank 0's mpirun separately: pass
its output file instead, see scripts/bench_python.sh)."""
import statistics
import sys
import time

import torch
from mpi4py import MPI

import fluxcpp

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
c_results = {}
if len(sys.argv) > 2:
    for line in open(sys.argv[2]):
        f = line.split()
        if len(f) == 6 and f[0] == "op":
            c_results[f[1]] = float(f[5])

comm = MPI.COMM_WORLD
torch.set_num_threads(1)
with fluxcpp.Context() as ctx:
    W = ctx.world_size
    x, w = torch.zeros(1, 8), torch.zeros(8, 8)
    y, g = torch.zeros(W, 8), torch.zeros(W, 8)
    split = torch.ones(1, dtype=torch.int64)
    w1, y1 = w.view(1, 8, 8), y[:1]
    ag = fluxcpp.AgGemm(ctx, W, 8, 8, torch.float32)
    gather = fluxcpp.AllGather(ctx, W, 8, torch.float32)
    gg = fluxcpp.GroupedGemm(ctx, 1, 1, 8, 8, torch.float32)
    calls = {"ag_gemm": lambda: ag(x, w, out=y), "all_gather": lambda: gather(x, out=g),
             "grouped_gemm": lambda: gg(x, split, w1, out=y1)}
    for name, call in calls.items():
        runs = []
        for _ in range(7):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            runs.append((time.perf_counter() - t0) / iters * 1e6)
        py = statistics.median(runs)
        if ctx.rank == 0:
            c = c_results.get(name)
            extra = f" c_us {c:.2f} overhead_us {py - c:.2f}" if c is not None else ""
            print(f"op {name} W {W} python_us {py:.2f}{extra}", flush=True)
    for op in (ag, gather, gg):
        op.close()
