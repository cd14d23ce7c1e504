"""Argument checks done in Python before anything reaches C.

A tensor on a device other than the CPU, of the wrong dtype or with the wrong number of
dimensions is TypeError; one that is not contiguous, or whose shape disagrees with the op's
shapes, is ValueError. A size or count that is not an integer is TypeError, one outside what the
C parameter holds (or below what C requires) is ValueError (size()). Each message names the op,
the argument and the values.
"""
import operator

import torch

# torch dtype -> fluxcpp_dtype_t, every value of the C enum. The ops take OP_DTYPES; the others
# are element types of the C ABI's local helpers (fluxcpp_reduce_blocks, fluxcpp_convert).
DTYPES = {torch.float32: 0, torch.float64: 1, torch.bfloat16: 2, torch.float16: 3, torch.int8: 4,
          torch.uint8: 5, torch.int16: 6, torch.int32: 7, torch.int64: 8, torch.bool: 9}
OP_DTYPES = {t: DTYPES[t] for t in (torch.float32, torch.float64, torch.bfloat16)}


class _Required:
    """The default of a required argument that gets a message of its own when missing."""

    def __repr__(self):
        return "<required>"


REQUIRED = _Required()
INT32_MAX = 2**31 - 1  # a C int
INT64_MAX = 2**63 - 1  # a C int64_t
UINT64_MAX = 2**64 - 1


def is_bool(value):
    """bool, numpy.bool_ or a bool tensor: __index__ would turn them into 0 / 1."""
    if isinstance(value, bool):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and str(dtype) in ("bool", "torch.bool")


def size(where, name, value, minimum=0, maximum=INT64_MAX):
    """A size, count or rank passed to C, as the Python int C receives: an int or an object with
    __index__ (a numpy integer), never bool, float, None or str (TypeError); within
    [minimum, maximum] (ValueError). maximum is INT64_MAX for an int64_t parameter, INT32_MAX for
    an int; minimum is 1 where C requires a positive value."""
    if type(value) is int:
        v = value
    else:
        try:
            if is_bool(value):
                raise TypeError
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"{where}: {name} must be an int, got {type(value).__name__} "
                            f"{value!r}") from None
    if v < minimum or v > maximum:
        raise ValueError(f"{where}: {name}={v} is out of range ({minimum} .. {maximum})")
    return v


def c_dtype(where, name, dtype):
    """The fluxcpp_dtype_t of a torch dtype (create arguments)."""
    try:
        return OP_DTYPES[dtype]
    except (KeyError, TypeError):
        raise TypeError(f"{where}: {name}={dtype!r} is not one of torch.float32, torch.float64, "
                        "torch.bfloat16") from None


_STRIDED = torch.strided


def _describe(t):
    return f"shape {list(t.shape)}, stride {list(t.stride())}"


def tensor(where, name, t, dtype, shape):
    """Checks t and returns its data pointer. `shape` is a tuple whose length is the required
    number of dimensions; an entry None matches any size."""
    # Fast path: a handful of attribute reads; any failure goes to _reject for the message.
    try:
        ok = t.layout is _STRIDED and t.dtype is dtype and t.is_cpu and t.is_contiguous()
    except AttributeError:
        ok = False
    if ok:
        s = t.shape
        if s == shape:
            return t.data_ptr()
        if len(s) == len(shape):
            for have, want in zip(s, shape):
                if want is not None and have != want:
                    break
            else:
                return t.data_ptr()
    _reject(where, name, t, dtype, shape)


def _reject(where, name, t, dtype, shape):
    """Raises the error for a tensor that failed the fast path: TypeError before ValueError."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout is not _STRIDED:  # sparse, mkldnn: no data pointer to hand to C
        raise TypeError(f"{where}: {name} has layout {t.layout}; fluxcpp takes dense tensors "
                        f"(torch.strided): pass {name}.to_dense()")
    if not t.is_cpu:
        raise TypeError(f"{where}: {name} is on device {t.device}; fluxcpp takes CPU tensors")
    if t.dtype is not dtype:
        raise TypeError(f"{where}: {name} has dtype {t.dtype}, expected {dtype}")
    s = t.shape
    if len(s) != len(shape):
        raise TypeError(f"{where}: {name} has {len(s)} dimensions (shape {list(s)}), expected "
                        f"{len(shape)} ({_shape_text(shape)})")
    if not t.is_contiguous():
        raise ValueError(f"{where}: {name} is not contiguous ({_describe(t)}); pass "
                         f"{name}.contiguous() (a .t() or a slice of columns is a strided view)")
    raise ValueError(f"{where}: {name} has shape {list(s)}, expected {_shape_text(shape)}")


def optional(where, name, t, dtype, shape):
    """As tensor(), for an argument that may be None (then the pointer is None)."""
    if t is None:
        return None
    return tensor(where, name, t, dtype, shape)


def _shape_text(shape):
    return "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"


def int_list(where, name, values, expected, minimum=0, maximum=INT64_MAX):
    """A sequence of sizes (splits, ranks) as a list of Python ints, each checked by size()
    (named name[i]); anything but a sequence, str and bytes included, is TypeError saying that
    name must be `expected`."""
    try:
        if isinstance(values, (str, bytes)):
            raise TypeError
        items = list(values)
    except TypeError:
        raise TypeError(f"{where}: {name} must be {expected}, got "
                        f"{type(values).__name__}") from None
    return [size(where, f"{name}[{i}]", v, minimum, maximum) for i, v in enumerate(items)]


def int_array(where, name, values, dtype, length):
    """A 1-D integer array argument (splits, counts) as (pointer, list of ints, keepalive).

    A tensor is checked like any other (no copy); a Python sequence is converted."""
    if isinstance(values, torch.Tensor):
        p = tensor(where, name, values, dtype, (length,))
        return p, values.tolist(), values
    vals = int_list(where, name, values, f"a {dtype} tensor or a sequence of ints")
    if length is not None and len(vals) != length:
        raise ValueError(f"{where}: {name} has {len(vals)} entries, expected {length}")
    t = torch.tensor(vals, dtype=dtype)
    return t.data_ptr(), vals, t


def output(where, name, t, dtype, shape):
    """An output argument as (tensor, pointer): None allocates one of `shape` (every entry a
    size), anything else is checked as tensor() checks it."""
    if t is None:
        t = torch.empty(shape, dtype=dtype)
        return t, t.data_ptr()
    return t, tensor(where, name, t, dtype, shape)


def divisible(where, name, value, by, what):
    if by <= 0 or value % by != 0:
        raise ValueError(f"{where}: {name}={value} is not divisible by {what}={by}")
