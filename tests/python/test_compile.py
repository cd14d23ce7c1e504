"""torch.compile(fullgraph=True) of a model on fluxcpp's layers (ColumnParallelLinear -> GELU ->
RowParallelLinear, the operators of fluxcpp.torch_ops): outputs and gradients against the same
model in eager and against the unsharded model in f64, in both modes, with one graph and no
break; inference (no_grad, packed weights repacked after an in-place change, out=, rows that
change from call to call); the ops themselves as operators, bitwise against their direct calls;
an input that fits on every rank but one, compiled: that rank's ValueError, the peers'
INVALID_ARGUMENT at once, as in eager. Backend aot_eager (forward and backward graphs through
AOTAutograd; inductor would compile C++ for ~50 s on a 2-core machine)."""
import time

import torch
import torch._dynamo
import torch._dynamo.testing

import fluxcpp
from fluxcpp import torch_ops
from support import RANK, W, check, close, context, equal, finish, local_context, raises, tol_for

torch.manual_seed(0)
k, h = 64, 16           # model width, per-rank hidden shard (hidden h * W)
m, max_m = 4 * W, 8 * W  # rows of a call (all ranks), the layers' max_m
tol = tol_for(torch.float32, max(k, h * W))
f32, f64 = torch.float32, torch.float64
gelu = torch.nn.functional.gelu

# The unsharded model, the same on every rank: Y = gelu(X @ W1.T + B1) @ W2.T + B2.
X, G = torch.randn(m, k, dtype=f64), torch.randn(m, k, dtype=f64)
W1, B1 = torch.randn(h * W, k, dtype=f64) / k ** 0.5, torch.randn(h * W, dtype=f64)
W2, B2 = torch.randn(k, h * W, dtype=f64) / (h * W) ** 0.5, torch.randn(k, dtype=f64)
ref = [t.clone().requires_grad_() for t in (X, W1, B1, W2, B2)]
Y = gelu(ref[0] @ ref[1].t() + ref[2]) @ ref[3].t() + ref[4]
(Y * G).sum().backward()
rows, cols = slice(RANK * m // W, (RANK + 1) * m // W), slice(RANK * h, (RANK + 1) * h)


class MLP(torch.nn.Module):
    def __init__(self, ctx, seq, packed=False, local_ctx=None):
        super().__init__()
        self.fc1 = fluxcpp.ColumnParallelLinear(ctx, k, h, max_m, True, sequence_parallel=seq,
                                                packed=packed, local_ctx=local_ctx)
        self.fc2 = fluxcpp.RowParallelLinear(ctx, h, k, max_m, True, sequence_parallel=seq,
                                             packed=packed)
        with torch.no_grad():
            self.fc1.weight.copy_(W1[cols]), self.fc1.bias.copy_(B1[cols])
            self.fc2.weight.copy_(W2[:, cols]), self.fc2.bias.copy_(B2)

    def forward(self, x):
        return self.fc2(gelu(self.fc1(x)))

    def close(self):
        self.fc1.close(), self.fc2.close()


def compiled(fn):
    """fn compiled with fullgraph=True (a graph break raises) and a counter of its graphs."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    return torch.compile(fn, backend=counter, fullgraph=True), counter


def run(model, x, g):
    """Output and (dx, dw1, db1, dw2, db2) of one forward and backward."""
    model.zero_grad()
    x = x.clone().requires_grad_()
    y = model(x)
    (y * g).sum().backward()
    return y.detach(), [x.grad] + [p.grad for p in (model.fc1.weight, model.fc1.bias,
                                                    model.fc2.weight, model.fc2.bias)]


def training(ctx, seq):
    what = f"sequence_parallel={seq}"
    model = MLP(ctx, seq)
    x = X[rows].float() if seq else X.float()
    g = (G[rows] if seq else G).float()  # the loss on this rank's output rows
    y_e, grads_e = run(model, x, g)
    cm, counter = compiled(model)
    y_c, grads_c = run(cm, x, g)
    check(counter.frame_count == 1, f"{what}: {counter.frame_count} graphs, expected 1")
    close(y_c, y_e, f"{what}: compiled forward vs eager", tol)
    close(y_e, Y.detach()[rows] if seq else Y.detach(), f"{what}: eager forward vs f64", tol)
    # Reference gradients: this rank's rows of dx (seq) or dx (replicated), the weights' shards;
    # db2 covers this rank's rows in sequence-parallel mode (docs/python.md, "Autograd").
    dX, dW1, dB1, dW2, dB2 = (t.grad for t in ref)
    want = [dX[rows] if seq else dX, dW1[cols], dB1[cols], dW2[:, cols],
            G[rows].sum(0) if seq else dB2]
    for name, c, e, r in zip(("dx", "dw1", "db1", "dw2", "db2"), grads_c, grads_e, want):
        close(c, e, f"{what}: compiled {name} vs eager", tol)
        close(e, r, f"{what}: eager {name} vs f64", tol)
    ex = torch._dynamo.explain(model)(x)
    check(ex.graph_count == 1 and ex.graph_break_count == 0,
          f"{what}: explain: {ex.graph_count} graphs, {ex.graph_break_count} breaks "
          f"{[str(b.reason) for b in ex.break_reasons]}")
    with torch.no_grad():
        close(cm(x), model(x), f"{what}: compiled no_grad forward vs eager", tol)
    model.close()


def inference(ctx, local_ctx):
    model = MLP(ctx, True, packed=True)
    cm, counter = compiled(model)
    with torch.no_grad():
        for r in (1, 2, 3, 2):  # this rank's rows vary: one recompile, then dynamic
            x = torch.randn(r, k)
            equal(cm(x), model(x), f"packed, {r} rows: compiled vs eager")
        check(counter.frame_count <= 2, f"packed: {counter.frame_count} graphs for 3 shapes")
        x = X[rows].float()
        before = cm(x)
        model.fc1.weight.mul_(0.5)  # in place: repacked by both paths
        after = cm(x)
        equal(after, model(x), "packed, after an in-place weight change: compiled vs eager")
        check(not torch.equal(after, before), "packed: the weight change is seen")
        out = torch.empty(m // W, k)
        mid = gelu(model.fc1(x))
        fn, _ = compiled(lambda a, o: model.fc2(a, out=o))
        got = fn(mid, out)
        check(got is out, "out=: the compiled call returns out")
        equal(out, model.fc2(mid), "out=: compiled vs eager")
        # replicated, the column layer on local_ctx's AgGemm and on torch
        for lc in (local_ctx, None):
            rep = MLP(ctx, False, local_ctx=lc)
            fn, _ = compiled(rep)
            equal(fn(X.float()), rep(X.float()), f"replicated local_ctx={lc is not None}")
            rep.close()
    model.close()


def operators(ctx):
    """Every op operator, compiled, against the ops' direct calls."""
    ag = fluxcpp.AgGemm(ctx, max_m, h, k, f32)
    rs = fluxcpp.GemmRs(ctx, max_m, k, h, f32)
    ar = fluxcpp.GemmAr(ctx, max_m, k, k, f32)
    allg, reds = fluxcpp.AllGather(ctx, max_m, k, f32), fluxcpp.ReduceScatter(ctx, max_m, k, f32)
    allr = fluxcpp.AllReduce(ctx, max_m * k, f32)
    hs = [torch_ops.handle(o) for o in (ag, rs, ar, allg, reds, allr)]
    w1, b1 = torch.randn(h, k), torch.randn(h)
    w2, w3 = torch.randn(k, h), torch.randn(k, k)
    ops = torch.ops.fluxcpp

    def direct(x):
        gx = torch.empty(m, k)
        y = ag(x, w1, b1, gathered_input=gx)
        z = rs(y, w2)
        a = allg(z)
        return [y, gx, z, a, reds(a), ar(a, w3), allr(a), ag(x, w1)]

    def traced(x):
        y, gx = ops.ag_gemm_gathered(hs[0], x, w1, b1)
        z = ops.gemm_rs(hs[1], y, w2, None)
        a = ops.all_gather(hs[3], z)
        return [y, gx, z, a, ops.reduce_scatter(hs[4], a), ops.gemm_ar(hs[2], a, w3, None),
                ops.all_reduce(hs[5], a), ops.ag_gemm(hs[0], x, w1, None)]

    x = torch.randn(m // W, k)
    fn, counter = compiled(traced)
    names = "ag_gemm_gathered gathered gemm_rs all_gather reduce_scatter gemm_ar all_reduce ag_gemm"
    for name, got, want in zip(names.split(), fn(x), direct(x)):
        equal(got, want, f"operator {name}: compiled vs direct")
    check(counter.frame_count == 1, f"operators: {counter.frame_count} graphs, expected 1")
    raises(RuntimeError, lambda: ops.all_reduce(10 ** 9, x), "an unknown handle",
           contains=("handle 1000000000",))
    for o in (ag, rs, ar, allg, reds, allr):
        o.close()


def misfit(ctx):
    """The last rank's input has a column too many, compiled: its ValueError, the peers'
    INVALID_ARGUMENT at once (the layer's op entered with an invalid shape), as in eager."""
    model = MLP(ctx, True)
    cm, _ = compiled(model)
    x = torch.randn(m // W, k + (RANK == W - 1)).requires_grad_()
    start = time.monotonic()
    if RANK == W - 1:
        raises(ValueError, lambda: cm(x), "misfit: the rank with the bad input",
               contains=("ColumnParallelLinear.forward: input has", "(in_features)"))
    else:
        raises(fluxcpp.Error, lambda: cm(x), "misfit: a peer", fluxcpp.Status.INVALID_ARGUMENT)
    check(time.monotonic() - start < 30, "misfit: the peers were not told at once")
    x = X[rows].float()
    close(cm(x), model(x), "misfit: the layers work after", tol)
    model.close()


with context() as ctx:
    for seq in (True, False):
        training(ctx, seq)
    local = local_context(compute_threads=1)
    inference(ctx, local)
    local.close()
    operators(ctx)
    misfit(ctx)

finish("python.compile")
