"""fluxcpp_packed_weight: a weight packed once into the GEMM engine's layout (inference)."""
import ctypes

import torch

from . import _lib
from ._base import Context
from ._checks import c_dtype


class PackedWeight:
    """A copy of `weight` ([n, k], or [k, n] when transpose_weight; float32 or bfloat16, CPU,
    contiguous) in the layout the GEMM engine computes on, for AgGemm and GemmRs forwards that
    run call after call on the same weight (decode: 1.5-3x faster GEMMs). A snapshot: the ops
    compute with the weight as it was when packed or last update()d; it never reads the tensor
    afterwards. Local (not collective); packed for the ops of `ctx` (its compute threads' column
    slabs too). Close it (or use `with`) to free it."""

    def __init__(self, ctx, weight, transpose_weight=False):
        where = "PackedWeight"
        if not isinstance(ctx, Context):
            raise TypeError(f"{where}: ctx must be a fluxcpp.Context, got {type(ctx).__name__}")
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"{where}: weight must be a torch.Tensor, got {type(weight).__name__}")
        if weight.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"{where}: weight dtype {weight.dtype} cannot be packed "
                            "(torch.float32 or torch.bfloat16)")
        if weight.dim() != 2 or not weight.is_cpu or not weight.is_contiguous():
            raise ValueError(f"{where}: weight must be a 2-D contiguous CPU tensor, got shape "
                             f"{list(weight.shape)} on {weight.device}")
        self.dtype = weight.dtype
        self.transpose_weight = bool(transpose_weight)
        self.shape = tuple(weight.shape)
        self.n, self.k = (self.shape[1], self.shape[0]) if self.transpose_weight else self.shape
        h = ctypes.c_void_p()
        s = _lib.fn("fluxcpp_packed_weight_create")(
            ctx._require(where), c_dtype(where, "dtype", self.dtype), weight.data_ptr(), self.n, self.k,
            int(self.transpose_weight), ctypes.byref(h))
        if s:
            _lib.raise_status(s)
        self._handle = h.value

    def update(self, weight):
        """Repacks from `weight` (same dtype and shape)."""
        if (not isinstance(weight, torch.Tensor) or weight.dtype is not self.dtype
                or tuple(weight.shape) != self.shape or not weight.is_contiguous()):
            raise ValueError(f"PackedWeight.update: weight must be a contiguous {self.dtype} tensor "
                             f"of shape {list(self.shape)}")
        s = _lib.fn("fluxcpp_packed_weight_update")(self.handle(), weight.data_ptr())
        if s:
            _lib.raise_status(s)

    def handle(self):
        if not self._handle:
            raise ValueError("PackedWeight: used after close()")
        return self._handle

    def matches(self, where, dtype, n, k, transpose_weight):
        """ValueError naming the op unless this packed weight fits it."""
        if (self.dtype, self.n, self.k, self.transpose_weight) != (dtype, n, k, transpose_weight):
            raise ValueError(
                f"{where}: the packed weight ({self.dtype}, n={self.n}, k={self.k}, "
                f"transpose_weight={self.transpose_weight}) does not match the op ({dtype}, n={n}, "
                f"k={k}, transpose_weight={transpose_weight})")
        return self.handle()

    def close(self):
        if getattr(self, "_handle", None):
            _lib.fn("fluxcpp_packed_weight_destroy")(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
