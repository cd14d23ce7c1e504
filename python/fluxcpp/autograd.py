"""Tensor-parallel linear layers with autograd, built from the op pair (Megatron's column- and
row-parallel linear, FLUX's AGKernel / GemmRS / GemmAllReduce).

sequence_parallel (required, no default: the two modes take inputs that can have the same shape,
so a wrong guess would compute silently on the wrong rows):

sequence_parallel=True: activations split by rows between the layers.
ColumnParallelLinear: forward y = AllGather(x) @ w.T (AgGemm, keeping the gathered input);
backward dx = ReduceScatter(dy @ w) (GemmRs with transpose_weight: dy [m, n] is the K slice,
w [n, k] the [K, N] weight), dw = dy.T @ AllGather(x), db = sum of dy over rows.
RowParallelLinear: forward y = ReduceScatter(x @ w.T) (GemmRs); backward dY = AllGather(dy)
and dx = dY @ w (AgGemm with transpose_weight and gathered_input), dw = dY.T @ x.

sequence_parallel=False: activations replicated (every rank holds all rows; Megatron's f / g).
ColumnParallelLinear: forward y = x @ w.T, local (torch, or an AgGemm over the one-rank
`local_ctx`); backward dx = AllReduce(dy @ w), dw = dy.T @ x. RowParallelLinear: forward
y = sum over ranks of x @ w.T, + bias once, on every rank (GemmAr); backward dx = dy @ w and
dw = dy.T @ x, local (dy is replicated).

Every rank runs forward and backward in the same order (both passes are collective). Under
autograd forward is the layer's torch operator, whose registered backward is the above
(fluxcpp.torch_ops, also what torch.compile traces). Under torch.no_grad() /
torch.inference_mode() forward calls the op directly (compiled: as an operator),
writes into `out=` when given, and with packed=True computes on a fluxcpp.PackedWeight of the
weight, packed on first use and repacked when the weight changes in place (except large bf16
weights in prefill-sized calls: PACKED_MAX_ROWS, PACKED_MAX_BYTES)."""
import warnings

import torch

from ._base import Context
from ._checks import size
from .dense import AgGemm, AllReduce, GemmAr, GemmRs
from .packed import PackedWeight
from . import torch_ops


# With packed=True, a bf16 weight of more than PACKED_MAX_BYTES is read as the tensor itself in
# calls of PACKED_MAX_ROWS GEMM rows or more (measured, docs/benchmarks.md: at hidden 4096 and 512
# rows oneDNN's kernel on the packed layout ran 25 % slower than on the plain weight, which it
# copies into a blocking of its own per call; at smaller weights, in f32 and at decode sizes the
# packed weight is as fast or faster).
PACKED_MAX_ROWS = 128
PACKED_MAX_BYTES = 16 << 20


class _Parallel(torch.nn.Module):
    """weight [n, k]. sequence_parallel: forward op _fwd_op = _seq_ops[0](max_m, n, k),
    backward op _bwd_op = _seq_ops[1](max_m, k, n) with transpose_weight. Replicated: the
    subclass sets up its ops in _replicated_ops. Under autograd forward and backward are the
    layer's torch operator (fluxcpp.torch_ops: its forward and registered backward), taking the
    layer by its handle _key."""
    _seq_ops, _column = (), False

    def __init__(self, ctx, k, n, max_m, bias, dtype, sequence_parallel, packed):
        """k, n: (argument name, value) of the input and the output features."""
        super().__init__()
        where = self._where = type(self).__name__
        (k_name, k), (n_name, n) = k, n
        k, n = size(where, k_name, k, 1), size(where, n_name, n, 1)
        self._k_name = k_name
        self.max_m = size(where, "max_m", max_m)
        if not isinstance(ctx, Context):
            raise TypeError(f"{where}: ctx must be a fluxcpp.Context, got {type(ctx).__name__}")
        if not isinstance(sequence_parallel, bool):
            raise TypeError(f"{where}: sequence_parallel must be True (activations split by rows "
                            "between the layers) or False (every rank holds all rows), got "
                            f"{type(sequence_parallel).__name__} {sequence_parallel!r}")
        self.sequence_parallel, self.packed = sequence_parallel, bool(packed)
        if self.packed and dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"{where}: packed=True needs dtype torch.float32 or torch.bfloat16 "
                            f"(a PackedWeight), got {dtype}")
        self._ctx, self._W, self._k, self._n, self._dtype = ctx, ctx.world_size, k, n, dtype
        self._fwd_op = self._bwd_op = self._ar_op = self._pw = None
        self._pw_key, self._closed = None, False
        # A sequence-parallel column layer watches its outputs for a replicated input until one
        # call shows it is not (_watch_replicated).
        self._watching = self.sequence_parallel and self._column and self._W > 1
        self.weight = torch.nn.Parameter(torch.empty((n, k), dtype=dtype))
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        self.bias = torch.nn.Parameter(torch.zeros(n, dtype=dtype)) if bias else None
        if self.sequence_parallel:
            fwd_cls, bwd_cls = self._seq_ops
            self._fwd_op = fwd_cls(ctx, self.max_m, n, k, dtype)
            self._bwd_op = bwd_cls(ctx, self.max_m, k, n, dtype, transpose_weight=True)
            self._op_ctx = ctx
            self._bwd_key = torch_ops.handle(self._bwd_op)
        else:
            self._replicated_ops()
        self._key = torch_ops.handle(self)

    def _replicated_ops(self):
        raise NotImplementedError

    def _rows(self, x):
        """Replicated mode: x's rows, at most max_m."""
        m = x.shape[0]
        if m > self.max_m:
            raise ValueError(f"{self._where}.forward (sequence_parallel=False: input is all m "
                             f"rows): m={m} (from input's shape) exceeds max_m={self.max_m}")
        return m

    def _check_input(self, x, m=None):
        """x (and m, the rows of the whole sequence, when the caller states it) against the
        layer's mode and sizes, each error naming the layer and the option; on a failure the
        layer's collective forward op is entered with an invalid shape first, so the other ranks
        fail at once too (as the ops do)."""
        if self._closed:
            raise RuntimeError(f"{self._where}.forward: the layer is closed")
        try:
            if x.dim() != 2:
                raise ValueError(f"{self._where}.forward: input must be 2-D [rows, features], got "
                                 f"shape {list(x.shape)}")
            if x.dtype != self._dtype:
                raise TypeError(f"{self._where}.forward: input has dtype {x.dtype}; the layer was "
                                f"made with dtype={self._dtype}")
            rows, cols = x.shape
            if cols != self._k:
                raise ValueError(f"{self._where}.forward: input has {cols} columns, the layer "
                                 f"takes {self._k} ({self._k_name})")
            if m is not None:
                self._check_m(rows, size(f"{self._where}.forward", "m", m))
            if not self.sequence_parallel:
                self._rows(x)
            else:
                self._check_split(rows)
        except Exception as e:
            # Collective forwards only (the replicated column layer's forward is local). A rank
            # whose input fails here while its peers' passes also skips the backward AllReduce's
            # create below: the others then fail at its timeout, as for any asymmetric misuse.
            collective = self.sequence_parallel or isinstance(self, RowParallelLinear)
            if collective and self._fwd_op is not None:
                self._fwd_op._refuse(e)
            raise

    def _total_rows(self, rows):
        """m, the rows of the whole sequence, for an input of `rows` rows in the layer's mode."""
        return rows * self._W if self.sequence_parallel and self._column else rows

    def _check_m(self, rows, m):
        """The m the caller states against the input's rows (the same rule in both layers, both
        modes: a replicated input in a sequence-parallel column layer is gathered W times)."""
        if m == self._total_rows(rows):
            return
        if not self.sequence_parallel:
            raise ValueError(
                f"{self._where}.forward (sequence_parallel=False: input is all m rows, the same "
                f"on every rank): m={m} was passed, input has {rows} rows; if each rank holds its "
                "shard of the sequence, create the layer with sequence_parallel=True")
        if self._column:
            raise ValueError(
                f"{self._where}.forward (sequence_parallel=True: input is this rank's shard of the "
                f"sequence, gathered over W={self._W} ranks): m={m} was passed, but input's "
                f"{rows} rows x W={self._W} make m={rows * self._W}; if every rank holds all m "
                "rows (replicated activations), create the layer with sequence_parallel=False")
        raise ValueError(
            f"{self._where}.forward (sequence_parallel=True: input is all m rows, this rank's "
            f"columns; the output split by rows over W={self._W} ranks): m={m} was passed, input "
            f"has {rows} rows")

    def _input_fits(self, x, m=None):
        """Whether _check_input would pass x (no message: traced by torch.compile)."""
        if x.dim() != 2 or x.shape[1] != self._k or x.dtype != self._dtype:
            return False
        rows = x.shape[0]
        if m is not None and m != self._total_rows(rows):
            return False
        if not self.sequence_parallel:
            return rows <= self.max_m
        if self._column:
            return rows * self._W <= self.max_m
        return rows % self._W == 0 and rows <= self.max_m

    def _grad_op_create(self):
        """The replicated column-parallel backward's AllReduce, created by the first forward
        under autograd (collective)."""
        if self._ar_op is None:
            self._ar_op = AllReduce(self._ctx, self.max_m * self._k, self._dtype)

    def _grad_op(self, partial):
        """The replicated column-parallel backward's all-reduce of dx (a new tensor: an
        operator's output is never its input)."""
        if self._ar_op is None:
            raise RuntimeError(f"{self._where}: backward without an autograd forward")
        return self._ar_op(partial)

    def _forward(self, x, out, m):
        """x -> y (shapes in the class docstring). out= (the output's shape and dtype, contiguous)
        only under torch.no_grad() / torch.inference_mode(): the op writes into it. m (optional):
        the rows of the whole sequence as the caller knows them; given, an input whose rows do
        not make m in the layer's mode (e.g. all m rows passed to a sequence-parallel column
        layer, which would gather them W times) is a ValueError instead of a silent result."""
        x = x.contiguous()
        compiling = torch.compiler.is_compiling()  # traced by torch.compile: the operators
        if not compiling:
            self._check_input(x, m)
        else:
            if m is not None:  # not an int: raised at trace time
                m = size(f"{self._where}.forward", "m", m)
            if not self._input_fits(x, m):  # at trace time (shapes); the error itself at run
                return torch_ops.input_error(self, x, m)  # time, the peers told at once
        if not torch.is_grad_enabled():
            if compiling:
                return torch_ops.infer(self, x, out)
            y = self._infer(x, self._inference_weight(x), out)
        else:
            if out is not None:
                raise ValueError(f"{self._where}.forward: out= is for inference only (under "
                                 "torch.no_grad() or torch.inference_mode())")
            y = torch_ops.linear(self, x)
        if self._watching and m is None and not compiling:
            self._watch_replicated(y)
        return y

    def _watch_replicated(self, y):
        """A sequence-parallel column layer's output has W row blocks, one per rank's shard; when
        they are bitwise equal and hold distinct rows, every rank passed the same rows: most
        likely a replicated input (all m rows on every rank), which this mode gathers W times.
        Warns once (RuntimeWarning) and stops watching; stops too at the first call whose blocks
        differ (the input is sharded). Shards of one row each are not judged (identical
        single-token shards are common in decode); m= checks every call exactly."""
        rows = y.shape[0] // self._W
        if rows < 2:
            return
        first = y[:rows]
        if torch.equal(first[:1].expand_as(first), first):
            return  # constant rows (e.g. a warm-up with zeros): nothing to judge
        self._watching = False
        if all(torch.equal(first, y[r * rows:(r + 1) * rows]) for r in range(1, self._W)):
            warnings.warn(
                f"{self._where}.forward (sequence_parallel=True: input is this rank's shard of "
                f"the sequence, gathered over W={self._W} ranks): every rank passed the same "
                f"{rows} rows, so the output holds each row {self._W} times. If every rank holds "
                "all rows (replicated activations), create the layer with "
                "sequence_parallel=False; pass m= to have every call checked",
                RuntimeWarning, stacklevel=3)

    def _infer(self, x, w, out):
        return self._fwd_op(x, w, self.bias, out=out)

    def _inference_weight(self, x):
        """packed=True: the PackedWeight, except for a bf16 weight of more than PACKED_MAX_BYTES
        in a call of PACKED_MAX_ROWS GEMM rows or more, which reads the weight tensor."""
        if not self.packed:
            return self.weight
        gathered = self.sequence_parallel and isinstance(self, ColumnParallelLinear)
        rows = x.shape[0] * (self._W if gathered else 1)
        w = self.weight
        plain = (w.dtype == torch.bfloat16 and rows >= PACKED_MAX_ROWS
                 and w.numel() * w.element_size() > PACKED_MAX_BYTES)
        return w if plain else self.packed_weight()

    def packed_weight(self):
        """The fluxcpp.PackedWeight of the weight (packed=True): packed on first use, repacked
        when the weight changed in place since (its version counter or storage moved: optimizer
        steps, load_state_dict, copy_ under no_grad; a write through .data does not count —
        call repack() then; so does any change of a weight created under inference_mode, which
        has no version counter)."""
        w = self.weight
        key = (None if w.is_inference() else w._version, w.data_ptr())
        if self._pw is None:
            self._pw = PackedWeight(self._op_ctx, w.detach())
        elif key != self._pw_key:
            self._pw.update(w.detach())
        self._pw_key = key
        return self._pw

    def repack(self):
        """Repacks the weight now (after writes the version counter does not see)."""
        self._pw_key = None

    def close(self):
        """Collective: destroys the layer's ops (and its packed weight, which is local)."""
        for op in (self._fwd_op, self._bwd_op, self._ar_op, self._pw):
            if op is not None:
                op.close()
        self._fwd_op = self._bwd_op = self._ar_op = self._pw = None
        self._closed = True


class ColumnParallelLinear(_Parallel):
    """weight [out_features_shard, in_features] (this rank's output columns).

    sequence_parallel=True: x [m/W, in_features] (this rank's rows) -> y [m, out_features_shard]
    (all rows, this rank's output columns).
    sequence_parallel=False: x [m, in_features] (all rows, the same on every rank) -> y [m,
    out_features_shard]: a local GEMM, on torch, or on an AgGemm over `local_ctx` (a
    fluxcpp.Context of one rank, e.g. fluxcpp.Context.local(): oneDNN, and with packed=True a
    PackedWeight); its backward all-reduces dx (an AllReduce created by the first forward under
    autograd). m <= max_m in both modes."""

    def forward(self, x, *, out=None, m=None):  # here, so that a wrong call names this layer
        return self._forward(x, out, m)
    forward.__doc__ = _Parallel._forward.__doc__

    _seq_ops, _column = (AgGemm, GemmRs), True

    def __init__(self, ctx, in_features, out_features_shard, max_m, bias=False,
                 dtype=torch.float32, *, sequence_parallel, packed=False, local_ctx=None):
        if local_ctx is not None and (not isinstance(local_ctx, Context)
                                      or local_ctx.world_size != 1):
            raise ValueError(f"ColumnParallelLinear: local_ctx must be a fluxcpp.Context of one "
                             f"rank (fluxcpp.Context.local()), got {local_ctx!r}")
        if local_ctx is not None and sequence_parallel:
            raise ValueError("ColumnParallelLinear: local_ctx is for sequence_parallel=False")
        if packed and not sequence_parallel and local_ctx is None:
            raise ValueError("ColumnParallelLinear: packed=True with sequence_parallel=False "
                             "needs local_ctx (the local GEMM that takes a PackedWeight)")
        self._local_ctx = local_ctx
        super().__init__(ctx, ("in_features", in_features),
                         ("out_features_shard", out_features_shard), max_m, bias, dtype,
                         sequence_parallel, packed)

    def _check_split(self, rows):
        m = rows * self._W
        if m > self.max_m:
            raise ValueError(
                f"{self._where}.forward (sequence_parallel=True: input is this rank's rows, "
                f"gathered over W={self._W} ranks): {rows} rows x {self._W} = m={m} exceeds "
                f"max_m={self.max_m}; if every rank holds all rows (replicated activations), "
                "create the layer with sequence_parallel=False")

    def _replicated_ops(self):
        if self._local_ctx is not None:
            self._fwd_op = AgGemm(self._local_ctx, self.max_m, self._n, self._k, self._dtype)
        self._op_ctx = self._local_ctx

    def _local(self, x, w, b, out):
        """x @ w.T + b on this rank (w a tensor or, with local_ctx, a PackedWeight)."""
        self._rows(x)
        if self._fwd_op is not None:
            return self._fwd_op(x, w, b, out=out)
        if out is None:
            return torch.nn.functional.linear(x, w, b)
        if b is None:
            return torch.mm(x, w.t(), out=out)
        return torch.addmm(b, x, w.t(), out=out)

    def _infer(self, x, w, out):
        if self.sequence_parallel:
            return self._fwd_op(x, w, self.bias, out=out)
        return self._local(x, w, self.bias, out)


class RowParallelLinear(_Parallel):
    """weight [out_features, in_features_shard] (this rank's input columns); bias (the same on
    every rank) is added once.

    sequence_parallel=True: x [m, in_features_shard] (all rows, this rank's input columns) ->
    y [m/W, out_features] (this rank's rows of the sum over ranks), GemmRs.
    sequence_parallel=False: x [m, in_features_shard] -> y [m, out_features] on every rank (the
    sum over ranks, bitwise identical everywhere), GemmAr; any m <= max_m."""

    def forward(self, x, *, out=None, m=None):  # here, so that a wrong call names this layer
        return self._forward(x, out, m)
    forward.__doc__ = _Parallel._forward.__doc__

    _seq_ops = (GemmRs, AgGemm)

    def __init__(self, ctx, in_features_shard, out_features, max_m, bias=False,
                 dtype=torch.float32, *, sequence_parallel, packed=False):
        super().__init__(ctx, ("in_features_shard", in_features_shard),
                         ("out_features", out_features), max_m, bias, dtype, sequence_parallel,
                         packed)

    def _check_split(self, rows):
        what = (f"{self._where}.forward (sequence_parallel=True: input is all m rows, the "
                f"output split by rows over W={self._W} ranks): m={rows}")
        if rows % self._W:
            raise ValueError(f"{what} is not divisible by W; if every rank needs all rows of "
                             "the output (replicated activations), create the layer with "
                             "sequence_parallel=False")
        if rows > self.max_m:
            raise ValueError(f"{what} exceeds max_m={self.max_m}")

    def _replicated_ops(self):
        self._fwd_op = GemmAr(self._ctx, self.max_m, self._n, self._k, self._dtype)
        self._op_ctx = self._ctx
