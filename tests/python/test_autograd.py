"""ColumnParallelLinear and RowParallelLinear: forward and gradients against torch autograd on
the full (unsharded) layer, which every rank computes from the same seeds."""
import torch

import fluxcpp
from support import RANK, W, close, context, finish

torch.manual_seed(0)
m, k, n = 4 * W, 16, 8  # per-rank shard widths
tol = 1e-5

with context() as ctx:
    for bias in (False, True):
        # Column-parallel: X [m, k] split by rows, weight [n*W, k] split by output columns.
        X = torch.randn(m, k, dtype=torch.float64)
        Wf = torch.randn(n * W, k, dtype=torch.float64)
        Bf = torch.randn(n * W, dtype=torch.float64)
        G = torch.randn(m, n * W, dtype=torch.float64)
        Xr, Wr, Br = X.clone().requires_grad_(), Wf.clone().requires_grad_(), Bf.clone().requires_grad_()
        Y = Xr @ Wr.t() + (Br if bias else 0)
        (Y * G).sum().backward()

        rows, cols = slice(RANK * m // W, (RANK + 1) * m // W), slice(RANK * n, (RANK + 1) * n)
        layer = fluxcpp.ColumnParallelLinear(ctx, k, n, max_m=m, bias=bias, dtype=torch.float32,
                                              sequence_parallel=True)
        with torch.no_grad():
            layer.weight.copy_(Wf[cols])
            if bias:
                layer.bias.copy_(Bf[cols])
        x = X[rows].float().requires_grad_()
        y = layer(x)
        close(y, Y.detach()[:, cols], f"column forward bias={bias}", tol)
        (y * G[:, cols].float()).sum().backward()
        close(x.grad, Xr.grad[rows], f"column dx bias={bias}", tol)
        close(layer.weight.grad, Wr.grad[cols], f"column dw bias={bias}", tol)
        if bias:
            close(layer.bias.grad, Br.grad[cols], "column db", tol)
        layer.close()

        # Row-parallel: X [m, k*W] split by input columns, weight [n, k*W] likewise; output rows.
        X = torch.randn(m, k * W, dtype=torch.float64)
        Wf = torch.randn(n, k * W, dtype=torch.float64)
        G = torch.randn(m, n, dtype=torch.float64)
        Xr, Wr = X.clone().requires_grad_(), Wf.clone().requires_grad_()
        (Xr @ Wr.t() * G).sum().backward()
        kc = slice(RANK * k, (RANK + 1) * k)
        layer = fluxcpp.RowParallelLinear(ctx, k, n, max_m=m, bias=bias, dtype=torch.float32,
                                          sequence_parallel=True)
        with torch.no_grad():
            layer.weight.copy_(Wf[:, kc])
            if bias:
                layer.bias.zero_()
        x = X[:, kc].float().requires_grad_()
        y = layer(x)
        close(y, (X @ Wf.t())[rows], f"row forward bias={bias}", tol)
        (y * G[rows].float()).sum().backward()
        close(x.grad, Xr.grad[:, kc], f"row dx bias={bias}", tol)
        close(layer.weight.grad, Wr.grad[:, kc], f"row dw bias={bias}", tol)
        if bias:
            close(layer.bias.grad, G[rows].sum(0), "row db (this rank's rows)", tol)
        layer.close()

finish("python.autograd")
