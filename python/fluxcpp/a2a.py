"""AllToAllSingle, A2aGemm and the Ulysses pair GemmA2aTranspose / A2aTransposeGemm."""
import ctypes

import torch

from ._base import Op, ZeroCopyInput
from ._checks import int_array, output, tensor
from ._lib import checked
from .dense import _Collective, _GemmOp


class AllToAllSingle(_Collective, ZeroCopyInput):
    """fluxcpp_all_to_all_single (variable splits, like MPI_Alltoallv on rows).

    forward(input, input_splits, output_splits, *, out=None): splits are W row counts (int64
    tensors or sequences); input [sum(input_splits), n]; out [sum(output_splits), n]."""
    _c = "all_to_all_single"

    def __init__(self, ctx, max_rows, n, dtype):
        self._setup(ctx, (("max_rows", max_rows, 0), ("n", n, 1)), (("dtype", dtype),))

    def _buffer_shape(self):
        return (self.max_rows, self.n)

    def _poison(self):
        bad = (ctypes.c_int64 * self._W)(*([-1] * self._W))
        self._fwd(self._handle, None, bad, None, bad)

    def forward(self, input, input_splits, output_splits, *, out=None):
        h = self._handle or self._h()
        fw = self._fw
        try:
            isp, ivals, ikeep = int_array(fw, "input_splits", input_splits, torch.int64, self._W)
            osp, ovals, okeep = int_array(fw, "output_splits", output_splits, torch.int64, self._W)
            rows_in, rows_out = sum(ivals), sum(ovals)
            ip = tensor(fw, "input", input, self.dtype, (rows_in, self.n))
            out, op = output(fw, "out", out, self.dtype, (rows_out, self.n))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, isp, op, osp), out)


class A2aGemm(_GemmOp, ZeroCopyInput):
    """fluxcpp_a2a_gemm: input [m, k], row block t (m/W rows) goes to rank t; out [m, n] =
    a2a_output @ weight.T + bias; a2a_output [m, k] optionally receives the exchanged rows."""
    _c = "a2a_gemm"

    def _buffer_shape(self):
        return (self.max_m, self.k)

    def forward(self, input, weight, bias=None, *, out=None, a2a_output=None):
        h = self._handle or self._h()
        fw = self._fw
        try:
            ip, m = self._input(input)
            wp = tensor(fw, "weight", weight, self._in_dtype, self._wshape)
            bp = None if bias is None else tensor(fw, "bias", bias, self._out_dtype, (self.n,))
            out, op = output(fw, "out", out, self._out_dtype, (m, self.n))
            ap = None if a2a_output is None else tensor(fw, "a2a_output", a2a_output,
                                                        self._in_dtype, (m, self.k))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, m, wp, bp, op, ap), out)


class GemmA2aTranspose(Op):
    """fluxcpp_gemm_a2a_transpose (FLUX GemmAllToAllTranspose, Ulysses before attention).

    forward(input, weight, bias=None, *, out=None): input [bs, seq/W, hidden] (seq global);
    weight [nheads*head_dim, hidden]; out [bs, nheads/W, seq, head_dim]."""
    _c = "gemm_a2a_transpose"

    def __init__(self, ctx, max_bs, max_seq, hidden, nheads, head_dim, input_dtype,
                 output_dtype=None):
        output_dtype = input_dtype if output_dtype is None else output_dtype
        self._setup(ctx, (("max_bs", max_bs, 0), ("max_seq", max_seq, 0), ("hidden", hidden, 1),
                          ("nheads", nheads, 1), ("head_dim", head_dim, 1)),
                    (("input_dtype", input_dtype), ("output_dtype", output_dtype)))

    def _poison(self):
        self._fwd(self._handle, None, -1, -1, None, None, None)

    def forward(self, input, weight, bias=None, *, out=None):
        h = self._handle or self._h()
        fw, W = self._fw, self._W
        nd = self.nheads * self.head_dim
        try:
            ip = tensor(fw, "input", input, self.input_dtype, (None, None, self.hidden))
            bs, seq = input.shape[0], input.shape[1] * W
            wp = tensor(fw, "weight", weight, self.input_dtype, (nd, self.hidden))
            bp = None if bias is None else tensor(fw, "bias", bias, self.output_dtype, (nd,))
            oshape = (bs, self.nheads // W, seq, self.head_dim)
            out, op = output(fw, "out", out, self.output_dtype, oshape)
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, bs, seq, wp, bp, op), out)


class A2aTransposeGemm(Op):
    """fluxcpp_a2a_transpose_gemm (FLUX AllToAllTransposeGemm, Ulysses after attention).

    forward(input, weight, bias=None, *, out=None, a2a_output=None): input [bs, nheads/W, seq,
    head_dim]; weight [n, nheads*head_dim]; out [bs, seq/W, n]; a2a_output [bs, seq/W,
    nheads*head_dim]."""
    _c = "a2a_transpose_gemm"

    def __init__(self, ctx, max_bs, max_seq, nheads, head_dim, n, input_dtype, output_dtype=None):
        output_dtype = input_dtype if output_dtype is None else output_dtype
        self._setup(ctx, (("max_bs", max_bs, 0), ("max_seq", max_seq, 0), ("nheads", nheads, 1),
                          ("head_dim", head_dim, 1), ("n", n, 1)),
                    (("input_dtype", input_dtype), ("output_dtype", output_dtype)))

    def _poison(self):
        self._fwd(self._handle, None, -1, -1, None, None, None, None)

    def forward(self, input, weight, bias=None, *, out=None, a2a_output=None):
        h = self._handle or self._h()
        fw, W = self._fw, self._W
        nd = self.nheads * self.head_dim
        try:
            ip = tensor(fw, "input", input, self.input_dtype,
                        (None, self.nheads // W, None, self.head_dim))
            bs, seq = input.shape[0], input.shape[2]
            if seq % W:
                raise ValueError(f"{fw}: seq={seq} (input's dimension 2) is not divisible by "
                                 f"W={W}")
            wp = tensor(fw, "weight", weight, self.input_dtype, (self.n, nd))
            bp = None if bias is None else tensor(fw, "bias", bias, self.output_dtype, (self.n,))
            out, op = output(fw, "out", out, self.output_dtype, (bs, seq // W, self.n))
            ap = None if a2a_output is None else tensor(fw, "a2a_output", a2a_output,
                                                        self.input_dtype, (bs, seq // W, nd))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, bs, seq, wp, bp, op, ap), out)


GemmAllToAllTranspose = GemmA2aTranspose
AllToAllTransposeGemm = A2aTransposeGemm
