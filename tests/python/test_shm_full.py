"""A full /dev/shm on one host, agreed world-wide: on 2 simulated hosts (spawn.py --hosts 2),
the second host's ranks find /dev/shm full for any segment of 1 MiB or more
(FLUXCPP_TEST_SHM_FULL_BYTES, a library built with FLUXCPP_FAULT_INJECTION=ON). An op whose
segment is larger: its create fails on every rank of every host, at once, with SYSTEM "/dev/shm
is full" (never a create that succeeds on one host and times out at the first call); the
context stays usable, and a small op works on every rank.

    spawn.py -np 2 --hosts 2 tests/python/test_shm_full.py"""
import os
import time

from support import RANK, W, check, finish, raises

per_host = W // 2
if RANK >= per_host:  # before the context's first segment: the library reads it once
    os.environ["FLUXCPP_TEST_SHM_FULL_BYTES"] = str(1 << 20)

import torch  # noqa: E402

import fluxcpp  # noqa: E402
from support import context  # noqa: E402

ctx = context(timeout_s=20)
t0 = time.monotonic()
e = raises(fluxcpp.Error, lambda: fluxcpp.AllReduce(ctx, 1 << 22, torch.float32),
           "AllReduce with a 16 MiB segment while one host's /dev/shm is full",
           status=fluxcpp.Status.SYSTEM, contains=("/dev/shm is full",))
took = time.monotonic() - t0
check(took < 10, f"the failed create took {took:.1f} s (a timeout, not an agreed error?)")
with fluxcpp.AllReduce(ctx, 256, torch.float32) as op:
    got = op.forward(torch.full((256,), float(RANK + 1)))
check(torch.equal(got, torch.full((256,), float(W * (W + 1) // 2))),
      "a small AllReduce after the failed create")
ctx.close()
finish("python.shm_full")
