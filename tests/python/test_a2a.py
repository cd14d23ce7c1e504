"""AllToAllSingle, A2aGemm, GemmA2aTranspose and A2aTransposeGemm against gloo all_to_all /
all_gather plus torch.mm."""
import os

import torch
import torch.distributed as dist

import fluxcpp
from support import RANK, W, check, close, context, equal, finish, init_gloo, tol_for

init_gloo()


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def gloo_a2a(x, in_splits, out_splits):
    y = x.float() if x.dtype == torch.bfloat16 else x
    out = torch.empty((sum(out_splits),) + tuple(x.shape[1:]), dtype=y.dtype)
    if x.shape[1:].numel() and (sum(in_splits) or sum(out_splits)):
        dist.all_to_all_single(out, y.contiguous(), out_splits, in_splits)
    return out.to(x.dtype)


def gloo_all_gather(x):
    y = x.float() if x.dtype == torch.bfloat16 else x
    parts = [torch.empty_like(y) for _ in range(W)]
    dist.all_gather(parts, y.contiguous())
    return [p.to(x.dtype) for p in parts]


with context() as ctx:
    # AllToAllSingle with uneven splits (tensors and lists), exact.
    def splits_of(src, dst):
        return (3 * src + 2 * dst + 1) % 5

    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        n = 20
        with fluxcpp.AllToAllSingle(ctx, 5 * W, n, dtype) as op:
            ins = [splits_of(RANK, t) for t in range(W)]
            outs = [splits_of(s, RANK) for s in range(W)]
            x = rand((sum(ins), n), dtype, RANK)
            ref = gloo_a2a(x, ins, outs)
            equal(op(x, torch.tensor(ins), torch.tensor(outs)), ref, f"all_to_all_single {dtype}")
            out = torch.empty((sum(outs), n), dtype=dtype)
            check(op(x, ins, outs, out=out) is out, "all_to_all_single returns out")
            equal(out, ref, f"all_to_all_single list splits out= {dtype}")
            buf = op.input_buffer()
            buf[:x.shape[0]].copy_(x)
            equal(op(buf[:x.shape[0]], ins, outs), ref, f"all_to_all_single zero-copy {dtype}")

    # Blocks past the handshake's payload (256 KiB): across hosts they cross the network
    # unstaged, from the input and into the output (A2aExchange::Direct on the TCP channel), or
    # from the zero-copy buffer; then, on hosts of one rank, an all-to-all in place (input and
    # output overlap: staged), and the direct path again after it.
    n = 1000
    big = (256 << 10) // (4 * n) + 7  # f32 rows: more than 256 KiB a block
    hosts = [None] * W
    dist.all_gather_object(hosts, os.environ.get("FLUXCPP_HOST_ID", ""))
    with fluxcpp.AllToAllSingle(ctx, big * W, n, torch.float32) as op:
        for call in range(4):
            def rows(src, dst):
                return big - (call + 2 * src + dst) % 3
            ins = [rows(RANK, t) for t in range(W)]
            outs = [rows(s, RANK) for s in range(W)]
            x = rand((sum(ins), n), torch.float32, 100 * call + RANK)
            ref = gloo_a2a(x, ins, outs)
            if call == 1:
                buf = op.input_buffer()
                buf[:x.shape[0]].copy_(x)
                x = buf[:x.shape[0]]
            equal(op(x, ins, outs), ref, f"all_to_all_single of large blocks, call {call}")
            if call == 2 and W == 2 and len(set(hosts)) == W:
                eq = [big, big]
                y = rand((2 * big, n), torch.float32, 7 + RANK)
                ref = gloo_a2a(y, eq, eq)
                check(op(y, eq, eq, out=y) is y, "all_to_all_single in place returns out")
                equal(y, ref, "all_to_all_single of large blocks in place")

    # A2aGemm: equal splits then mm.
    for din, dout in ((torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                      (torch.bfloat16, torch.bfloat16)):
        m, n, k = 3 * W, 24, 40
        with fluxcpp.A2aGemm(ctx, 4 * W, n, k, input_dtype=din, output_dtype=dout) as op:
            x = rand((m, k), din, RANK)
            w = rand((n, k), din, 77)
            b = rand((n,), dout, 78)
            a2a = torch.empty((m, k), dtype=din)
            y = op(x, w, b, a2a_output=a2a)
            ref_a2a = gloo_a2a(x, [m // W] * W, [m // W] * W)
            equal(a2a, ref_a2a, f"a2a_gemm {din}->{dout}: a2a_output")
            close(y, ref_a2a.double() @ w.double().t() + b.double(), f"a2a_gemm {din}->{dout}",
                  tol_for(din, k) + (tol_for(dout, 1) if dout == torch.bfloat16 else 0))

    # Ulysses: GemmA2aTranspose then A2aTransposeGemm, each against its index formula.
    bs, seq, hidden, nheads, hd, n = 2, 4 * W, 32, 2 * W, 8, 24
    nd = nheads * hd
    for dtype in (torch.float32, torch.bfloat16):
        tol = tol_for(dtype, hidden) + (tol_for(dtype, 1) if dtype == torch.bfloat16 else 0)
        with fluxcpp.GemmA2aTranspose(ctx, bs, seq, hidden, nheads, hd, dtype) as g, \
                fluxcpp.GemmAllToAllTranspose(ctx, bs, seq, hidden, nheads, hd, dtype) as alias:
            check(type(alias) is fluxcpp.GemmA2aTranspose, "GemmAllToAllTranspose is an alias")
            x = rand((bs, seq // W, hidden), dtype, RANK)
            w = rand((nd, hidden), dtype, 5)
            b = rand((nd,), dtype, 6)
            out = g(x, w, b)
            ys = gloo_all_gather((x.double() @ w.double().t() + b.double()).float())
            Y = torch.cat(ys, dim=1).double().view(bs, seq, nheads, hd)
            h0 = RANK * nheads // W
            ref = Y[:, :, h0:h0 + nheads // W, :].permute(0, 2, 1, 3)
            close(out, ref, f"gemm_a2a_transpose {dtype}", tol)
            alias.close()
        with fluxcpp.A2aTransposeGemm(ctx, bs, seq, nheads, hd, n, dtype) as op:
            x = rand((bs, nheads // W, seq, hd), dtype, 10 + RANK)
            w = rand((n, nd), dtype, 11)
            a2a = torch.empty((bs, seq // W, nd), dtype=dtype)
            y = op(x, w, a2a_output=a2a)
            xs = gloo_all_gather(x)  # [bs, nheads/W, seq, hd] from every rank
            full = torch.cat(xs, dim=1)  # [bs, nheads, seq, hd]
            t0 = RANK * seq // W
            ref_a2a = full[:, :, t0:t0 + seq // W, :].permute(0, 2, 1, 3).reshape(bs, seq // W, nd)
            equal(a2a, ref_a2a.contiguous(), f"a2a_transpose_gemm {dtype}: a2a_output")
            close(y, ref_a2a.double() @ w.double().t(), f"a2a_transpose_gemm {dtype}",
                  tol_for(dtype, nd) + (tol_for(dtype, 1) if dtype == torch.bfloat16 else 0))

finish("python.a2a")
