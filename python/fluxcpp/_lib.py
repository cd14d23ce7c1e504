"""Loading libfluxcpp and declaring its C ABI (include/fluxcpp/fluxcpp.h) for ctypes.

The library is found, in order: the FLUXCPP_LIBRARY environment variable (a path), the path
written by the build or the install next to this file (_config.py), then the loader's search
path (ctypes.util.find_library). Symbols are bound on first use, so a library that lacks an
op fails only when that op is constructed, with fluxcpp.Unavailable.
"""
import ctypes
import ctypes.util
import enum
import os

from . import _config

c_void_p = ctypes.c_void_p
c_int = ctypes.c_int
c_i64 = ctypes.c_int64
c_u64 = ctypes.c_uint64
c_double = ctypes.c_double
c_size_t = ctypes.c_size_t
P = c_void_p  # every pointer argument: passed as an address (int) or None


class Status(enum.IntEnum):
    """fluxcpp_status_t, named without the FLUXCPP_ / FLUXCPP_ERROR_ prefix."""
    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_USAGE = 2
    SYSTEM = 3
    MPI = 4
    TIMEOUT = 5
    INTERNAL = 6


class Error(RuntimeError):
    """A failed C call: .status (a Status) and .message (fluxcpp_last_error's text)."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.message = message
        name = status.name if isinstance(status, Status) else str(status)
        super().__init__(f"{name}: {message}")


class Unavailable(Error, NotImplementedError):
    """The loaded libfluxcpp lacks the C symbols of an op (a library built before the op)."""


class _ConfigStruct(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("ranks_per_node", c_int), ("timeout_s", c_double),
                ("compute_threads", c_int), ("comm_threads", c_int)]


def _library_path():
    env = os.environ.get("FLUXCPP_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    if getattr(_config, "LIBRARY", None):
        path = os.path.normpath(os.path.join(here, _config.LIBRARY))
        if os.path.exists(path):
            return path
    found = ctypes.util.find_library("fluxcpp")
    if found:
        return found
    raise ImportError("fluxcpp: libfluxcpp not found; set FLUXCPP_LIBRARY to its path "
                      "(e.g. build/libfluxcpp.so), or import the package from the build tree "
                      "(build/python) or from an install")


def _load():
    path = _library_path()
    # MPI's libraries must be global for Open MPI's plugins: mpi4py loads them that way, and so
    # does this (libfluxcpp pulls in libmpi).
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path


LIB, LIBRARY_PATH = _load()

# (restype is always the status int unless given) name -> argtypes
_SIGNATURES = {
    "fluxcpp_status_string": ([c_int], ctypes.c_char_p),
    "fluxcpp_last_error": ([], ctypes.c_char_p),
    "fluxcpp_version": ([], c_int),
    "fluxcpp_context_create": ([None, P, P],),  # MPI_Comm type set by the context module
    "fluxcpp_context_destroy": ([P],),
    "fluxcpp_context_info": ([P, P, P, P, P],),
    # all_gather, ag_gemm, reduce_scatter, gemm_rs
    "fluxcpp_all_gather_create": ([P, c_i64, c_i64, c_int, P],),
    "fluxcpp_all_gather_forward": ([P, P, c_i64, P],),
    "fluxcpp_ag_gemm_create": ([P, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],),
    "fluxcpp_ag_gemm_forward": ([P, P, c_i64, P, P, P, P],),
    "fluxcpp_reduce_scatter_create": ([P, c_i64, c_i64, c_int, P],),
    "fluxcpp_reduce_scatter_forward": ([P, P, c_i64, P],),
    "fluxcpp_gemm_rs_create": ([P, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],),
    "fluxcpp_gemm_rs_forward": ([P, P, c_i64, P, P, P],),
    "fluxcpp_packed_weight_create": ([P, c_int, P, c_i64, c_i64, c_int, P],),
    "fluxcpp_packed_weight_update": ([P, P],),
    "fluxcpp_packed_weight_destroy": ([P],),
    "fluxcpp_ag_gemm_forward_packed": ([P, P, c_i64, P, P, P, P],),
    "fluxcpp_gemm_rs_forward_packed": ([P, P, c_i64, P, P, P],),
    # all-to-all family and Ulysses
    "fluxcpp_all_to_all_single_create": ([P, c_i64, c_i64, c_int, P],),
    "fluxcpp_all_to_all_single_forward": ([P, P, P, P, P],),
    "fluxcpp_a2a_gemm_create": ([P, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],),
    "fluxcpp_a2a_gemm_forward": ([P, P, c_i64, P, P, P, P],),
    "fluxcpp_gemm_a2a_transpose_create": ([P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, P],),
    "fluxcpp_gemm_a2a_transpose_forward": ([P, P, c_i64, c_i64, P, P, P],),
    "fluxcpp_a2a_transpose_gemm_create": ([P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, P],),
    "fluxcpp_a2a_transpose_gemm_forward": ([P, P, c_i64, c_i64, P, P, P, P],),
    # local ops
    "fluxcpp_inplace_cast": ([P, P, c_i64, c_int, c_int],),
    "fluxcpp_moe_layout": ([P, c_i64, c_i64, c_i64, c_i64, P, P, P, P, P, P],),
    "fluxcpp_grouped_gemm_create": ([P, c_i64, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],),
    "fluxcpp_grouped_gemm_forward": ([P, P, P, P, P, P],),
    # MoE under expert / tensor parallelism
    "fluxcpp_moe_dispatch_create": ([P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, P],),
    "fluxcpp_moe_dispatch_forward": ([P, P, c_i64, P, P, P, P, P, P, P],),
    "fluxcpp_moe_combine_create": ([P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, P],),
    "fluxcpp_moe_combine_forward": ([P, P, c_i64, c_i64, P, P, P],),
    "fluxcpp_ag_scatter_grouped_gemm_create":
        ([P, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],),
    "fluxcpp_ag_scatter_grouped_gemm_forward": ([P, P, c_i64, P, P, P, P, P, P],),
    "fluxcpp_grouped_gemm_gather_rs_create":
        ([P, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],),
    "fluxcpp_grouped_gemm_gather_rs_forward": ([P, P, c_i64, P, P, P, P, P],),
    # async_send_recv
    "fluxcpp_async_send_recv_create": ([P, c_i64, c_i64, c_int, c_int, c_int, P, P],),
    "fluxcpp_async_send_recv_send": ([P, c_int, P, c_i64, P],),
    "fluxcpp_async_send_recv_isend": ([P, c_int, P, c_i64, P],),
    "fluxcpp_async_send_recv_send_wait": ([P, c_int, c_u64],),
    "fluxcpp_async_send_recv_send_test": ([P, c_int, c_u64, P],),
    "fluxcpp_async_send_recv_recv": ([P, c_int, P, c_i64, P],),
    "fluxcpp_async_send_recv_probe": ([P, c_int, P],),
}
# Every op with a handle also has _destroy(op) and, with zero-copy input, _input_buffer(op, &p).
for _op in ("all_gather", "ag_gemm", "reduce_scatter", "gemm_rs", "all_to_all_single", "a2a_gemm",
            "gemm_a2a_transpose", "a2a_transpose_gemm", "grouped_gemm", "moe_dispatch",
            "moe_combine", "ag_scatter_grouped_gemm", "grouped_gemm_gather_rs", "async_send_recv"):
    _SIGNATURES[f"fluxcpp_{_op}_destroy"] = ([P],)
for _op in ("all_gather", "ag_gemm", "all_to_all_single", "a2a_gemm"):
    _SIGNATURES[f"fluxcpp_{_op}_input_buffer"] = ([P, P],)

_bound = {}


def has(name):
    """Whether the loaded library exports fluxcpp_<name>."""
    return hasattr(LIB, name)


def fn(name, argtypes_override=None):
    """The C function `name` with its signature; Unavailable if the library lacks it.

    Bound through a CFUNCTYPE prototype (which, like a CDLL function, releases the GIL during
    the call); its argument conversion measured faster than setting argtypes on the function."""
    f = _bound.get(name)
    if f is not None:
        return f
    sig = _SIGNATURES[name]
    argtypes = argtypes_override if argtypes_override is not None else sig[0]
    proto = ctypes.CFUNCTYPE(sig[1] if len(sig) > 1 else c_int, *argtypes)
    try:
        f = proto((name, LIB))
    except AttributeError:
        raise Unavailable(Status.INVALID_USAGE,
                          f"{name} is not in {LIBRARY_PATH} (a libfluxcpp built before this op; "
                          "rebuild fluxcpp from a source tree that has it)") from None
    _bound[name] = f
    return f


def last_error():
    return fn("fluxcpp_last_error")().decode("utf-8", "replace")


def raise_status(status, extra=None):
    """Raise fluxcpp.Error for a failed call (status != 0) with fluxcpp_last_error's text."""
    err = Error(status, last_error())
    if extra:
        for k, v in extra.items():
            setattr(err, k, v)
    raise err


def version():
    """fluxcpp_version(): major*10000 + minor*100 + patch."""
    return fn("fluxcpp_version")()
