"""Pieces shared by python/examples/sp_mlp.py and moe_ep.py: the gloo group the torch baseline
uses, the one-rank reference check (fails the run loudly), timing (median over repeats of the
slowest rank) and the --json row."""
import json
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from mpi4py import MPI

COMM = MPI.COMM_WORLD
RANK, W = COMM.Get_rank(), COMM.Get_size()
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
# unit roundoff of each dtype's output; the GEMMs accumulate in f32 in both backends
UNIT = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8}


def init_gloo(comm=COMM, prefix="fluxcpp_example_gloo_", backend="gloo"):
    """torch.distributed over gloo (or `backend`) on the ranks of an mpi4py communicator;
    rendezvous through a file rank 0 names."""
    rank = comm.Get_rank()
    path = comm.bcast(tempfile.mkdtemp(prefix=prefix) if rank == 0 else None)
    dist.init_process_group(backend, init_method=f"file://{path}/rendezvous", rank=rank,
                            world_size=comm.Get_size())
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def add_run_args(a, corrupt_help):
    """The options every example shares (a: an ArgumentParser's add_argument)."""
    a("--no-bench", action="store_true", help="check only, no timing")
    a("--warmup", type=int, default=2)
    a("--repeat", type=int, default=5)
    a("--threads", type=int, default=1, help="torch threads per rank")
    a("--seed", type=int, default=0)
    a("--corrupt", action="store_true", help=corrupt_help)
    a("--json", help="append the results as one JSON line to this file (rank 0)")
    a("--tag", help="a note stored in the --json row")


def tolerance(dtype, k):
    """Relative error allowed for a result of K-long dot products in dtype against an f64
    reference: the output's rounding (4 units) plus K units of f32 accumulation."""
    return 4 * UNIT[dtype] + k * UNIT[torch.float32]


class Checker:
    """Compares this rank's results with the one-rank reference; exit() ends the run with status
    1 on every rank if any rank saw a mismatch."""

    def __init__(self, name):
        self.name, self.failures, self.lines, self.total = name, 0, [], None

    def compare(self, what, got, want, tol):
        """max |got - want| <= tol * max |want| (tol 0: bitwise equal after the cast to f64)."""
        g, w = got.detach().double(), want.detach().double()
        if g.shape != w.shape:
            err, scale = float("inf"), 1.0
        else:
            err = (g - w).abs().max().item() if g.numel() else 0.0
            scale = w.abs().max().item() if w.numel() else 0.0
        ok = err <= tol * scale if tol else err == 0
        worst = COMM.allreduce(err / scale if scale else err, op=MPI.MAX)
        all_ok = COMM.allreduce(int(ok), op=MPI.MIN)
        if not ok:
            self.failures += 1
            print(f"[rank {RANK}] {self.name}: MISMATCH {what}: max error {err:.3g} > "
                  f"{tol:.3g} x max |ref| {scale:.3g}", file=sys.stderr, flush=True)
        bound = "bitwise" if not tol else f"<= {tol:.2g}"
        self.lines.append(f"  check {what}: max rel. error {worst:.3g} ({bound}) "
                          f"{'ok' if all_ok else 'FAILED'}")
        return ok

    def report(self):
        """Prints the checks (rank 0); the number of mismatches over all ranks (collective)."""
        self.total = COMM.allreduce(self.failures)
        if RANK == 0:
            print("\n".join(self.lines), flush=True)
        return self.total

    def exit_if_failed(self):
        if self.report() if self.total is None else self.total:
            if RANK == 0:
                print(f"{self.name}: the results differ from the one-rank reference",
                      file=sys.stderr, flush=True)
            if dist.is_initialized():
                dist.destroy_process_group()
            sys.exit(1)


def timed(fns, warmup, repeat):
    """{name: ms}: for each fn of the dict {name: fn}, the median over `repeat` runs (after
    `warmup`) of the slowest rank's time of fn(). The fns take turns run by run (so a machine
    shared with other jobs slows them alike); every run starts after a barrier."""
    times = {name: [] for name in fns}
    for i in range(warmup + repeat):
        for name, fn in fns.items():
            COMM.Barrier()
            t0 = time.perf_counter()
            fn()
            t = COMM.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if i >= warmup:
                times[name].append(t * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def append_json(path, row):
    if path and RANK == 0:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def seeded(shape, seed, data="normal", scale=1.0):
    """The same tensor on every rank (f64): N(0, scale^2), or integers in {-1, 0, 1} (data="int":
    every product and sum of the examples' sizes is exact in f32)."""
    g = torch.Generator().manual_seed(seed)
    if data == "int":
        return torch.randint(-1, 2, shape, generator=g).double()
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale
