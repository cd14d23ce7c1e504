#!/usr/bin/python3
"""Per-call overhead of the Python module over the C ABI: the same calls with tiny shapes as
bench/capi_call_overhead.c (ag_gemm, all_gather: m = W, n = k = 8, f32; grouped_gemm: one row),
made through fluxcpp with out= given, and compared with that program's numbers: wall time, and
the calling thread's CPU time (which time slices lost to other processes do not inflate), each
the fastest of 7 runs.

Usage: mpirun -np W scripts/python scripts/bench_python_overhead.py [iterations] [C program]
(C program: build/bench/fluxcpp_capi_call_overhead, run by rank 0's mpirun separately: pass
its output file instead, see scripts/bench_python.sh)."""
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
        if len(f) == 8 and f[0] == "op":
            c_results[f[1]] = (float(f[5]), float(f[7]))

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
        runs, cpu = [], []
        for _ in range(7):
            comm.Barrier()
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(iters):
                call()
            runs.append((time.perf_counter() - t0) / iters * 1e6)
            cpu.append((time.thread_time() - c0) / iters * 1e6)
        py, py_cpu = min(runs), min(cpu)
        if ctx.rank == 0:
            line = f"op {name:12s} W {W}  wall: python {py:6.2f} us"
            c = c_results.get(name)
            if c is not None:
                line += f"  C {c[0]:6.2f} us  overhead {py - c[0]:6.2f} us"
            line += f"  | thread CPU: python {py_cpu:6.2f} us"
            if c is not None:
                line += f"  C {c[1]:6.2f} us  overhead {py_cpu - c[1]:6.2f} us"
            print(line, flush=True)
    for op in (ag, gather, gg):
        op.close()
