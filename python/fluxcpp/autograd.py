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


def _save(ctx, layer, b, *tensors):
    """forward's record for backward: the tensors, the layer, whether there is a bias."""
    ctx.save_for_backward(*tensors)
    ctx.layer, ctx.has_bias = layer, b is not None


def _bias_grad(ctx, dy):
    return dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None


class _ColumnFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, layer):
        m = x.shape[0] * layer._W
        gathered = torch.empty((m, x.shape[1]), dtype=x.dtype)
        y = layer._fwd_op(x, w, b, gathered_input=gathered)
        _save(ctx, layer, b, gathered, w)
        return y

    @staticmethod
    def backward(ctx, dy):
        gathered, w = ctx.saved_tensors
        dy = dy.contiguous()
        dx = ctx.layer._bwd_op(dy, w) if ctx.needs_input_grad[0] else None
        dw = (dy.t() @ gathered).to(w.dtype) if ctx.needs_input_grad[1] else None
        return dx, dw, _bias_grad(ctx, dy), None


class _RowFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, layer):
        y = layer._fwd_op(x, w, b)
        _save(ctx, layer, b, x, w)
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
        return (dx if ctx.needs_input_grad[0] else None), dw, _bias_grad(ctx, dy), None


class _Parallel(torch.nn.Module):
    """weight [n, k]: forward op _ops[0](max_m, n, k), backward op _ops[1](max_m, k, n) with
    transpose_weight; _fn the autograd.Function running them."""
    _ops, _fn = (), None

    def __init__(self, ctx, k, n, max_m, bias, dtype):
        """k, n: (argument name, value) of the input and the output features."""
        super().__init__()
        where = type(self).__name__
        (k_name, k), (n_name, n) = k, n
        k, n = size(where, k_name, k, 1), size(where, n_name, n, 1)
        max_m = size(where, "max_m", max_m)
        fwd_cls, bwd_cls = self._ops
        self._fwd_op = fwd_cls(ctx, max_m, n, k, dtype)
        self._bwd_op = bwd_cls(ctx, max_m, k, n, dtype, transpose_weight=True)
        self._W = ctx.world_size
        self.weight = torch.nn.Parameter(torch.empty((n, k), dtype=dtype))
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        self.bias = torch.nn.Parameter(torch.zeros(n, dtype=dtype)) if bias else None

    def forward(self, x):
        return self._fn.apply(x.contiguous(), self.weight, self.bias, self)

    def close(self):
        """Collective: destroys the two ops."""
        self._fwd_op.close()
        self._bwd_op.close()


class ColumnParallelLinear(_Parallel):
    """x [m/W, in_features] (this rank's rows) -> y [m, out_features_shard] (all rows, this
    rank's output columns). weight [out_features_shard, in_features]."""
    _ops, _fn = (AgGemm, GemmRs), _ColumnFn

    def __init__(self, ctx, in_features, out_features_shard, max_m, bias=False,
                 dtype=torch.float32):
        super().__init__(ctx, ("in_features", in_features),
                         ("out_features_shard", out_features_shard), max_m, bias, dtype)


class RowParallelLinear(_Parallel):
    """x [m, in_features_shard] (all rows, this rank's input columns) -> y [m/W, out_features]
    (this rank's rows of the sum over ranks). weight [out_features, in_features_shard]; bias
    (the same on every rank) is added once."""
    _ops, _fn = (GemmRs, AgGemm), _RowFn

    def __init__(self, ctx, in_features_shard, out_features, max_m, bias=False,
                 dtype=torch.float32):
        super().__init__(ctx, ("in_features_shard", in_features_shard),
                         ("out_features", out_features), max_m, bias, dtype)
