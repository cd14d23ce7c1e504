"""Misuse through Python: non-contiguous (w.t()), wrong dtype / device / rank, wrong shapes,
failed C calls (fluxcpp.Error with .status), one rank's bad tensor (its peers fail at once
instead of timing out), closed handles, __del__ warning without communicating."""
import time
import warnings

import torch

import fluxcpp
from support import RANK, W, check, equal, finish, raises

S = fluxcpp.Status

with fluxcpp.Context(timeout_s=60) as ctx:
    n, k = 16, 8
    op = fluxcpp.AGKernel(ctx, 4 * W, n, k, torch.float32)
    check(type(op) is fluxcpp.AgGemm, "AGKernel is AgGemm")
    x = torch.randn(2, k)
    w = torch.randn(n, k)
    good = op(x, w)

    raises(ValueError, lambda: op(x, torch.randn(k, n).t()), "w.t() as weight",
           contains=("AgGemm.forward", "weight", "contiguous", "stride"))
    raises(ValueError, lambda: op(torch.randn(k, 2).t(), w), "input.t()",
           contains=("AgGemm.forward", "input", "contiguous"))
    raises(TypeError, lambda: op(x.double(), w), "f64 input for f32 op",
           contains=("AgGemm.forward", "input", "torch.float64", "torch.float32"))
    raises(TypeError, lambda: op(x, w.bfloat16()), "bf16 weight", contains=("weight", "bfloat16"))
    raises(TypeError, lambda: op(x, w, torch.zeros(n, dtype=torch.float64)), "f64 bias",
           contains=("bias",))
    raises(TypeError, lambda: op(x.to("meta"), w), "meta-device input",
           contains=("input", "device", "meta"))
    raises(TypeError, lambda: op(x.view(-1), w), "1-D input", contains=("input", "dimensions"))
    raises(TypeError, lambda: op(x, w, out=[1, 2]), "a list as out", contains=("out",))
    raises(ValueError, lambda: op(torch.randn(2, k + 1), w), "input with k+1 columns",
           contains=("input", f"[2, {k + 1}]", f"[*, {k}]"))
    raises(ValueError, lambda: op(x, torch.randn(n + 1, k)), "weight [n+1, k]",
           contains=("weight", f"[{n + 1}, {k}]"))
    raises(ValueError, lambda: op(x, w, out=torch.empty(2 * W, n + 1)), "out of the wrong shape",
           contains=("out",))
    raises(ValueError, lambda: op(torch.randn(5, k), w), "m > max_m", contains=("max_m",))
    raises(ValueError, lambda: op(x, w, gathered_input=torch.empty(2 * W, k)[:, :4]),
           "strided gathered_input", contains=("gathered_input",))
    equal(op(x, w), good, "ag_gemm still usable after the local errors")

    # A failed C call: ranks disagree on m (rank 0 has one row more) -> every rank
    # INVALID_ARGUMENT, and the op stays usable.
    if W > 1:
        xs = torch.randn(3 if RANK == 0 else 2, k)
        e = raises(fluxcpp.Error, lambda: op(xs, w), "ranks disagree on m",
                   status=S.INVALID_ARGUMENT, contains=("ag_gemm", "disagree on m"))
        check(e is None or (isinstance(e, RuntimeError) and e.message), "Error text")
        equal(op(x, w), good, "ag_gemm usable after a failed C call")

        # One rank's bad tensor: it raises ValueError, its peers get INVALID_ARGUMENT at once.
        t0 = time.monotonic()
        if RANK == 0:
            raises(ValueError, lambda: op(x, torch.randn(k, n).t()), "rank 0's w.t()")
        else:
            raises(fluxcpp.Error, lambda: op(x, w), "peer of a rank with a bad tensor",
                   status=S.INVALID_ARGUMENT)
        check(time.monotonic() - t0 < 20, "peers of a bad rank fail without waiting for a timeout")
        equal(op(x, w), good, "ag_gemm usable after one rank's bad tensor")

        # Tensors without a data pointer (sparse, mkldnn), as input or as a bias, on rank 1 only:
        # refused up front (TypeError naming the layout) and the peers told at once, never
        # paired with rank 1's next call. Then any other exception while rank 1 prepares its
        # arguments (here from a tensor subclass's attribute) notifies the peers just the same.
        class Exploding(torch.Tensor):
            @property
            def layout(self):
                raise RuntimeError("this tensor cannot be read")

        bad_inputs = [("sparse input", lambda: (x.to_sparse(), None), TypeError),
                      ("sparse bias", lambda: (x, torch.zeros(n).to_sparse()), TypeError),
                      ("exploding input", lambda: (x.as_subclass(Exploding), None),
                       RuntimeError)]
        if torch.backends.mkldnn.is_available():
            bad_inputs.append(("mkldnn input", lambda: (x.to_mkldnn(), None), TypeError))
        for what, make, exc in bad_inputs:
            t0 = time.monotonic()
            if RANK == 1:
                xi, bi = make()
                e = raises(exc, lambda: op(xi, w, bi), f"rank 1's {what}")
                if exc is TypeError:
                    check(e is None or "layout" in str(e), f"{what}: the error names the layout")
            else:
                raises(fluxcpp.Error, lambda: op(x, w), f"peer of rank 1's {what}",
                       status=S.INVALID_ARGUMENT)
            check(time.monotonic() - t0 < 20, f"{what}: peers fail without a timeout")
            equal(op(x, w), good, f"ag_gemm usable after rank 1's {what}")

        # The same for every collective op: rank 0's input has the wrong dtype.
        f32, f64 = torch.float32, torch.float64
        cases = [
            (fluxcpp.AllGather(ctx, 2 * W, k, f32), lambda op, d: op(torch.zeros(2, k, dtype=d))),
            (fluxcpp.ReduceScatter(ctx, 2 * W, k, f32),
             lambda op, d: op(torch.zeros(2 * W, k, dtype=d))),
            (fluxcpp.GemmRS(ctx, 2 * W, n, k, f32),
             lambda op, d: op(torch.zeros(2 * W, k, dtype=d), w)),
            (fluxcpp.AllToAllSingle(ctx, 2 * W, k, f32),
             lambda op, d: op(torch.zeros(W, k, dtype=d), [1] * W, [1] * W)),
            (fluxcpp.A2aGemm(ctx, 2 * W, n, k, f32),
             lambda op, d: op(torch.zeros(W, k, dtype=d), w)),
            (fluxcpp.GemmA2aTranspose(ctx, 1, 2 * W, k, W, 4, f32),
             lambda op, d: op(torch.zeros(1, 2, k, dtype=d), torch.zeros(4 * W, k))),
            (fluxcpp.A2aTransposeGemm(ctx, 1, 2 * W, W, 4, n, f32),
             lambda op, d: op(torch.zeros(1, 1, 2 * W, 4, dtype=d), torch.zeros(n, 4 * W))),
        ]
        for c_op, call in cases:
            name = type(c_op).__name__
            t0 = time.monotonic()
            if RANK == 0:
                raises(TypeError, lambda: call(c_op, f64), f"{name}: rank 0's f64 input")
            else:  # in rank 0's words (its Python message), never the placeholder m=-1
                e = raises(fluxcpp.Error, lambda: call(c_op, f32), f"{name}: peer of a bad rank",
                           status=S.INVALID_ARGUMENT,
                           contains=("rank 0 refused its own arguments", f"{name}.forward",
                                     "torch.float64"))
                check(e is None or "-1" not in str(e), f"{name}: no placeholder in {e}")
            check(time.monotonic() - t0 < 20, f"{name}: peers fail without a timeout")
            call(c_op, f32)  # usable afterwards on every rank
            c_op.close()

        # Rank 1 alone passes m > max_m to GemmAr: its peers read the m it passed.
        with fluxcpp.GemmAr(ctx, 8, n, k, torch.float32) as ar:
            if RANK == 1:
                raises(ValueError, lambda: ar(torch.randn(20, k), w), "rank 1's m=20",
                       contains=("GemmAr.forward", "m=20", "max_m=8"))
            else:
                e = raises(fluxcpp.Error, lambda: ar(torch.randn(4, k), w), "peer of rank 1's m=20",
                           status=S.INVALID_ARGUMENT,
                           contains=("gemm_ar: rank 1 refused", "m=20", "max_m=8"))
                check(e is None or "m=-1" not in str(e), f"no placeholder m=-1 in {e}")
            equal(ar(torch.ones(4, k), torch.ones(n, k)), torch.full((4, n), float(k * W)),
                  "gemm_ar usable after rank 1's m=20")

    # A layer's input of another dtype: the layer, the argument and both dtypes (every rank).
    for sp in (True, False):
        for cls in (fluxcpp.ColumnParallelLinear, fluxcpp.RowParallelLinear):
            layer = cls(ctx, k, n, 4 * W, sequence_parallel=sp)
            rows = 2 if sp and cls is fluxcpp.ColumnParallelLinear else 2 * W
            raises(TypeError, lambda: layer(torch.randn(rows, k, dtype=torch.float64)),
                   f"{cls.__name__}(sequence_parallel={sp}): f64 input",
                   contains=(f"{cls.__name__}.forward: input has dtype torch.float64",
                             "dtype=torch.float32"))
            raises(TypeError, lambda: layer(torch.randn(rows, k), foo=1),
                   f"{cls.__name__}: an unknown keyword", contains=(f"{cls.__name__}.forward()",
                                                                   "'foo'"))
            layer(torch.randn(rows, k))  # usable afterwards
            layer.close()

    # m= states the rows of the whole sequence: a replicated input (all m rows on every rank)
    # in a sequence-parallel column layer would be gathered W times; with m= it is an error on
    # every rank, in the layer's words (without m= the shapes alone cannot tell: docs/python.md).
    with torch.no_grad():
        for cls, sp, rows, bad in ((fluxcpp.ColumnParallelLinear, True, 2, 2),
                                   (fluxcpp.RowParallelLinear, True, 2 * W, W),
                                   (fluxcpp.ColumnParallelLinear, False, 2, 2 * W),
                                   (fluxcpp.RowParallelLinear, False, 2 * W, 2)):
            layer = cls(ctx, k, n, 4 * W, sequence_parallel=sp)
            what = f"{cls.__name__}(sequence_parallel={sp})"
            good_m = rows * W if sp and cls is fluxcpp.ColumnParallelLinear else rows
            xr = torch.randn(rows, k)
            if W > 1:
                raises(ValueError, lambda: layer(xr, m=bad), f"{what}: m={bad} for {rows} rows",
                       contains=(f"{cls.__name__}.forward (sequence_parallel={sp}", f"m={bad}",
                                 f"{rows} rows"))
            equal(layer(xr, m=good_m), layer(xr), f"{what}: m={good_m} agrees")
            layer.close()

    # Without m=, a sequence-parallel column layer tells a replicated input (every rank passes
    # the same rows) by its output's W equal row blocks: one RuntimeWarning naming the layer and
    # the fix; a sharded input, a constant warm-up and m= give none.
    def warned(layer, x, **kw):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            layer(x, **kw)
        return [str(c.message) for c in caught if issubclass(c.category, RuntimeWarning)]

    if W > 1:
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                layer = fluxcpp.ColumnParallelLinear(ctx, k, n, 4 * W, sequence_parallel=True)
                same = torch.randn(4, k, generator=torch.Generator().manual_seed(7))
                check(warned(layer, torch.zeros(4, k)) == [], f"grad={grad}: zeros: no warning")
                msgs = warned(layer, same)
                check(len(msgs) == 1 and "ColumnParallelLinear.forward (sequence_parallel=True"
                      in msgs[0] and "every rank passed the same 4 rows" in msgs[0]
                      and "sequence_parallel=False" in msgs[0],
                      f"grad={grad}: replicated input warns once: {msgs}")
                check(warned(layer, same) == [], f"grad={grad}: warned once only")
                layer.close()
                layer = fluxcpp.ColumnParallelLinear(ctx, k, n, 4 * W, sequence_parallel=True)
                check(warned(layer, same, m=4 * W) == [], f"grad={grad}: m= given: no warning")
                check(warned(layer, torch.randn(4, k) + RANK) == [],
                      f"grad={grad}: sharded input: no warning")
                check(warned(layer, same) == [], f"grad={grad}: a sharded call ends the watch")
                layer.close()

    # Bad create arguments: a missing input_dtype or size names the public op and the argument;
    # a dtype fluxcpp does not take (TypeError), a size out of range
    # (ValueError in Python; tests/python/test_sizes.py has the whole matrix), a shape the C
    # create rejects (fluxcpp.Error on every rank).
    raises(TypeError, lambda: fluxcpp.AgGemm(ctx, max_m=8, n=n, k=k), "no input_dtype",
           contains=("AgGemm: input_dtype is missing", "torch.bfloat16"))
    raises(TypeError, lambda: fluxcpp.GemmAr(ctx, 8, n), "no k",
           contains=("GemmAr.__init__()", "'k'"))
    raises(TypeError, lambda: fluxcpp.AgGemm(ctx, 8, n, k, torch.int32), "int32 input_dtype",
           contains=("input_dtype",))
    raises(ValueError, lambda: fluxcpp.AgGemm(ctx, 8, -1, k, torch.float32), "n = -1",
           contains=("AgGemm", "n=-1"))
    if W > 1:
        raises(fluxcpp.Error, lambda: fluxcpp.GemmA2aTranspose(ctx, 1, 4 * W, 8, W + 1, 4,
                                                               torch.float32),
               "nheads not divisible by W", status=S.INVALID_ARGUMENT)

    # __del__ never communicates: an open op warns (ResourceWarning) and leaks.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op.__del__()
    check(any(issubclass(c.category, ResourceWarning) for c in caught), "__del__ warns")
    op.close()
    op.close()  # twice is a no-op
    raises(fluxcpp.Error, lambda: op(x, w), "forward after close", status=S.INVALID_USAGE,
           contains=("closed",))

    # Local op errors are local: a grouped_gemm whose splits exceed max_m.
    with fluxcpp.GroupedGemm(ctx, 2, 4, n, k, torch.float32) as gg:
        raises(fluxcpp.Error, lambda: gg(torch.randn(6, k), [3, 3], torch.randn(2, n, k)),
               "grouped_gemm m > max_m", status=S.INVALID_ARGUMENT)
        raises(ValueError, lambda: gg(torch.randn(5, k), [3, 3], torch.randn(2, n, k)),
               "grouped_gemm input rows != sum(splits)", contains=("input",))

raises(fluxcpp.Error, lambda: fluxcpp.Context(timeout_s=-1.0), "negative timeout",
       status=S.INVALID_ARGUMENT, contains=("timeout",))
raises(TypeError, lambda: fluxcpp.Context(comm=42), "comm=42", contains=("mpi4py",))
closed = fluxcpp.Context()
closed.close()
raises(fluxcpp.Error, lambda: fluxcpp.AllGather(closed, 4, 4, torch.float32),
       "op on a closed context", status=S.INVALID_USAGE)

# Ops outlive their context (include/fluxcpp/fluxcpp.h, fluxcpp_context_destroy): every call of a
# collective op then fails with INVALID_USAGE naming the closed context, grouped_gemm (local)
# still computes, and closing the ops is local: it does not wait for a peer.
ctx = fluxcpp.Context(timeout_s=60)
ag = fluxcpp.AllGather(ctx, 2 * W, 8, torch.float32)
rs = fluxcpp.ReduceScatter(ctx, 2 * W, 8, torch.float32)
gg = fluxcpp.GroupedGemm(ctx, 2, 4, 8, 8, torch.float32)
ctx.close()
for what, fn, c_op in (("AllGather forward", lambda: ag(torch.ones(2, 8)), "all_gather"),
                       ("AllGather input_buffer", ag.input_buffer, "all_gather"),
                       ("ReduceScatter forward", lambda: rs(torch.ones(2 * W, 8)),
                        "reduce_scatter")):
    raises(fluxcpp.Error, fn, f"{what} after the context was closed", status=S.INVALID_USAGE,
           contains=(f"{c_op}: the context was closed",))
y = gg(torch.ones(3, 8), [1, 2], torch.ones(2, 8, 8))
equal(y, torch.full((3, 8), 8.0), "grouped_gemm after the context was closed")
if RANK == 0:
    time.sleep(3)  # the others' op close must not wait for this rank
t0 = time.monotonic()
for o in (ag, rs, gg):
    o.close()
check(RANK == 0 or time.monotonic() - t0 < 2, "closing ops after their context is local")

finish("python.misuse")
