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
                ("compute_threads", c_int), ("comm_threads", c_int), ("ranks_per_host", c_int)]


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

# The C ABI as ctypes signatures, one entry per C object and one per plain function; checked
# against include/fluxcpp/fluxcpp.h by tests/python/test_signatures.py (python.signatures).
# Argument lists are the C ones in order: a handle or any pointer is P, an enum (dtype) or int
# is c_int, int64_t is c_i64. The return type is fluxcpp_status_t (c_int) unless given.

# Each object with a handle (the context, packed weights and every op): fluxcpp_<name>_<fn> for
# each fn listed, its handle first, and fluxcpp_<name>_destroy(handle), which every one has.
# A new op is one entry here: its create (context, create arguments, out handle) and forward,
# plus input_buffer (handle, void**) when its input is zero-copy.
_OBJECTS = {
    "context": dict(create=[None, P, P],  # MPI_Comm: its ctypes type is set by _base.Context
                    create_from_id=[P, c_int, c_int, P, P],
                    create_from_store=[P, c_int, c_int, P, P], info=[P, P, P, P, P]),
    "packed_weight": dict(create=[P, c_int, P, c_i64, c_i64, c_int, P], update=[P, P]),
    # all_gather, ag_gemm, reduce_scatter, gemm_rs, all_reduce, gemm_ar
    "all_gather": dict(create=[P, c_i64, c_i64, c_int, P], forward=[P, P, c_i64, P],
                       input_buffer=[P, P]),
    "all_reduce": dict(create=[P, c_i64, c_int, P], forward=[P, P, c_i64, P],
                       input_buffer=[P, P]),
    "ag_gemm": dict(create=[P, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],
                    forward=[P, P, c_i64, P, P, P, P], forward_packed=[P, P, c_i64, P, P, P, P],
                    input_buffer=[P, P]),
    "reduce_scatter": dict(create=[P, c_i64, c_i64, c_int, P], forward=[P, P, c_i64, P]),
    "gemm_rs": dict(create=[P, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],
                    forward=[P, P, c_i64, P, P, P], forward_packed=[P, P, c_i64, P, P, P]),
    "gemm_ar": dict(create=[P, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],
                    forward=[P, P, c_i64, P, P, P], forward_packed=[P, P, c_i64, P, P, P]),
    # all-to-all family and Ulysses
    "all_to_all_single": dict(create=[P, c_i64, c_i64, c_int, P], forward=[P, P, P, P, P],
                              input_buffer=[P, P]),
    "a2a_gemm": dict(create=[P, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],
                     forward=[P, P, c_i64, P, P, P, P], input_buffer=[P, P]),
    "gemm_a2a_transpose": dict(create=[P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, P],
                               forward=[P, P, c_i64, c_i64, P, P, P]),
    "a2a_transpose_gemm": dict(create=[P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, P],
                               forward=[P, P, c_i64, c_i64, P, P, P, P]),
    # local
    "grouped_gemm": dict(create=[P, c_i64, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],
                         forward=[P, P, P, P, P, P]),
    # MoE under expert / tensor parallelism
    "moe_dispatch": dict(create=[P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, P],
                         forward=[P, P, c_i64, P, P, P, P, P, P, P]),
    "moe_combine": dict(create=[P, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, P],
                        forward=[P, P, c_i64, c_i64, P, P, P]),
    "ag_scatter_grouped_gemm": dict(
        create=[P, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],
        forward=[P, P, c_i64, P, P, P, P, P, P]),
    "grouped_gemm_gather_rs": dict(
        create=[P, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_int, c_int, c_int, P],
        forward=[P, P, c_i64, P, P, P, P, P]),
    # point to point
    "async_send_recv": dict(create=[P, c_i64, c_i64, c_int, c_int, c_int, P, P],
                            send=[P, c_int, P, c_i64, P], isend=[P, c_int, P, c_i64, P],
                            send_wait=[P, c_int, c_u64], send_test=[P, c_int, c_u64, P],
                            send_ready=[P, c_int, P],
                            recv=[P, c_int, P, c_i64, P], probe=[P, c_int, P]),
}
# Plain functions: name -> (argtypes, restype).
_FUNCTIONS = {
    "fluxcpp_status_string": ([c_int], ctypes.c_char_p),
    "fluxcpp_last_error": ([], ctypes.c_char_p),
    "fluxcpp_version": ([], c_int),
    "fluxcpp_refuse_next_call": ([ctypes.c_char_p], c_int),
    "fluxcpp_get_unique_id": ([P], c_int),
    "fluxcpp_context_share": ([P, P], c_int),
    "fluxcpp_inplace_cast": ([P, P, c_i64, c_int, c_int], c_int),
    "fluxcpp_reduce_blocks": ([c_int, c_int, P, c_int, c_i64, c_int, P], c_int),
    "fluxcpp_convert": ([P, c_int, P, c_int, c_i64], c_int),
    "fluxcpp_moe_layout": ([P, c_i64, c_i64, c_i64, c_i64, P, P, P, P, P, P], c_int),
}


def _signatures():
    """Every C function Python may call: name -> (argtypes, restype)."""
    sigs = dict(_FUNCTIONS)
    for obj, fns in _OBJECTS.items():
        for f, argtypes in dict(fns, destroy=[P]).items():
            sigs[f"fluxcpp_{obj}_{f}"] = (argtypes, c_int)
    return sigs


_SIGNATURES = _signatures()

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
    argtypes, restype = _SIGNATURES[name]
    if argtypes_override is not None:
        argtypes = argtypes_override
    proto = ctypes.CFUNCTYPE(restype, *argtypes)
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


def checked(status, value=None):
    """value, once a C call returned status: fluxcpp.Error (raise_status) unless it is 0."""
    if status:
        raise_status(status)
    return value


def version():
    """fluxcpp_version(): major*10000 + minor*100 + patch."""
    return fn("fluxcpp_version")()
