"""fluxcpp's ops as torch operators (torch.library, namespace "fluxcpp"), so that torch.compile
traces models on ColumnParallelLinear / RowParallelLinear, and code calling the ops, without a
graph break (docs/python.md, "torch.compile and torch.library").

An op object or a layer holds C handles, which no operator argument can carry: each is passed as
an int, its handle(obj) in this process's registry (weak: an object freed leaves the registry;
handles are never reused), which torch.compile specialises as a constant.

Op operators (input / weight / bias tensors; fake implementations give the output's shape and
dtype from the op's create-time sizes):
  fluxcpp::all_gather(int op, Tensor input) -> Tensor                        AllGather
  fluxcpp::reduce_scatter(int op, Tensor input) -> Tensor                    ReduceScatter
  fluxcpp::all_reduce(int op, Tensor input) -> Tensor                        AllReduce
  fluxcpp::ag_gemm(int op, Tensor input, Tensor weight, Tensor? bias) -> Tensor      AgGemm
  fluxcpp::ag_gemm_gathered(int op, input, weight, bias?) -> (Tensor out, Tensor gathered_input)
  fluxcpp::gemm_rs(int op, Tensor input, Tensor weight, Tensor? bias) -> Tensor      GemmRs
  fluxcpp::gemm_ar(int op, Tensor input, Tensor weight, Tensor? bias) -> Tensor      GemmAr
Layer operators (int layer: the layer's handle): the layers' forward under autograd, one per
layer and mode, with their backward registered (register_autograd), which compiled code calls
(the eager path runs an autograd.Function of the same forward, setup and backward functions):
  fluxcpp::column_sp_linear(int layer, Tensor x, Tensor w, Tensor? b) -> (Tensor y, Tensor gathered)
  fluxcpp::row_sp_linear / column_rep_linear / row_rep_linear(int layer, x, w, b?) -> Tensor
  fluxcpp::grad_all_reduce(int layer, Tensor partial) -> Tensor   (the replicated column
      layer's backward AllReduce, created by its first forward under autograd)
  fluxcpp::input_error(int layer, Tensor x, int? m=None) -> Tensor   (compiled code, an input
      (or the m stated with it) that does not fit the layer, seen at trace time: raises the eager
      path's error at run time)
  fluxcpp::parallel_linear(int layer, Tensor x, Tensor w, Tensor? b) -> Tensor   (inference:
      the layer's no-grad forward, packed weights included; used under torch.compile only, the
      eager no-grad path calls the op itself), and fluxcpp::parallel_linear_out(int layer, x,
      w, b?, Tensor(a!) out) -> () for out=
Every operator is collective as its op is; the ranks call them in the same order."""
import itertools
import weakref
from typing import Optional

import torch
from torch import Tensor

_ops = torch.ops.fluxcpp  # the registered operators (below), called as _ops.<name>.default
_objects = weakref.WeakValueDictionary()
_next_key = itertools.count(1)


def handle(obj):
    """The int that stands for obj (a fluxcpp op or layer) in the operators' arguments; assigned
    on first call. Call it outside compiled code (the layers take theirs when created)."""
    key = obj.__dict__.get("_torch_handle")
    if key is None:
        key = next(_next_key)
        _objects[key] = obj
        obj.__dict__["_torch_handle"] = key
    return key


def lookup(key, where="fluxcpp"):
    """The object of a handle; RuntimeError naming the handle when it was freed or never given."""
    obj = _objects.get(key)
    if obj is None:
        raise RuntimeError(f"{where}: no fluxcpp op or layer has handle {key} (freed, or the "
                           "handle was not made by fluxcpp.torch_ops.handle in this process)")
    return obj


def _op(name, fn, fake, mutates_args=()):
    """The operator fluxcpp::name: implementation fn (its schema from fn's annotations, the
    handle a plain int, never symbolic), fake implementation fake."""
    schema = torch.library.infer_schema(fn, mutates_args=mutates_args).replace("SymInt ", "int ", 1)
    op = torch.library.custom_op(f"fluxcpp::{name}", fn, mutates_args=mutates_args, schema=schema)
    op.register_fake(fake)
    return op


def _rows(x):
    """x's rows and columns for a fake output (a tensor of another rank too: the operator's
    implementation raises the op's error for it at run time)."""
    return (x.shape[0] if x.dim() else 0), (x.shape[-1] if x.dim() else 0)


def _rows_times_w(op, x):
    return _rows(x)[0] * op._W


def _rows_over_w(op, x):
    return _rows(x)[0] // op._W


# ---- op operators ------------------------------------------------------------------------------

def _all_gather(op: int, input: Tensor) -> Tensor:
    return lookup(op, "fluxcpp::all_gather")(input)


def _reduce_scatter(op: int, input: Tensor) -> Tensor:
    return lookup(op, "fluxcpp::reduce_scatter")(input)


def _all_reduce(op: int, input: Tensor) -> Tensor:
    return lookup(op, "fluxcpp::all_reduce")(input)


def _ag_gemm(op: int, input: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    return lookup(op, "fluxcpp::ag_gemm")(input, weight, bias)


def _gathered(o, input, weight, bias):
    """AgGemm o's (out, gathered_input)."""
    gathered = input.new_empty((input.shape[0] * o._W, input.shape[1]))
    return o(input, weight, bias, gathered_input=gathered), gathered


def _ag_gemm_gathered(op: int, input: Tensor, weight: Tensor,
                      bias: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    return _gathered(lookup(op, "fluxcpp::ag_gemm_gathered"), input, weight, bias)


def _gemm_rs(op: int, input: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    return lookup(op, "fluxcpp::gemm_rs")(input, weight, bias)


def _gemm_ar(op: int, input: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    return lookup(op, "fluxcpp::gemm_ar")(input, weight, bias)


def _gemm_fake(rows):
    def fake(op, input, weight, bias):
        o = lookup(op)
        return input.new_empty((rows(o, input), o.n), dtype=o.output_dtype)
    return fake


def _ag_gemm_gathered_fake(op, input, weight, bias):
    o = lookup(op)
    m = _rows_times_w(o, input)
    return input.new_empty((m, o.n), dtype=o.output_dtype), input.new_empty((m, _rows(input)[1]))


all_gather = _op("all_gather", _all_gather,
                 lambda op, input: input.new_empty((_rows_times_w(lookup(op), input),
                                                    _rows(input)[1])))
reduce_scatter = _op("reduce_scatter", _reduce_scatter,
                     lambda op, input: input.new_empty((_rows_over_w(lookup(op), input),
                                                        _rows(input)[1])))
all_reduce = _op("all_reduce", _all_reduce, lambda op, input: torch.empty_like(input))
ag_gemm = _op("ag_gemm", _ag_gemm, _gemm_fake(_rows_times_w))
ag_gemm_gathered = _op("ag_gemm_gathered", _ag_gemm_gathered, _ag_gemm_gathered_fake)
gemm_rs = _op("gemm_rs", _gemm_rs, _gemm_fake(_rows_over_w))
gemm_ar = _op("gemm_ar", _gemm_ar, _gemm_fake(lambda o, x: _rows(x)[0]))


# ---- layer operators ---------------------------------------------------------------------------
# The layers' forward under autograd, one per mode (layer, sequence_parallel), each an operator
# with a registered backward (what torch.compile traces) and, for the eager path, an
# autograd.Function of the same forward, setup and backward (an operator's dispatch costs
# microseconds per call more: docs/python.md).

def _checked(layer, x, name, m=None):
    """The layer of a handle, after its input check: the eager path's errors (a closed layer, an
    input that does not fit) at run time, its peers told at once. Compiled code asked at trace
    time whether the input fits (its sizes are guarded) and took input_error if not."""
    lay = lookup(layer, f"fluxcpp::{name}")
    lay._check_input(x, m)
    return lay


def _layer_out(layer, x):
    """The layer's output [rows, n] for input x (both modes, both layers)."""
    rows = _rows(x)[0]
    if layer.sequence_parallel:
        rows = rows * layer._W if layer._column else rows // layer._W
    return x.new_empty((rows, layer._n))


def _column_sp(lay, x, w, b):
    """y = AllGather(x) @ w.T + b (AgGemm), and AllGather(x), kept for backward."""
    return _gathered(lay._fwd_op, x, w, b)


def _column_sp_fake(layer, x, w, b):
    out = _layer_out(lookup(layer), x)
    return out, x.new_empty((out.shape[0], _rows(x)[1]))


def _fwd_op(lay, x, w, b):
    """Row-parallel: GemmRs (sequence_parallel) or GemmAr."""
    return lay._fwd_op(x, w, b)


def _column_rep(lay, x, w, b):
    lay._grad_op_create()  # collective, on the first forward under autograd
    return lay._local(x, w, b, None)


def _grad_all_reduce(layer: int, partial: Tensor) -> Tensor:
    return lookup(layer, "fluxcpp::grad_all_reduce")._grad_op(partial)


def _parallel_linear(layer: int, x: Tensor, w: Tensor, b: Optional[Tensor]) -> Tensor:
    lay = _checked(layer, x, "parallel_linear")
    return lay._infer(x, lay._inference_weight(x), None)


def _layer_fake(layer, x, w, b):
    return _layer_out(lookup(layer), x)


def _input_error(layer: int, x: Tensor, m: Optional[int] = None) -> Tensor:
    """The layer's input error (compiled code: its forward saw at trace time that x, or the
    m stated with it, does not fit): raised at run time as in eager, its peers told at once."""
    _checked(layer, x, "input_error", m)
    raise AssertionError(f"fluxcpp::input_error: the input of shape {list(x.shape)} fits")


grad_all_reduce = _op("grad_all_reduce", _grad_all_reduce,
                      lambda layer, partial: torch.empty_like(partial))
parallel_linear = _op("parallel_linear", _parallel_linear, _layer_fake)
input_error = _op("input_error", _input_error,
                  lambda layer, x, m=None: _layer_out(lookup(layer), x))
input_error.register_autograd(lambda ctx, dy: (None, None, None))  # never reached: forward raises


def _parallel_linear_out(layer: int, x: Tensor, w: Tensor, b: Optional[Tensor],
                         out: Tensor) -> None:
    """parallel_linear into out (the layers' out=)."""
    lay = _checked(layer, x, "parallel_linear_out")
    lay._infer(x, lay._inference_weight(x), out)


parallel_linear_out = _op("parallel_linear_out", _parallel_linear_out,
                          lambda layer, x, w, b, out: None, mutates_args=("out",))


# ---- autograd: the layers' backward (docs/python.md, "Autograd") --------------------------------
# inputs (layer, x, w, b): needs_input_grad[1] is x's, [2] w's, [3] b's. Every rank asks for the
# same gradients (the same graph on every rank), so the collective ones run everywhere alike.

_IMPLS = {"gemm_rs": _gemm_rs, "ag_gemm_gathered": _ag_gemm_gathered,
          "grad_all_reduce": _grad_all_reduce}


def _call(ctx, name, *args):
    """An op of a backward: its operator when traced (compiled), its implementation in eager."""
    if getattr(ctx, "eager", False):
        return _IMPLS[name](*args)
    return getattr(_ops, name).default(*args)


def _setup(ctx, inputs, saved):
    layer, _, w, b = inputs
    ctx.save_for_backward(saved, w)
    ctx.layer, ctx.has_bias = layer, b is not None


def _save_x(ctx, inputs, output):
    _setup(ctx, inputs, inputs[1])


def _weight_grad(ctx, dy, x, w):
    return (dy.t() @ x).to(w.dtype) if ctx.needs_input_grad[2] else None


def _bias_grad(ctx, dy):
    return dy.sum(0) if ctx.has_bias and ctx.needs_input_grad[3] else None


def _column_sp_setup(ctx, inputs, output):
    _setup(ctx, inputs, output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)  # no zeros for the gathered input's gradient


def _column_sp_backward(ctx, dy, _):
    gathered, w = ctx.saved_tensors
    if dy is None:  # y took no part in the loss (on every rank alike)
        return None, None, None, None
    dy = dy.contiguous()
    bwd = lookup(ctx.layer)._bwd_key  # GemmRs(max_m, k, n, transpose_weight=True)
    dx = _call(ctx, "gemm_rs", bwd, dy, w, None) if ctx.needs_input_grad[1] else None
    return None, dx, _weight_grad(ctx, dy, gathered, w), _bias_grad(ctx, dy)


def _row_sp_backward(ctx, dy):
    x, w = ctx.saved_tensors
    dy = dy.contiguous()
    # dY = AllGather(dy), dx = dY @ w (AgGemm with transpose_weight and gathered_input); the bias
    # is added once to the reduced rows: its gradient is this rank's rows' sum, summed over ranks
    # by the caller's data-parallel reduction as for any replicated bias
    dx, dY = _call(ctx, "ag_gemm_gathered", lookup(ctx.layer)._bwd_key, dy, w, None)
    return None, (dx if ctx.needs_input_grad[1] else None), _weight_grad(ctx, dY, x, w), \
        _bias_grad(ctx, dy)


def _column_rep_backward(ctx, dy):
    x, w = ctx.saved_tensors
    dy = dy.contiguous()
    dx = (_call(ctx, "grad_all_reduce", ctx.layer, torch.mm(dy, w))
          if ctx.needs_input_grad[1] else None)
    return None, dx, _weight_grad(ctx, dy, x, w), _bias_grad(ctx, dy)


def _row_rep_backward(ctx, dy):
    """dy is replicated: dx = dy @ w, dw = dy.T @ x, db = sum of dy, all local."""
    x, w = ctx.saved_tensors
    dy = dy.contiguous()
    dx = torch.mm(dy, w) if ctx.needs_input_grad[1] else None
    return None, dx, _weight_grad(ctx, dy, x, w), _bias_grad(ctx, dy)


def _mode(name, forward, fake, setup, backward):
    """(operator fluxcpp::name with its backward, the eager autograd.Function of the same)."""
    def impl(layer: int, x: Tensor, w: Tensor, b: Optional[Tensor]):
        return forward(_checked(layer, x, name), x, w, b)
    impl.__annotations__["return"] = tuple[Tensor, Tensor] if fake is _column_sp_fake else Tensor
    op = _op(name, impl, fake)
    op.register_autograd(backward, setup_context=setup)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, layer, x, w, b):  # x checked by the layer's forward
            out = forward(lookup(layer, f"fluxcpp::{name}"), x, w, b)
            ctx.eager = True
            setup(ctx, (layer, x, w, b), out)
            return out

    Function.backward = staticmethod(backward)
    Function.__name__ = Function.__qualname__ = f"{name}_function"
    return getattr(_ops, name).default, Function.apply


# (column, sequence_parallel) -> (operator, Function.apply)
_LINEAR = {
    (True, True): _mode("column_sp_linear", _column_sp, _column_sp_fake, _column_sp_setup,
                        _column_sp_backward),
    (False, True): _mode("row_sp_linear", _fwd_op, _layer_fake, _save_x, _row_sp_backward),
    (True, False): _mode("column_rep_linear", _column_rep, _layer_fake, _save_x,
                         _column_rep_backward),
    (False, False): _mode("row_rep_linear", _fwd_op, _layer_fake, _save_x, _row_rep_backward),
}


def linear(layer, x):
    """The layer's forward under autograd on (handle, x, weight, bias): its operator in compiled
    code, the autograd.Function of the same in eager."""
    op, fn = _LINEAR[layer._column, layer.sequence_parallel]
    y = (op if torch.compiler.is_compiling() else fn)(layer._key, x, layer.weight, layer.bias)
    return y[0] if layer._column and layer.sequence_parallel else y


def input_error(layer, x, m=None):
    """The layer's forward for an input (or m) that does not fit (compiled code): raises at run
    time."""
    return _ops.input_error.default(layer._key, x, m)


def infer(layer, x, out):
    """The layer's no-grad forward as an operator (compiled code; the eager path calls the op
    itself); out= is filled in place, with the eager path's checks and messages. The replicated
    column-parallel layer on torch's GEMM (no local_ctx) is traced as that GEMM."""
    if (layer._column and not layer.sequence_parallel and layer._local_ctx is None
            and not layer._closed and out is None):
        return torch.nn.functional.linear(x, layer.weight, layer.bias)
    if out is None:
        return _ops.parallel_linear.default(layer._key, x, layer.weight, layer.bias)
    _ops.parallel_linear_out.default(layer._key, x, layer.weight, layer.bias, out)
    return out
