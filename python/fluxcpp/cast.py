"""inplace_cast (FLUX InplaceCast): f32 <-> bf16 and f64 <-> f32 over the same memory."""
import torch

from . import _lib
from ._base import Context
from ._checks import OP_DTYPES, c_dtype

_PAIRS = {(torch.float32, torch.bfloat16), (torch.float64, torch.float32),
          (torch.bfloat16, torch.float32), (torch.float32, torch.float64)}


def inplace_cast(t, dtype, ctx=None):
    """Converts t's elements to `dtype` in place and returns a tensor of `dtype` and t's shape
    over t's memory (t itself then holds the converted bytes). Narrowing (f32 -> bf16,
    f64 -> f32) uses the first half of t's bytes; widening (bf16 -> f32, f32 -> f64) needs t's
    storage to hold the result from t's first element (ValueError otherwise). ctx: None (this
    thread) or a fluxcpp.Context (its compute threads help)."""
    where = "inplace_cast"
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: t must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cpu:
        raise TypeError(f"{where}: t is on device {t.device}; fluxcpp takes CPU tensors")
    src = t.dtype
    if src not in OP_DTYPES:
        raise TypeError(f"{where}: t has dtype {src}; pairs are f32->bf16, f64->f32, bf16->f32, "
                        "f32->f64")
    c_dtype(where, "dtype", dtype)
    if (src, dtype) not in _PAIRS:
        raise TypeError(f"{where}: {src} -> {dtype} is not a supported pair (f32->bf16, "
                        "f64->f32, bf16->f32, f32->f64)")
    if not t.is_contiguous():
        raise ValueError(f"{where}: t is not contiguous (shape {list(t.shape)}, stride "
                         f"{list(t.stride())})")
    if ctx is not None and not isinstance(ctx, Context):
        raise TypeError(f"{where}: ctx must be a fluxcpp.Context or None")
    count = t.numel()
    in_size = t.element_size()
    out_size = torch.empty(0, dtype=dtype).element_size()
    storage = t.storage().untyped()
    offset = t.storage_offset() * in_size
    if offset + count * out_size > storage.nbytes():
        raise ValueError(f"{where}: widening {count} elements {src} -> {dtype} needs "
                         f"{count * out_size} bytes from t's start; its storage has "
                         f"{storage.nbytes() - offset}")
    if offset % out_size:
        raise ValueError(f"{where}: t starts at byte {offset} of its storage, not aligned for "
                         f"{dtype}")
    h = None if ctx is None else ctx._require(where)
    if count:
        s = _lib.fn("fluxcpp_inplace_cast")(h, t.data_ptr(), count, OP_DTYPES[src],
                                            OP_DTYPES[dtype])
        if s:
            _lib.raise_status(s)
    raw = torch.empty(0, dtype=torch.uint8).set_(storage)
    return raw[offset:offset + count * out_size].view(dtype).view(t.shape)
