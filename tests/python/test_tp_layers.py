"""ColumnParallelLinear and RowParallelLinear with replicated activations (sequence_parallel=False):
forward and gradients against torch autograd on the full layer; the inference path (no_grad,
inference_mode, out=, packed weights, local_ctx) of both modes against the autograd forward."""
import torch

import fluxcpp
from support import COMM, RANK, W, check, close, context, equal, finish, local_context, raises

torch.manual_seed(0)
m, k, n = 5, 16, 8  # rows (any m in this mode); per-rank shard widths
tol = 1e-5
f32, bf16 = torch.float32, torch.bfloat16


def same_everywhere(t, what):
    blobs = COMM.allgather(t.contiguous().view(torch.uint8).numpy().tobytes())
    check(all(b == blobs[0] for b in blobs), f"{what}: not bitwise identical on every rank")


def column_replicated(ctx, bias, local_ctx):
    X = torch.randn(m, k, dtype=torch.float64)
    Wf = torch.randn(n * W, k, dtype=torch.float64)
    Bf = torch.randn(n * W, dtype=torch.float64)
    G = torch.randn(m, n * W, dtype=torch.float64)
    Xr, Wr, Br = (t.clone().requires_grad_() for t in (X, Wf, Bf))
    ((Xr @ Wr.t() + (Br if bias else 0)) * G).sum().backward()
    cols = slice(RANK * n, (RANK + 1) * n)
    what = f"column replicated bias={bias} local_ctx={local_ctx is not None}"
    layer = fluxcpp.ColumnParallelLinear(ctx, k, n, max_m=m, bias=bias, sequence_parallel=False,
                                         local_ctx=local_ctx)
    with torch.no_grad():
        layer.weight.copy_(Wf[cols])
        if bias:
            layer.bias.copy_(Bf[cols])
    x = X.float().requires_grad_()
    y = layer(x)
    close(y, (X @ Wf.t() + (Bf if bias else 0))[:, cols], f"{what} forward", tol)
    (y * G[:, cols].float()).sum().backward()
    close(x.grad, Xr.grad, f"{what} dx", tol)
    close(layer.weight.grad, Wr.grad[cols], f"{what} dw", tol)
    if bias:
        close(layer.bias.grad, Br.grad[cols], f"{what} db", tol)
    with torch.inference_mode():
        close(layer(X.float()), y.detach(), f"{what} inference", tol)
    layer.close()


def row_replicated(ctx, bias):
    X = torch.randn(m, k * W, dtype=torch.float64)
    Wf = torch.randn(n, k * W, dtype=torch.float64)
    Bf = torch.randn(n, dtype=torch.float64)
    G = torch.randn(m, n, dtype=torch.float64)
    Xr, Wr, Br = (t.clone().requires_grad_() for t in (X, Wf, Bf))
    ((Xr @ Wr.t() + (Br if bias else 0)) * G).sum().backward()
    kc = slice(RANK * k, (RANK + 1) * k)
    what = f"row replicated bias={bias}"
    layer = fluxcpp.RowParallelLinear(ctx, k, n, max_m=m, bias=bias, sequence_parallel=False)
    with torch.no_grad():
        layer.weight.copy_(Wf[:, kc])
        if bias:
            layer.bias.copy_(Bf)
    x = X[:, kc].float().requires_grad_()
    y = layer(x)
    close(y, X @ Wf.t() + (Bf if bias else 0), f"{what} forward", tol)
    same_everywhere(y.detach(), f"{what} forward")
    (y * G.float()).sum().backward()
    close(x.grad, Xr.grad[:, kc], f"{what} dx", tol)
    close(layer.weight.grad, Wr.grad[:, kc], f"{what} dw", tol)
    if bias:  # the whole bias gradient on every rank (dy is replicated)
        close(layer.bias.grad, Br.grad, f"{what} db", tol)
    layer.close()


def inference(ctx, local_ctx):
    """The direct path against the autograd forward: no_grad, inference_mode, out=, packed (and
    repacking after an in-place change of the weight), for each layer and mode."""
    for seq in (True, False):
        mm = 4 * W
        cases = [
            ("column", lambda **kw: fluxcpp.ColumnParallelLinear(ctx, k, n, mm, True, **kw),
             (mm // W if seq else mm, k), (mm, n)),
            ("row", lambda **kw: fluxcpp.RowParallelLinear(ctx, k, n, mm, True, **kw),
             (mm, k), (mm // W if seq else mm, n)),
        ]
        for name, make, xshape, yshape in cases:
            extra = {} if seq or name == "row" else {"local_ctx": local_ctx}
            what = f"{name} sequence_parallel={seq}"
            ref_layer = make(sequence_parallel=seq)
            layer = make(sequence_parallel=seq, packed=True, **extra)
            with torch.no_grad():
                layer.weight.copy_(ref_layer.weight)
                layer.bias.copy_(torch.randn(layer.bias.shape))
                ref_layer.bias.copy_(layer.bias)
            x = torch.randn(xshape)
            want = ref_layer(x).detach()  # the autograd path
            with torch.no_grad():
                equal(ref_layer(x), want, f"{what} no_grad vs autograd")
                close(layer(x), want, f"{what} packed", tol)
            with torch.inference_mode():
                out = torch.empty(yshape)
                got = ref_layer(x, out=out)
                check(got is out, f"{what}: out= not returned")
                equal(out, want, f"{what} inference_mode out=")
                close(layer(x, out=torch.empty(yshape)), want, f"{what} packed out=", tol)
            with torch.no_grad():  # an in-place change of the weight: repacked
                layer.weight.mul_(-1)
                ref_layer.weight.mul_(-1)
                close(layer(x), ref_layer(x), f"{what} packed after weight.mul_(-1)", tol)
            raises(ValueError, lambda: layer(x, out=torch.empty(yshape)),
                   f"{what}: out= under autograd", contains=("out=", "inference"))
            layer.close()
            ref_layer.close()


def bf16_and_misuse(ctx, local_ctx):
    X = torch.randn(m, k * W)
    Wf = torch.randn(n, k * W)
    kc = slice(RANK * k, (RANK + 1) * k)
    layer = fluxcpp.RowParallelLinear(ctx, k, n, max_m=m, dtype=bf16, sequence_parallel=False,
                                      packed=True)
    with torch.no_grad():
        layer.weight.copy_(Wf[:, kc])
        y = layer(X[:, kc].to(bf16))
    want = X.to(bf16).double() @ Wf.to(bf16).double().t()
    close(y, want, "row replicated bf16 packed", 8e-3)
    same_everywhere(y, "row replicated bf16")
    layer.close()
    col = fluxcpp.ColumnParallelLinear(ctx, k, n, max_m=m, sequence_parallel=False)
    with torch.no_grad():
        raises(ValueError, lambda: col(torch.randn(m + 1, k)), "column m > max_m",
               contains=("max_m",))
    col.close()
    raises(ValueError, lambda: fluxcpp.ColumnParallelLinear(ctx, k, n, m, sequence_parallel=False,
                                                            packed=True),
           "packed replicated column without local_ctx", contains=("local_ctx",))
    raises(ValueError, lambda: fluxcpp.ColumnParallelLinear(ctx, k, n, m, sequence_parallel=False,
                                                            local_ctx=ctx),
           "local_ctx of W > 1 ranks", contains=("local_ctx",))
    raises(TypeError, lambda: fluxcpp.RowParallelLinear(ctx, k, n, m, dtype=torch.float64,
                                                        sequence_parallel=False, packed=True),
           "packed f64", contains=("packed",))
    mode_misuse(ctx)
    packed_prefill(ctx)


def packed_prefill(ctx):
    """packed=True with a bf16 weight over PACKED_MAX_BYTES (lowered here) reads the weight
    tensor from PACKED_MAX_ROWS GEMM rows on, bitwise as a layer without packed does, and packs
    nothing; below those rows it packs."""
    rows = fluxcpp.autograd.PACKED_MAX_ROWS
    saved, fluxcpp.autograd.PACKED_MAX_BYTES = fluxcpp.autograd.PACKED_MAX_BYTES, 0
    X = torch.randn(rows, k * W).to(bf16)
    kc = slice(RANK * k, (RANK + 1) * k)
    Wf = torch.randn(n, k * W).to(bf16)
    layers = [fluxcpp.RowParallelLinear(ctx, k, n, max_m=rows, dtype=bf16, sequence_parallel=False,
                                        packed=p) for p in (True, False)]
    with torch.no_grad():
        for layer in layers:
            layer.weight.copy_(Wf[:, kc])
        ys = [layer(X[:, kc]) for layer in layers]
        check(layers[0]._pw is None, "packed=True at prefill rows packed the weight")
        equal(ys[0], ys[1], "packed=True at prefill rows vs packed=False")
        layers[0](X[:rows - 1, kc])  # one row fewer: a decode-sized call packs
        check(layers[0]._pw is not None, "packed=True below PACKED_MAX_ROWS did not pack")
    fluxcpp.autograd.PACKED_MAX_BYTES = saved
    for layer in layers:
        layer.close()


def mode_misuse(ctx):
    """sequence_parallel has no default, and an input that does not fit the mode is an error
    naming the layer and the option on every rank (never a second gather), the layer usable
    after."""
    for cls in (fluxcpp.ColumnParallelLinear, fluxcpp.RowParallelLinear):
        raises(TypeError, lambda: cls(ctx, k, n, m), f"{cls.__name__} without sequence_parallel",
               contains=("sequence_parallel",))
        raises(TypeError, lambda: cls(ctx, k, n, m, sequence_parallel=1),
               f"{cls.__name__} sequence_parallel=1", contains=(cls.__name__, "sequence_parallel"))
    col = fluxcpp.ColumnParallelLinear(ctx, k, n, max_m=m, sequence_parallel=True)
    row = fluxcpp.RowParallelLinear(ctx, k, n, max_m=m, sequence_parallel=True)
    with torch.no_grad():
        # replicated activations (all m rows) given to the sequence-parallel column layer
        raises(ValueError, lambda: col(torch.randn(m, k)), "column seq with all rows",
               contains=("ColumnParallelLinear.forward", "sequence_parallel=False", f"max_m={m}"))
        raises(ValueError, lambda: col(torch.randn(m // W, k + 1)), "column seq wrong columns",
               contains=("ColumnParallelLinear.forward", "in_features"))
        raises(ValueError, lambda: row(torch.randn(W + 1, k)), "row seq with m % W != 0",
               contains=("RowParallelLinear.forward", "sequence_parallel=False", "divisible"))
        x = torch.randn(m // W, k)
        check(col(x).shape == (m // W * W, n), "column layer usable after the errors")
        check(row(torch.randn(m // W * W, k)).shape == (m // W, n),
              "row layer usable after the errors")
    col.close()
    row.close()
    raises(RuntimeError, lambda: col(torch.randn(m // W, k)), "closed layer",
           contains=("ColumnParallelLinear.forward", "closed"))


with context() as ctx, local_context() as local_ctx:
    for bias in (False, True):
        for lc in (None, local_ctx):
            column_replicated(ctx, bias, lc)
        row_replicated(ctx, bias)
    inference(ctx, local_ctx)
    bf16_and_misuse(ctx, local_ctx)

finish("python.tp_layers")
