"""Argument checks done in Python before anything reaches C.

A tensor on a device other than the CPU, of the wrong dtype or with the wrong number of
dimensions is TypeError; one that is not contiguous, or whose shape disagrees with the op's
shapes, is ValueError. Each message names the op, the argument and the values.
"""
import torch

# torch dtype -> fluxcpp_dtype_t
DTYPES = {torch.float32: 0, torch.float64: 1, torch.bfloat16: 2}


def c_dtype(where, name, dtype):
    """The fluxcpp_dtype_t of a torch dtype (create arguments)."""
    try:
        return DTYPES[dtype]
    except (KeyError, TypeError):
        raise TypeError(f"{where}: {name}={dtype!r} is not one of torch.float32, torch.float64, "
                        "torch.bfloat16") from None


def _describe(t):
    return f"shape {list(t.shape)}, stride {list(t.stride())}"


def tensor(where, name, t, dtype, shape):
    """Checks t and returns its data pointer. `shape` is a tuple whose length is the required
    number of dimensions; an entry None matches any size."""
    # Fast path: a handful of attribute reads; any failure goes to _reject for the message.
    try:
        ok = t.dtype is dtype and t.is_cpu and t.is_contiguous()
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


def int_array(where, name, values, dtype, length):
    """A 1-D integer array argument (splits, counts) as (pointer, list of ints, keepalive).

    A tensor is checked like any other (no copy); a Python sequence is converted."""
    if isinstance(values, torch.Tensor):
        p = tensor(where, name, values, dtype, (length,))
        return p, values.tolist(), values
    try:
        vals = [int(v) for v in values]
    except TypeError:
        raise TypeError(f"{where}: {name} must be a {dtype} tensor or a sequence of ints, got "
                        f"{type(values).__name__}") from None
    if length is not None and len(vals) != length:
        raise ValueError(f"{where}: {name} has {len(vals)} entries, expected {length}")
    t = torch.tensor(vals, dtype=dtype)
    return t.data_ptr(), vals, t


def divisible(where, name, value, by, what):
    if by <= 0 or value % by != 0:
        raise ValueError(f"{where}: {name}={value} is not divisible by {what}={by}")
