"""How many calls a timed batch of the Python benchmarks holds (scripts/bench_torch_backend.py,
scripts/peers/torch_peers.py; scripts/peers/oneccl_bench.cpp keeps the same rule).

A batch lasts at least BATCH_S, so that the barrier before it (a gloo barrier leaves the ranks up
to ~100 µs apart) and the first call's cold caches are a small part of it: 3 calls of 1 MiB after
a barrier measured the skew (fluxcpp's all_gather 221 µs a call against 59 in batches of 50)."""
import time

import torch
import torch.distributed as dist

BATCH_S = 4e-3


def batch_size(fn, group, batch_s=BATCH_S):
    """Calls in a batch of batch_s, the same on every rank of `group`: after 3 untimed calls (a
    fresh op's first calls fault its pages in), batches of 3, 12, 48 ... calls are timed until
    one lasts 1 ms on the slowest rank."""
    for _ in range(3):
        fn()
    k = 3
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        if float(t) >= 1e-3 or k >= 3000:
            return max(3, min(5000, int(batch_s * k / float(t)) + 1))
        k *= 4
