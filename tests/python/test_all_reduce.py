"""AllReduce against an exact reference: every rank's input is generated from its rank alone, so
each rank computes the sum over ranks itself (small integers: exact in f32, bf16 and f64). Every
dtype; counts 1, 7, 1001, the one-shot threshold (64 KiB) and 70001 (above it), 0; 2-D, 3-D and
0-D shapes; out=, in place (out=input), zero-copy input; bitwise identity across ranks (mpi4py
allgather of the bytes) and the documented summation order on random data; hosts simulated with
ranks_per_host=1; bad input (TypeError / ValueError before C, naming op, argument and values;
one rank's bad input fails its peers at once). Run under mpirun at W = 1, 2, 3."""
import time

import warnings

import torch

import fluxcpp
from support import (RANK, STORE_LAUNCH, W, available, check, context, equal, finish, raises,
                     same_on_every_rank)

S = fluxcpp.Status
DTYPES = (torch.float32, torch.bfloat16, torch.float64)
MAX = 70001  # count == max_count is allowed; MAX + 1 is not


def ints(shape, dtype, seed, rank):
    """Rank `rank`'s small-integer input for case `seed` (any rank can build any rank's)."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


def rand(shape, dtype, seed, rank):
    g = torch.Generator().manual_seed(7919 * seed + rank + 1)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def exact_sum(make, shape, dtype, seed):
    """The sum over ranks of make(shape, dtype, seed, r), in f64 (exact for small integers)."""
    total = torch.zeros(shape, dtype=torch.float64)
    for r in range(W):
        total += make(shape, dtype, seed, r).double()
    return total.to(dtype)


def ordered_sum(make, shape, dtype, seed, per_host=None):
    """The documented order (include/fluxcpp/fluxcpp.h, ops/core/all_reduce_exchange.hpp): within
    each host (per_host consecutive ranks; None: one host) by local rank, then the hosts' sums by
    host index, accumulated in f32 (f64 for f64), rounded once."""
    acc_t = torch.float64 if dtype == torch.float64 else torch.float32
    per_host = per_host or W
    total = None
    for h in range(0, W, per_host):
        acc = make(shape, dtype, seed, h).to(acc_t)
        for r in range(h + 1, h + per_host):
            acc = acc + make(shape, dtype, seed, r).to(acc_t)
        total = acc if total is None else total + acc
    return total.to(dtype)


def one_shot_edge(dtype):
    """The largest count on the one-shot path (64 KiB of input on one host)."""
    return (64 << 10) // torch.empty(0, dtype=dtype).element_size()


def exact_cases(ctx, tag):
    """Every dtype, count and shape against the exact integer sum; out=, in place, zero-copy."""
    for dtype in DTYPES:
        with fluxcpp.AllReduce(ctx, MAX, dtype) as op:
            check(op.max_count == MAX and op.dtype == dtype, f"{tag}: attributes")
            edge = one_shot_edge(dtype)
            shapes = [(1,), (7,), (1001,), (edge,), (edge + 1,), (MAX,), (0,), (7, 143),
                      (3, 5), (1, MAX), (2, 3, 5), ()]
            for seed, shape in enumerate(shapes):
                what = f"{tag}: all_reduce {dtype} shape={list(shape)} W={W}"
                x = ints(shape, dtype, seed, RANK)
                ref = exact_sum(ints, shape, dtype, seed)
                keep = x.clone()
                y = op(x)
                check(y.shape == x.shape and y.dtype == dtype,
                      f"{what}: result {y.dtype} {list(y.shape)}")
                equal(y, ref, what)
                equal(x, keep, f"{what}: input unchanged")
                if not torch.equal(y, ref) and y.shape == ref.shape and y.numel():
                    bad = (y != ref).reshape(-1).nonzero().reshape(-1)
                    i = bad[0].item()
                    check(False, f"{what}: {bad.numel()} of {y.numel()} elements wrong, first at "
                                 f"flat index {i}: expected {ref.reshape(-1)[i].item()}, got "
                                 f"{y.reshape(-1)[i].item()}")
                out = torch.full(shape, 99.0, dtype=dtype)
                r = op.forward(x, out=out)
                check(r is out, f"{what}: out= returns out")
                equal(out, ref, f"{what}: out=")
                r = op(x, out=x)
                check(r is x, f"{what}: in place returns input")
                equal(x, ref, f"{what}: in place (out=input)")

            # Zero-copy: a 1-D tensor of max_count elements; a leading slice, any shape.
            buf = op.input_buffer()
            check(buf.shape == (MAX,) and buf.dtype == dtype and buf.is_contiguous(),
                  f"{tag}: input_buffer {buf.dtype} {list(buf.shape)}, expected [{MAX}] {dtype}")
            for seed, shape in ((50, (7,)), (51, (1001,)), (52, (11, 91)), (53, (MAX,)),
                                (54, (one_shot_edge(dtype) + 1,))):
                what = f"{tag}: all_reduce zero-copy {dtype} shape={list(shape)} W={W}"
                n = torch.Size(shape).numel()
                buf = op.input_buffer()
                buf[:n].copy_(ints(shape, dtype, seed, RANK).reshape(-1))
                ref = exact_sum(ints, shape, dtype, seed)
                equal(op(buf[:n].view(shape)), ref, what)
                buf = op.input_buffer()
                buf[:n].copy_(ints(shape, dtype, seed, RANK).reshape(-1))
                out = torch.empty(shape, dtype=dtype)
                check(op(buf[:n].view(shape), out=out) is out, f"{what}: out= returns out")
                equal(out, ref, f"{what}: out=")


def random_cases(ctx, tag):
    """Random floats: the same bits on every rank, from call to call, and in the documented
    order; within rounding of the f64 sum."""
    for dtype in DTYPES:
        with fluxcpp.AllReduce(ctx, MAX, dtype) as op:
            for seed, count in ((60, 7), (61, 1001), (62, one_shot_edge(dtype) + 1), (63, MAX)):
                what = f"{tag}: all_reduce random {dtype} count={count} W={W}"
                x = rand((count,), dtype, seed, RANK)
                y = op(x)
                same_on_every_rank(y, what)
                equal(op(x), y, f"{what}: call to call")
                want = ordered_sum(rand, (count,), dtype, seed, ctx.node_size)
                if not torch.equal(y, want):
                    diff = (y != want).nonzero().reshape(-1)
                    i = diff[0].item()
                    check(False, f"{what}: not the documented order (ranks in index order, "
                                 f"accumulated in {'f64' if dtype == torch.float64 else 'f32'}, "
                                 f"rounded once): {diff.numel()} of {count} elements differ, "
                                 f"first at {i}: expected {want[i].item()!r}, got {y[i].item()!r}")
                ref = exact_sum(rand, (count,), torch.float64, seed)
                tol = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float64: 1e-15}[dtype]
                err = (y.double() - ref).abs().max().item()
                check(err <= tol * W * max(1.0, ref.abs().max().item()),
                      f"{what}: max error {err:.3g} against the f64 sum")


with context(timeout_s=60) as ctx:
    if available("all_reduce"):
        where = "one host" if ctx.node_size == W else f"{W // ctx.node_size} hosts (TCP)"
        exact_cases(ctx, where)
        random_cases(ctx, where)

        with fluxcpp.AllReduce(ctx, 100, torch.float32) as op:
            fw = "AllReduce.forward"
            x = torch.ones(4, 5)
            good = op(x)
            # Bad input, on every rank: raised before C, the op usable afterwards.
            raises(ValueError, lambda: op(torch.ones(101)), "count > max_count",
                   contains=(fw, "count=101", "max_count=100"))
            raises(ValueError, lambda: op(torch.ones(11, 10)), "2-D count > max_count",
                   contains=(fw, "count=110", "max_count=100", "[11, 10]"))
            raises(TypeError, lambda: op(x.double()), "f64 input for an f32 op",
                   contains=(fw, "input", "torch.float64", "torch.float32"))
            raises(TypeError, lambda: op(x.bfloat16()), "bf16 input for an f32 op",
                   contains=(fw, "input", "torch.bfloat16"))
            raises(TypeError, lambda: op(x.to("meta")), "meta-device input",
                   contains=(fw, "input", "device", "meta"))
            raises(TypeError, lambda: op([1.0, 2.0]), "a list as input", contains=(fw, "input"))
            raises(ValueError, lambda: op(torch.ones(5, 4).t()), "non-contiguous input (.t())",
                   contains=(fw, "input", "contiguous", "stride"))
            raises(ValueError, lambda: op(torch.ones(20)[::2]), "non-contiguous input (::2)",
                   contains=(fw, "input", "contiguous"))
            raises(ValueError, lambda: op(x, out=torch.empty(5, 4)), "out [5, 4] for input [4, 5]",
                   contains=(fw, "out", "[5, 4]", "[4, 5]"))
            raises(ValueError, lambda: op(x, out=torch.empty(20)), "out [20] for input [4, 5]",
                   contains=(fw, "out", "[20]", "[4, 5]"))
            raises(TypeError, lambda: op(x, out=torch.empty(4, 5, dtype=torch.float64)),
                   "f64 out for an f32 op", contains=(fw, "out", "torch.float64"))
            raises(ValueError, lambda: op(x, out=torch.empty(5, 4).t()), "non-contiguous out",
                   contains=(fw, "out", "contiguous"))
            equal(op(x), good, "all_reduce usable after the local errors")
            equal(good, torch.full((4, 5), float(W)), "all_reduce of ones")

            # One rank's bad input: it raises, its peers get INVALID_ARGUMENT at once.
            if W > 1:
                for what, bad, exc in (("f64 input", lambda: op(x.double()), TypeError),
                                       ("count > max_count", lambda: op(torch.ones(101)),
                                        ValueError),
                                       ("non-contiguous input", lambda: op(torch.ones(5, 4).t()),
                                        ValueError)):
                    t0 = time.monotonic()
                    if RANK == 0:
                        raises(exc, bad, f"rank 0's {what}")
                    else:
                        raises(fluxcpp.Error, lambda: op(x), f"peer of rank 0's {what}",
                               status=S.INVALID_ARGUMENT)
                    check(time.monotonic() - t0 < 20, f"{what}: peers fail without a timeout")
                    equal(op(x), good, f"all_reduce usable after rank 0's {what}")
                # Ranks disagreeing on the count: fluxcpp.Error on every rank.
                raises(fluxcpp.Error, lambda: op(torch.ones(6 if RANK == 0 else 5)),
                       "ranks disagree on count", status=S.INVALID_ARGUMENT)
                equal(op(x), good, "all_reduce usable after ranks disagreed")

        # Create arguments.
        raises(ValueError, lambda: fluxcpp.AllReduce(ctx, 0), "max_count=0",
               contains=("AllReduce", "max_count=0"))
        raises(TypeError, lambda: fluxcpp.AllReduce(ctx, 8, torch.int32), "int32 dtype",
               contains=("AllReduce", "dtype"))
        raises(TypeError, lambda: fluxcpp.AllReduce(ctx, 8.0), "max_count=8.0",
               contains=("AllReduce", "max_count"))
        with fluxcpp.AllReduce(ctx, 8) as op:
            check(op.dtype == torch.float32, "AllReduce's dtype defaults to torch.float32")
        op.close()  # twice is a no-op
        raises(fluxcpp.Error, lambda: op(torch.ones(2)), "forward after close",
               status=S.INVALID_USAGE, contains=("closed",))
    else:
        raises(fluxcpp.Unavailable, lambda: fluxcpp.AllReduce(ctx, 8), "AllReduce unavailable")

# Hosts simulated by ranks_per_host=1 (W hosts of one rank): the sum across hosts (over MPI: a
# context made without MPI has one host).
if available("all_reduce") and W > 1 and not STORE_LAUNCH:
    with fluxcpp.Context(ranks_per_host=1, timeout_s=60) as ctx:
        exact_cases(ctx, "ranks_per_host=1")
        random_cases(ctx, "ranks_per_host=1")
    # The former name still groups the hosts, with a DeprecationWarning; node_* read host_*.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fluxcpp.Context(ranks_per_node=1, timeout_s=60) as ctx:
            check(ctx.host_size == 1 and ctx.node_size == 1 and ctx.node_rank == ctx.host_rank == 0,
                  f"Context(ranks_per_node=1): host_size {ctx.host_size}, node_size "
                  f"{ctx.node_size}, host_rank {ctx.host_rank}")
    check(any(issubclass(w.category, DeprecationWarning) and "ranks_per_host" in str(w.message)
              for w in caught), f"Context(ranks_per_node=1) warned {[str(w.message) for w in caught]}")

finish("python.all_reduce")
