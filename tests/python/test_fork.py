"""Fork through Python multiprocessing (start method "fork", Linux's default): a child forked
after a context and ops were created gets fluxcpp.Error INVALID_USAGE naming both process ids on
every call, its close() of the copies is local and quick, and the parent's results stay exact
while the child keeps calling forward with other inputs."""
import multiprocessing as mp
import os
import time

import torch

import fluxcpp
from support import RANK, W, check, equal, finish

S = fluxcpp.Status


def child(ctx, op, parent_pid, rows, k, n, q):
    bad = []
    x = torch.full((rows, k), 100.0)
    w = torch.full((n, k), 100.0)
    for _ in range(20):
        try:
            op(x, w)
            bad.append("forward on a copy succeeded")
            break
        except fluxcpp.Error as e:
            text = str(e)
            if (e.status != S.INVALID_USAGE or str(os.getpid()) not in text
                    or str(parent_pid) not in text):
                bad.append(f"forward on a copy: status {e.status}: {text}")
                break
    t0 = time.monotonic()
    try:
        op.close()
        ctx.close()
    except Exception as e:  # noqa: BLE001 - reported to the parent
        bad.append(f"close in the child: {type(e).__name__}: {e}")
    if time.monotonic() - t0 > 1.0:
        bad.append(f"close in the child took {time.monotonic() - t0:.2f} s")
    q.put(bad)


def values(owner, call, rows, k):
    """Multiples of 1/8: the GEMM below is exact in f32."""
    i = torch.arange(rows).view(-1, 1)
    j = torch.arange(k).view(1, -1)
    return (((i * 7 + j * 3 + owner * 5 + call) % 9) - 4).float() / 8


with fluxcpp.Context(timeout_s=10) as ctx:
    rows, n, k = 4, 16, 32
    op = fluxcpp.AgGemm(ctx, rows * W, n, k, torch.float32)
    w = (((torch.arange(n).view(-1, 1) * 5 + torch.arange(k) + RANK) % 7) - 3).float() / 8
    fork = mp.get_context("fork")
    q = fork.Queue()
    kid = None
    for call in range(6):
        if call == 1:
            kid = fork.Process(target=child, args=(ctx, op, os.getpid(), rows, k, n, q))
            kid.start()
        got = op(values(RANK, call, rows, k), w)
        gathered = torch.cat([values(s, call, rows, k) for s in range(W)])
        equal(got, gathered @ w.t(), f"forward {call} in the parent (child alive: {call >= 1})")
    bad = q.get(timeout=60)
    kid.join(timeout=60)
    check(kid.exitcode == 0, f"child exit code {kid.exitcode}")
    for b in bad:
        check(False, f"child: {b}")
    op.close()

finish("fork")
