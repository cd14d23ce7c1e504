"""AllGather, ReduceScatter, AllReduce, AgGemm (AGKernel), GemmRs (GemmRS) and GemmAr
(GemmAllReduce): the tensor-parallel pair, its all-reduce variant and their collectives."""
import torch

from . import _lib
from .packed import PackedWeight
from ._base import Op, ZeroCopyInput
from ._checks import REQUIRED, c_dtype, output, size, tensor
from ._lib import checked


class _GemmOp(Op):
    """Shared create arguments of the fused GEMM ops: (max_m, n, k, input_dtype, output_dtype,
    transpose_weight); weight is [n, k], or [k, n] when transposed."""

    def __init__(self, ctx, max_m, n, k, input_dtype=REQUIRED, output_dtype=None,
                 transpose_weight=False):
        name = type(self).__name__
        if input_dtype is REQUIRED:
            raise TypeError(f"{name}: input_dtype is missing: the dtype of input and weight, "
                            "torch.float32, torch.float64 or torch.bfloat16 (output_dtype "
                            f"defaults to it), e.g. {name}(ctx, max_m, n, k, torch.bfloat16)")
        output_dtype = input_dtype if output_dtype is None else output_dtype
        cin = c_dtype(name, "input_dtype", input_dtype)
        cout = c_dtype(name, "output_dtype", output_dtype)
        self.max_m = size(name, "max_m", max_m)
        self.n, self.k = size(name, "n", n, 1), size(name, "k", k, 1)
        self.input_dtype, self.output_dtype = input_dtype, output_dtype
        self.transpose_weight = bool(transpose_weight)
        self._in_dtype, self._out_dtype = input_dtype, output_dtype
        self._wshape = (self.k, self.n) if self.transpose_weight else (self.n, self.k)
        self._fw = f"{name}.forward"
        self._create(ctx, self.max_m, self.n, self.k, cin, cout, int(self.transpose_weight))
        self._fwd = _lib.fn(f"fluxcpp_{self._c}_forward")
        self._fwd_packed = None

    def _weight(self, weight):
        """(pointer or packed handle, the forward that takes it): weight is a tensor or a
        fluxcpp.PackedWeight of the op's dtype, n, k and orientation."""
        if isinstance(weight, PackedWeight):
            h = weight.matches(self._fw, self._in_dtype, self.n, self.k, self.transpose_weight)
            if self._fwd_packed is None:
                self._fwd_packed = _lib.fn(f"fluxcpp_{self._c}_forward_packed")
            return h, self._fwd_packed
        return tensor(self._fw, "weight", weight, self._in_dtype, self._wshape), self._fwd

    def _poison(self):
        # AgGemm and A2aGemm: (input, m, weight, bias, out, gathered_input / a2a_output)
        self._fwd(self._handle, None, -1, None, None, None, None)

    def _check_m(self, m):
        if m > self.max_m:
            raise ValueError(f"{self._fw}: m={m} (from input's shape) exceeds max_m={self.max_m}")

    def _input(self, input):
        """(pointer, m) of an input [m, k] whose rows are split over the ranks (GemmRs, A2aGemm):
        m divisible by W, at most max_m."""
        ip = tensor(self._fw, "input", input, self._in_dtype, (None, self.k))
        m = input.shape[0]
        if m % self._W:
            raise ValueError(f"{self._fw}: input has {m} rows, not divisible by W={self._W}")
        self._check_m(m)
        return ip, m


class _Collective(Op):
    """The plain collectives: one dtype, and a forward (input, m, output) unless overridden."""

    @property
    def _in_dtype(self):
        return self.dtype

    def _poison(self):
        self._fwd(self._handle, None, -1, None)


class AllGather(_Collective, ZeroCopyInput):
    """fluxcpp_all_gather: input [m/W, k] -> output [m, k], rank s's rows at [s*m/W, (s+1)*m/W)."""
    _c = "all_gather"

    def __init__(self, ctx, max_m, k, dtype):
        self._setup(ctx, (("max_m", max_m, 0), ("k", k, 1)), (("dtype", dtype),))

    def _buffer_shape(self):
        return (self.max_m // self._W, self.k)

    def forward(self, input, *, out=None):
        h = self._handle or self._h()
        try:
            ip = tensor(self._fw, "input", input, self.dtype, (None, self.k))
            m = input.shape[0] * self._W
            if m > self.max_m:
                raise ValueError(f"{self._fw}: m={m} (input rows x W) exceeds max_m={self.max_m}")
            out, op = output(self._fw, "out", out, self.dtype, (m, self.k))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, m, op), out)


class ReduceScatter(_Collective):
    """fluxcpp_reduce_scatter: input [m, n] -> output [m/W, n] = this rank's rows of the sum over
    ranks, in a fixed order (bitwise reproducible)."""
    _c = "reduce_scatter"

    def __init__(self, ctx, max_m, n, dtype):
        self._setup(ctx, (("max_m", max_m, 0), ("n", n, 1)), (("dtype", dtype),))

    def forward(self, input, *, out=None):
        h = self._handle or self._h()
        try:
            ip = tensor(self._fw, "input", input, self.dtype, (None, self.n))
            m = input.shape[0]
            if m % self._W:
                raise ValueError(f"{self._fw}: input has {m} rows, not divisible by W={self._W}")
            if m > self.max_m:
                raise ValueError(f"{self._fw}: m={m} exceeds max_m={self.max_m}")
            out, op = output(self._fw, "out", out, self.dtype, (m // self._W, self.n))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, m, op), out)


class AllReduce(_Collective, ZeroCopyInput):
    """fluxcpp_all_reduce: input of any shape (contiguous; count = input.numel() <= max_count)
    -> out of the same shape = the sum over ranks of input, in a fixed order (bitwise identical
    on every rank and from call to call). out=input reduces in place."""
    _c = "all_reduce"

    def __init__(self, ctx, max_count, dtype=torch.float32):
        self._setup(ctx, (("max_count", max_count, 1),), (("dtype", dtype),))

    def _buffer_shape(self):
        return (self.max_count,)

    def _out(self, out, shape):
        """out's pointer: a tensor of input's dtype and shape. Any number of dimensions is a
        valid shape here, so an out whose dimensions differ from input's is a ValueError."""
        try:
            return tensor(self._fw, "out", out, self.dtype, shape)
        except TypeError:
            if isinstance(out, torch.Tensor) and out.is_cpu and out.dtype is self.dtype:
                raise ValueError(f"{self._fw}: out has shape {list(out.shape)}, expected "
                                 f"input's shape {list(shape)}") from None
            raise

    def forward(self, input, *, out=None):
        h = self._handle or self._h()
        try:
            shape = getattr(input, "shape", ())
            ip = tensor(self._fw, "input", input, self.dtype, shape)
            count = input.numel()
            if count > self.max_count:
                raise ValueError(f"{self._fw}: count={count} (input's numel, shape "
                                 f"{list(shape)}) exceeds max_count={self.max_count}")
            if out is None:
                out = torch.empty(shape, dtype=self.dtype)
                op = out.data_ptr()
            elif out is input:
                op = ip
            else:
                op = self._out(out, shape)
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, count, op), out)


class AgGemm(_GemmOp, ZeroCopyInput):
    """fluxcpp_ag_gemm (FLUX AGKernel), the column-parallel linear: input [m/W, k]; weight [n, k]
    (this rank's shard; or a fluxcpp.PackedWeight of it); out [m, n] = AllGather(input) @
    weight.T + bias; gathered_input [m, k] optionally receives AllGather(input)."""
    _c = "ag_gemm"

    def _buffer_shape(self):
        return (self.max_m // self._W, self.k)

    def forward(self, input, weight, bias=None, *, out=None, gathered_input=None):
        h = self._handle or self._h()
        fw = self._fw
        try:
            ip = tensor(fw, "input", input, self._in_dtype, (None, self.k))
            m = input.shape[0] * self._W
            if m > self.max_m:
                self._check_m(m)
            wp, fwd = self._weight(weight)
            bp = None if bias is None else tensor(fw, "bias", bias, self._out_dtype, (self.n,))
            out, op = output(fw, "out", out, self._out_dtype, (m, self.n))
            gp = None if gathered_input is None else tensor(
                fw, "gathered_input", gathered_input, self._in_dtype, (m, self.k))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(fwd(h, ip, m, wp, bp, op, gp), out)


class _RowParallel(_GemmOp):
    """The row-parallel linear ops (GemmRs, GemmAr): input [m, k] (this rank's K slice), weight
    [n, k] or a fluxcpp.PackedWeight, bias once; they differ in the rows m may have and the rows
    each rank gets (_rows)."""

    def _poison(self):  # no output besides out
        self._fwd(self._handle, None, -1, None, None, None)

    def forward(self, input, weight, bias=None, *, out=None):
        h = self._handle or self._h()
        fw = self._fw
        try:
            ip, m, rows = self._rows(input)
            wp, fwd = self._weight(weight)
            bp = None if bias is None else tensor(fw, "bias", bias, self._out_dtype, (self.n,))
            out, op = output(fw, "out", out, self._out_dtype, (rows, self.n))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(fwd(h, ip, m, wp, bp, op), out)


class GemmRs(_RowParallel):
    """fluxcpp_gemm_rs (FLUX GemmRS), the row-parallel linear: input [m, k] (this rank's K
    slice); weight [n, k] (or a fluxcpp.PackedWeight of it); out [m/W, n] = this rank's rows of
    the sum over ranks of input @ weight.T, + bias once (bias the same on every rank). Bitwise
    reproducible."""
    _c = "gemm_rs"

    def _rows(self, input):
        ip, m = self._input(input)
        return ip, m, m // self._W


class GemmAr(_RowParallel):
    """fluxcpp_gemm_ar, the row-parallel linear with replicated activations: input [m, k] (this
    rank's K slice; any m <= max_m, the same on every rank); weight [n, k] (or a
    fluxcpp.PackedWeight of it); out [m, n] on every rank = the sum over ranks of input @
    weight.T, + bias once (bias the same on every rank). Bitwise identical on every rank."""
    _c = "gemm_ar"

    def _rows(self, input):
        ip = tensor(self._fw, "input", input, self._in_dtype, (None, self.k))
        m = input.shape[0]
        self._check_m(m)
        return ip, m, m


AGKernel = AgGemm
GemmRS = GemmRs
GemmAllReduce = GemmAr
