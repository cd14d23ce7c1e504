"""Tensor-parallel linear layers with autograd, built from the op pair (Megatron's column- and
row-parallel linear, FLUX's AGKernel / GemmRS).

ColumnParallelLinear: forward y = AllGather(x) @ w.T (AgGemm, keeping the gathered input);
backward dx = ReduceScatter(dy @ w) (GemmRs with transpose_weight: dy [m, n] is the K slice,
w [n, k] the [K, N] weight), dw = dy.T @ AllGather(x), db = sum of dy over rows.
RowParallelLinear: forward y = ReduceScatter(x @ w.T) (GemmRs); backward dY = AllGather(dy)
and dx = dY @ w (AgGemm with transpose_weight and gathered_input), dw = dY.T @ x.
Every rank runs forward and backward in the same order (both passes are collective)."""
import torch

from ._checks import size
from .dense import AgGemm, GemmRs


class _ColumnFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, layer):
        m = x.shape[0] * layer._W
        gathered = torch.empty((m, x.shape[1]), dtype=x.dtype)
        y = layer._fwd_op(x, w, b, gathered_input=gathered)
        ctx.save_for_backward(gathered, w)
        ctx.layer, ctx.has_bias = layer, b is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        gathered, w = ctx.saved_tensors
        dy = dy.contiguous()
        dx = ctx.layer._bwd_op(dy, w) if ctx.needs_input_grad[0] else None
        dw = (dy.t() @ gathered).to(w.dtype) if ctx.needs_input_grad[1] else None
        db = dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db, None


class _RowFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, layer):
        y = layer._fwd_op(x, w, b)
        ctx.save_for_backward(x, w)
        ctx.layer, ctx.has_bias = layer, b is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy = dy.contiguous()
        layer = ctx.layer
        dY = torch.empty((dy.shape[0] * layer._W, dy.shape[1]), dtype=dy.dtype)
        dx = layer._bwd_op(dy, w, gathered_input=dY)
        dw = (dY.t() @ x).to(w.dtype) if ctx.needs_input_grad[1] else None
        # bias is added once to the reduced rows: its gradient is this rank's rows' sum,
        # summed over ranks by the caller's data-parallel reduction as for any replicated bias
        db = dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return (dx if ctx.needs_input_grad[0] else None), dw, db, None


class _Parallel(torch.nn.Module):
    def _init(self, ctx, shape, bias, dtype, fwd_op, bwd_op):
        self._W = ctx.world_size
        self.weight = torch.nn.Parameter(torch.empty(shape, dtype=dtype))
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        self.bias = torch.nn.Parameter(torch.zeros(shape[0], dtype=dtype)) if bias else None
        self._fwd_op, self._bwd_op = fwd_op, bwd_op

    def close(self):
        """Collective: destroys the two ops."""
        self._fwd_op.close()
        self._bwd_op.close()


class ColumnParallelLinear(_Parallel):
    """x [m/W, in_features] (this rank's rows) -> y [m, out_features_shard] (all rows, this
    rank's output columns). weight [out_features_shard, in_features]."""

    def __init__(self, ctx, in_features, out_features_shard, max_m, bias=False,
                 dtype=torch.float32):
        super().__init__()
        where = "ColumnParallelLinear"
        in_features = size(where, "in_features", in_features, 1)
        out_features_shard = size(where, "out_features_shard", out_features_shard, 1)
        max_m = size(where, "max_m", max_m)
        self._init(ctx, (out_features_shard, in_features), bias, dtype,
                   AgGemm(ctx, max_m, out_features_shard, in_features, dtype),
                   GemmRs(ctx, max_m, in_features, out_features_shard, dtype,
                          transpose_weight=True))

    def forward(self, x):
        return _ColumnFn.apply(x.contiguous(), self.weight, self.bias, self)


class RowParallelLinear(_Parallel):
    """x [m, in_features_shard] (all rows, this rank's input columns) -> y [m/W, out_features]
    (this rank's rows of the sum over ranks). weight [out_features, in_features_shard]; bias
    (the same on every rank) is added once."""

    def __init__(self, ctx, in_features_shard, out_features, max_m, bias=False,
                 dtype=torch.float32):
        super().__init__()
        where = "RowParallelLinear"
        in_features_shard = size(where, "in_features_shard", in_features_shard, 1)
        out_features = size(where, "out_features", out_features, 1)
        max_m = size(where, "max_m", max_m)
        self._init(ctx, (out_features, in_features_shard), bias, dtype,
                   GemmRs(ctx, max_m, out_features, in_features_shard, dtype),
                   AgGemm(ctx, max_m, in_features_shard, out_features, dtype,
                          transpose_weight=True))

    def forward(self, x):
        return _RowFn.apply(x.contiguous(), self.weight, self.bias, self)
