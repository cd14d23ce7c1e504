"""GemmAr (GemmAllReduce) against a torch reference: every rank's input and weight are generated
from seeds and the rank alone, so each rank computes every rank's partial in f64 itself, sums
them and adds the bias (tolerance scaled with K·W). Every dtype pair × transpose_weight, odd m
(1, 5, 67 = max_m) and m = 0, bias / no bias, out=, packed weights; the output bitwise identical
on every rank (mpi4py allgather of the bytes) and from call to call; bad input (TypeError /
ValueError before C, naming op, argument and values; one rank's bad input fails its peers at
once). Run under mpirun at W = 2, 3."""
import time

import torch

import fluxcpp
from support import (RANK, W, available, check, close, context, equal, failures, finish, raises,
                     same_on_every_rank, tol_for)

S = fluxcpp.Status
PAIRS = [(torch.float32, torch.float32), (torch.float64, torch.float64),
         (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)]
PACKABLE = (torch.float32, torch.bfloat16)
MAX_M, N, K = 67, 37, 45


def rand(shape, dtype, seed, rank):
    """Rank `rank`'s tensor for case `seed` (any rank can build any rank's)."""
    g = torch.Generator().manual_seed(7919 * seed + rank + 1)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def inputs(din, dout, m, seed, rank):
    """(input [m, K], weight [N, K], bias [N]) of `rank` for case `seed`; the bias is the same on
    every rank."""
    return (rand((m, K), din, 3 * seed, rank), rand((N, K), din, 3 * seed + 1, rank),
            rand((N,), dout, 3 * seed + 2, 0))


def reference(din, dout, m, seed, with_bias):
    """Σ_s input_s · weight_sᵀ (+ bias), in f64 from every rank's seeded data."""
    total = torch.zeros((m, N), dtype=torch.float64)
    for r in range(W):
        x, w, b = inputs(din, dout, m, seed, r)
        total += torch.mm(x.double(), w.double().t())
    return total + b.double() if with_bias else total


def tol(din, dout):
    """As python.dense's GemmRs: a K·W-long dot product, plus the rounding of a bf16 output."""
    return (tol_for(din if dout != torch.float64 else dout, K * W)
            + (tol_for(dout, 1) if dout == torch.bfloat16 else 0))


def describe(got, want, what):
    """The first wrong element, as (row, col): expected vs got."""
    g, w = got.double(), want.double()
    i = (g - w).abs().reshape(-1).argmax().item()
    return (f"{what}: worst element (row {i // N}, col {i % N}): expected "
            f"{w.reshape(-1)[i].item()!r}, got {g.reshape(-1)[i].item()!r}")


def check_result(y, ref, din, dout, m, what):
    check(y.dtype == dout and y.shape == (m, N), f"{what}: result {y.dtype} {list(y.shape)}, "
                                                 f"expected {dout} [{m}, {N}]")
    if y.shape != (m, N):
        return
    before = len(failures)
    close(y, ref, what, tol(din, dout))
    if len(failures) > before:
        check(False, describe(y, ref, what))
    same_on_every_rank(y, what)


def cases(ctx):
    seed = 0
    for din, dout in PAIRS:
        for transpose in (False, True):
            with fluxcpp.GemmAr(ctx, MAX_M, N, K, input_dtype=din, output_dtype=dout,
                                transpose_weight=transpose) as op:
                check((op.max_m, op.n, op.k, op.input_dtype, op.output_dtype,
                       op.transpose_weight) == (MAX_M, N, K, din, dout, transpose),
                      f"gemm_ar {din}->{dout}: attributes")
                for m in (1, 5, MAX_M):
                    seed += 1
                    x, w, b = inputs(din, dout, m, seed, RANK)
                    wc = w.t().contiguous() if transpose else w
                    for with_bias in (True, False):
                        what = (f"gemm_ar {din}->{dout} transpose={transpose} m={m} n={N} k={K} "
                                f"W={W} bias={with_bias}")
                        bias = b if with_bias else None
                        ref = reference(din, dout, m, seed, with_bias)
                        y = op(x, wc, bias)
                        check_result(y, ref, din, dout, m, what)
                        equal(op.forward(x, wc, bias), y, f"{what}: call to call")
                        out = torch.full((m, N), 7.0, dtype=dout)
                        r = op(x, wc, bias=bias, out=out)
                        check(r is out, f"{what}: out= returns out")
                        equal(out, y, f"{what}: out=")
                        if din in PACKABLE:
                            with fluxcpp.PackedWeight(ctx, wc, transpose) as pw:
                                yp = op(x, pw, bias)
                                check_result(yp, ref, din, dout, m, f"{what}: packed weight")
                                out = torch.empty((m, N), dtype=dout)
                                check(op(x, pw, bias, out=out) is out,
                                      f"{what}: packed out= returns out")
                                equal(out, yp, f"{what}: packed weight, out=")
                # m == 0: a no-op, an empty [0, n] result.
                y = op(torch.empty((0, K), dtype=din), rand((N, K) if not transpose else (K, N),
                                                              din, 999, RANK))
                check(y.shape == (0, N) and y.dtype == dout, f"gemm_ar m=0: {list(y.shape)}")


def bad_input(ctx):
    fw = "GemmAr.forward"
    with fluxcpp.GemmAllReduce(ctx, MAX_M, N, K, torch.float32) as op:
        check(op.output_dtype == torch.float32, "GemmAr's output_dtype defaults to input_dtype")
        x, w, b = inputs(torch.float32, torch.float32, 5, 500, RANK)
        good = op(x, w, b)
        big = torch.zeros((MAX_M + 1, K))
        # On every rank: raised before C, the op usable afterwards.
        raises(ValueError, lambda: op(big, w), "m > max_m",
               contains=(fw, f"m={MAX_M + 1}", f"max_m={MAX_M}"))
        raises(TypeError, lambda: op(x.double(), w, b), "f64 input for an f32 op",
               contains=(fw, "input", "torch.float64", "torch.float32"))
        raises(TypeError, lambda: op(x.bfloat16(), w, b), "bf16 input for an f32 op",
               contains=(fw, "input", "torch.bfloat16"))
        raises(TypeError, lambda: op(x, w.double(), b), "f64 weight for an f32 op",
               contains=(fw, "weight", "torch.float64"))
        raises(TypeError, lambda: op(x, w, b.double()), "f64 bias for an f32 op",
               contains=(fw, "bias", "torch.float64"))
        raises(TypeError, lambda: op(x, w, b, out=torch.empty((5, N), dtype=torch.float64)),
               "f64 out for an f32 op", contains=(fw, "out", "torch.float64"))
        raises(ValueError, lambda: op(torch.zeros((5, K + 1)), w, b), "input of k + 1 columns",
               contains=(fw, "input"))
        raises(ValueError, lambda: op(x, w.t().contiguous(), b), "weight [k, n] untransposed",
               contains=(fw, "weight"))
        raises(ValueError, lambda: op(x, torch.zeros((K, N)).t(), b), "non-contiguous weight",
               contains=(fw, "weight", "contiguous"))
        raises(ValueError, lambda: op(x, w, b, out=torch.empty((5 * W, N))),
               "out of [m*W, n] rows", contains=(fw, "out"))
        with fluxcpp.PackedWeight(ctx, w.t().contiguous(), transpose_weight=True) as wrong:
            raises(ValueError, lambda: op(x, wrong, b), "a packed weight of the other orientation",
                   contains=(fw, "packed weight", "transpose_weight=True"))
        equal(op(x, w, b), good, "gemm_ar usable after the local errors")
        same_on_every_rank(good, "gemm_ar after the local errors")

        # One rank's bad input: it raises, its peers get INVALID_ARGUMENT at once.
        if W > 1:
            for what, bad, exc in (("m > max_m", lambda: op(big, w, b), ValueError),
                                   ("f64 input", lambda: op(x.double(), w, b), TypeError),
                                   ("bf16 weight", lambda: op(x, w.bfloat16(), b), TypeError)):
                t0 = time.monotonic()
                if RANK == 0:
                    raises(exc, bad, f"rank 0's {what}")
                else:
                    raises(fluxcpp.Error, lambda: op(x, w, b), f"peer of rank 0's {what}",
                           status=S.INVALID_ARGUMENT)
                check(time.monotonic() - t0 < 20, f"{what}: peers fail without a timeout")
                equal(op(x, w, b), good, f"gemm_ar usable after rank 0's {what}")
            # Ranks disagreeing on m: fluxcpp.Error on every rank.
            xm = x[:4] if RANK == 0 else x
            raises(fluxcpp.Error, lambda: op(xm, w, b), "ranks disagree on m",
                   status=S.INVALID_ARGUMENT)
            equal(op(x, w, b), good, "gemm_ar usable after ranks disagreed")

    # Create arguments.
    raises(TypeError, lambda: fluxcpp.GemmAr(ctx, MAX_M, N, K, torch.int32), "int32 input_dtype",
           contains=("GemmAr", "input_dtype"))
    raises(ValueError, lambda: fluxcpp.GemmAr(ctx, MAX_M, 0, K, torch.float32), "n=0",
           contains=("GemmAr", "n=0"))
    raises(fluxcpp.Error, lambda: fluxcpp.GemmAr(ctx, MAX_M, N, K, torch.float32,
                                                 torch.bfloat16),
           "f32 -> bf16", status=S.INVALID_ARGUMENT)
    op = fluxcpp.GemmAr(ctx, MAX_M, N, K, torch.float32)
    op.close()
    op.close()  # twice is a no-op
    raises(fluxcpp.Error, lambda: op(x, w), "forward after close", status=S.INVALID_USAGE,
           contains=("closed",))


check(fluxcpp.GemmAllReduce is fluxcpp.GemmAr, "GemmAllReduce is an alias of GemmAr")
with context(timeout_s=60) as ctx:
    if available("gemm_ar"):
        cases(ctx)
        bad_input(ctx)
    else:
        raises(fluxcpp.Unavailable, lambda: fluxcpp.GemmAr(ctx, 8, 8, 8, torch.float32),
               "GemmAr unavailable")

finish("python.gemm_ar")
