"""AllGather, AgGemm, ReduceScatter and GemmRs against torch's unfused path: gloo collectives
plus torch.mm. Run under mpirun at several world sizes."""
import torch
import torch.distributed as dist

import fluxcpp
from support import RANK, W, check, close, context, equal, finish, init_gloo, tol_for

init_gloo()
PAIRS = [(torch.float32, torch.float32), (torch.float64, torch.float64),
         (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)]


def gloo_all_gather(x):
    """dist.all_gather in f32/f64 (gloo has no bf16 here; bf16 -> f32 is exact)."""
    if x.numel() == 0:  # gloo divides by the element count
        return torch.empty((x.shape[0] * W,) + tuple(x.shape[1:]), dtype=x.dtype)
    y = x.float() if x.dtype == torch.bfloat16 else x
    parts = [torch.empty_like(y) for _ in range(W)]
    dist.all_gather(parts, y)
    return torch.cat(parts).to(x.dtype)


def gloo_sum(x):
    y = x.clone()
    if y.numel():
        dist.all_reduce(y)
    return y


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def ints(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


with context() as ctx:
    check(ctx.rank == RANK and ctx.world_size == W, f"context rank/world {ctx.rank}/{ctx.world_size}")

    # AllGather: exact, every dtype, several m, out given or not, zero-copy input.
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        k = 24
        with fluxcpp.AllGather(ctx, 16 * W, k, dtype) as op:
            for rows in (0, 1, 5, 16):
                x = rand((rows, k), dtype, 100 * RANK + rows)
                equal(op.forward(x), gloo_all_gather(x), f"all_gather {dtype} rows={rows}")
                out = torch.full((rows * W, k), 7.0, dtype=dtype)
                r = op(x, out=out)
                check(r is out, "all_gather returns out")
                equal(out, gloo_all_gather(x), f"all_gather out= {dtype} rows={rows}")
            buf = op.input_buffer()
            check(buf.shape == (16, k) and buf.dtype == dtype, f"input_buffer {list(buf.shape)}")
            x = rand((5, k), dtype, 7 + RANK)
            buf[:5].copy_(x)
            equal(op(buf[:5]), gloo_all_gather(x), f"all_gather zero-copy {dtype}")

    # Blocks past the handshake's payload (256 KiB): across hosts of one rank each they leave
    # from the input and land in the output (GatherExchange::Direct on the TCP channel); also
    # from the zero-copy buffer, in place (the input is this rank's block of the output), and
    # from an input overlapping another rank's block (staged); each call against gloo's.
    k = 1000
    rows = (256 << 10) // (4 * k) + 9
    with fluxcpp.AllGather(ctx, rows * W, k, torch.float32) as op:
        for call in range(5):
            x = rand((rows, k), torch.float32, 300 + 10 * call + RANK)
            ref = gloo_all_gather(x)
            what = f"all_gather of large blocks, call {call}"
            if call == 1:
                buf = op.input_buffer()
                buf[:rows].copy_(x)
                equal(op(buf[:rows]), ref, what + " (zero-copy)")
            elif call == 2:
                out = torch.empty((rows * W, k))
                out[rows * RANK:rows * (RANK + 1)].copy_(x)
                equal(op(out[rows * RANK:rows * (RANK + 1)], out=out), ref, what + " (in place)")
            elif call == 3 and W > 1:
                out = torch.empty((rows * W, k))
                other = (RANK + 1) % W  # the input sits in another rank's block of the output
                out[rows * other:rows * (other + 1)].copy_(x)
                equal(op(out[rows * other:rows * (other + 1)], out=out), ref,
                      what + " (input in another rank's block)")
            else:
                equal(op(x), ref, what)

    # AgGemm: tolerance scaled with k; bias; gathered_input exact; transpose_weight; zero-copy.
    for din, dout in PAIRS:
        for transpose in (False, True):
            n, k, rows = 40, 72, 6
            with fluxcpp.AgGemm(ctx, 8 * W, n, k, input_dtype=din, output_dtype=dout,
                                transpose_weight=transpose) as op:
                x = rand((rows, k), din, RANK)
                w = rand((n, k), din, 50 + RANK)
                b = rand((n,), dout, 90 + RANK)
                wc = w.t().contiguous() if transpose else w
                gathered = torch.empty((rows * W, k), dtype=din)
                y = op(x, wc, b, gathered_input=gathered)
                X = gloo_all_gather(x)
                ref = torch.mm(X.double(), w.double().t()) + b.double()
                what = f"ag_gemm {din}->{dout} transpose={transpose}"
                check(y.dtype == dout and y.shape == (rows * W, n), f"{what}: {y.dtype} {list(y.shape)}")
                close(y, ref, what, tol_for(din if dout != torch.float64 else dout, k)
                      + (tol_for(dout, 1) if dout == torch.bfloat16 else 0))
                equal(gathered, X, f"{what}: gathered_input")
                buf = op.input_buffer()
                buf[:rows].copy_(x)
                equal(op(buf[:rows], wc, b), y, f"{what}: zero-copy input")

    # ReduceScatter: small integers, so the sum is exact in every dtype.
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        n = 33
        with fluxcpp.ReduceScatter(ctx, 8 * W, n, dtype) as op:
            for rows in (0, W, 8 * W):
                x = ints((rows, n), dtype, 10 * RANK + rows)
                s = gloo_sum(x.double())[RANK * rows // W:(RANK + 1) * rows // W].to(dtype)
                equal(op(x), s, f"reduce_scatter {dtype} m={rows}")
                out = torch.empty((rows // W, n), dtype=dtype)
                check(op(x, out=out) is out, "reduce_scatter returns out")
                equal(out, s, f"reduce_scatter out= {dtype} m={rows}")

    # GemmRs: mm of this rank's K slice, gloo all_reduce of the partials, this rank's rows.
    for din, dout in PAIRS:
        n, k, m = 48, 40, 4 * W
        with fluxcpp.GemmRs(ctx, 8 * W, n, k, input_dtype=din, output_dtype=dout) as op:
            x = rand((m, k), din, RANK)
            w = rand((n, k), din, 30 + RANK)
            b = rand((n,), dout, 99)  # the same on every rank
            y = op(x, w, bias=b)
            part = torch.mm(x.double(), w.double().t())
            ref = gloo_sum(part)[RANK * m // W:(RANK + 1) * m // W] + b.double()
            close(y, ref, f"gemm_rs {din}->{dout}",
                  tol_for(din if dout != torch.float64 else dout, k * W)
                  + (tol_for(dout, 1) if dout == torch.bfloat16 else 0))
            again = torch.empty_like(y)
            op(x, w, bias=b, out=again)
            equal(again, y, f"gemm_rs {din}->{dout}: bitwise reproducible")

    # Packed weights: the same results as the weight itself (within the GEMM's tolerance), a
    # snapshot until update(), and a weight that does not fit the op is ValueError on every rank.
    for dtype in (torch.float32, torch.bfloat16):
        n, k = 70, 48
        w = rand((n, k), dtype, 900 + RANK)
        with fluxcpp.PackedWeight(ctx, w) as pw, \
                fluxcpp.AgGemm(ctx, 4 * W, n, k, dtype) as ag, \
                fluxcpp.GemmRs(ctx, 4 * W, n, k, dtype) as rs:
            x = rand((4, k), dtype, 910 + RANK)
            close(ag(x, pw), ag(x, w), f"ag_gemm packed {dtype}", tol_for(dtype, k))
            xk = rand((4 * W, k), dtype, 920 + RANK)
            close(rs(xk, pw), rs(xk, w), f"gemm_rs packed {dtype}", tol_for(dtype, k * W))
            old = ag(x, w)
            w2 = w * 2
            close(ag(x, pw), old, f"ag_gemm packed {dtype}: a snapshot", tol_for(dtype, k))
            pw.update(w2)
            close(ag(x, pw), ag(x, w2), f"ag_gemm packed {dtype} after update", tol_for(dtype, k))
            with fluxcpp.PackedWeight(ctx, rand((k, n), dtype, 5)) as wrong:
                try:
                    ag(x, wrong)
                    check(False, "ag_gemm with a packed weight of the wrong shape: no error")
                except ValueError as e:
                    check("packed weight" in str(e), f"ag_gemm packed mismatch message: {e}")
    try:
        fluxcpp.PackedWeight(ctx, torch.zeros(4, 4, dtype=torch.float64))
        check(False, "PackedWeight of float64: no error")
    except TypeError as e:
        check("float64" in str(e), f"PackedWeight float64 message: {e}")

finish("python.dense")
