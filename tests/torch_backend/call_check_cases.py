"""The call check's cases of the "fluxcpp" backend (run by test_backend.py on its ranks): small
calls that travel with the check (all_to_all_single's size classes and splits that disagree;
sums whose bits must be the library's AllReduce's and ReduceScatter's whether they travel with
the check or not), ranks that make different calls, and a fused op on the group's context."""
import torch
import torch.distributed as dist

import fluxcpp
from backend_data import RANK, W, data, expect_error


def check_all_to_all_carried():
    """Small all_to_all_single calls travel with the call check: uneven splits whose data falls in
    different size classes on different ranks (the call's own exchange then), and splits that
    disagree between ranks (an error on every rank naming both, the group goes on)."""
    if W < 2:
        return
    for dtype, small, large in ((torch.float32, 2, 600), (torch.bfloat16, 2, 600),
                                (torch.float32, 600, 3000)):
        # Rank 0 sends `small` elements to each rank, the others `large`: data of different size
        # classes (powers of two from 1 KiB up to 64 KiB with the record).
        size = lambda r: small if r == 0 else large
        send = [size(RANK)] * W
        recv = [size(s) for s in range(W)]
        inp = torch.cat([data(10 * RANK + t, send[t], dtype) for t in range(W)])
        out = torch.empty(sum(recv), dtype=dtype)
        dist.all_to_all_single(out, inp, recv, send)
        assert torch.equal(out, torch.cat([data(10 * s + RANK, recv[s], dtype)
                                           for s in range(W)])), \
            f"alltoall classes {dtype} {small}/{large}"
    # Rank 0 expects 2 elements from rank 1, which sends it 1.
    send = [1] * W
    recv = [2 if RANK == 0 and s == 1 else 1 for s in range(W)]
    inp = torch.ones(W)
    out = torch.empty(sum(recv))
    expect_error(lambda: dist.all_to_all_single(out, inp, recv, send), "rank 1 sends 4 bytes to "
                 "rank 0, which expects 8")
    x = torch.ones(5)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((5,), float(W)))


def check_mismatched_calls():
    """Ranks that make different calls: an error on every rank naming rank 0's call and the
    other ranks' in words, before a byte moves; the group goes on."""
    if W == 1:
        return
    first = RANK == 0

    def bcast_or_scatter():
        x = torch.ones(4)
        if first:
            dist.broadcast(x, src=0)
        else:
            dist.scatter(x, None, src=0)

    cases = [
        ("barrier vs allreduce",
         (lambda: dist.barrier()) if first else (lambda: dist.all_reduce(torch.ones(1))),
         "barrier()", "allreduce(SUM, float32, 1 element)"),
        ("broadcast vs scatter", bcast_or_scatter,
         "broadcast(root 0, float32, 4 elements)", "scatter(root 0, float32, 4 elements)"),
        ("reduce vs allreduce",
         (lambda: dist.reduce(torch.ones(3), dst=0)) if first
         else (lambda: dist.all_reduce(torch.ones(3))),
         "reduce(SUM, root 0, float32, 3 elements)", "allreduce(SUM, float32, 3 elements)"),
        ("MIN vs MAX",
         lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.MIN if first
                                 else dist.ReduceOp.MAX),
         "allreduce(MIN, float32, 4 elements)", "allreduce(MAX, float32, 4 elements)"),
        ("SUM vs PRODUCT on int64",
         lambda: dist.all_reduce(torch.ones(2, dtype=torch.int64), op=dist.ReduceOp.SUM if first
                                 else dist.ReduceOp.PRODUCT),
         "allreduce(SUM, int64, 2 elements)", "allreduce(PRODUCT, int64, 2 elements)"),
        ("int32 MAX vs float32 MAX",
         lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32 if first else torch.float32),
                                 op=dist.ReduceOp.MAX),
         "allreduce(MAX, int32, 4 elements)", "allreduce(MAX, float32, 4 elements)"),
    ]
    for what, call, mine0, others in cases:
        expect_error(call, "disagree", "rank 0 called " + mine0, "rank 1 called " + others)
        x = torch.full((6,), float(RANK + 1))
        dist.all_reduce(x)  # the group goes on
        assert torch.equal(x, torch.full((6,), float(W * (W + 1) // 2))), what


def check_from_group():
    ctx = fluxcpp.Context.from_group()
    assert (ctx.rank, ctx.world_size) == (RANK, W)
    op = fluxcpp.AllReduce(ctx, 64, torch.float32)
    y = op.forward(torch.full((64,), float(RANK + 1)))
    assert torch.equal(y, torch.full((64,), float(W * (W + 1) // 2)))
    x = torch.ones(8)
    dist.all_reduce(x)  # plain calls go on beside the fused op
    assert torch.equal(x, torch.full((8,), float(W)))
    op.close()
    # A float sum has the library AllReduce's bits whether its data travels with the call check
    # (small tensors) or through the group's AllReduce: random values, rounding in every add.
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        # Carried up to 64 KiB (f64 12000: not), across hosts of one rank each up to 128 KiB
        # (30000: the f32 and bf16 all_reduce there; the reduce_scatters' inputs are W times).
        for n in (1000, 12000, 30000, 100000):
            g = torch.Generator().manual_seed(77 + RANK)
            x = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
            with fluxcpp.AllReduce(ctx, n, dtype) as lib:
                want = lib.forward(x.clone())
            dist.all_reduce(x)
            assert torch.equal(x, want), f"all_reduce {dtype} n={n}: not the AllReduce's bits"
            # The same for reduce_scatter (ReduceScatter's own order: a ring on one host).
            x = torch.randn(n * W, generator=g, dtype=torch.float64).to(dtype)
            with fluxcpp.ReduceScatter(ctx, W, n, dtype) as lib:
                want = lib.forward(x.view(W, n)).view(n)
            got = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(got, x)
            assert torch.equal(got, want), f"reduce_scatter {dtype} n={n}: not ReduceScatter's bits"
    ctx.close()
