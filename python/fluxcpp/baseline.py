"""Is a comparison with torch fair on this machine? What a benchmark prints before it compares
(docs/python.md, "Checking the baseline"): the CPU and its features, the load, the BLAS torch
uses and, for OpenBLAS, the kernel it picked; and, per shape and dtype, torch.mm's speed against
fluxcpp's GEMM engine (oneDNN) on the same cores. A torch.mm far below the engine (an OpenBLAS
that does not know the CPU falls back to its Prescott kernels: 4-5x slower in f32) makes every
ratio against torch measure torch's BLAS instead of fluxcpp: check() says so, and how to fix it.

    import fluxcpp.baseline as baseline
    print(baseline.describe())
    warn = baseline.check(torch.float32, m, n, k, threads)   # None: torch.mm is at speed"""
import ctypes
import os
import re
import time

import torch

# torch.mm below this fraction of the engine's speed at the same shape is flagged.
SLOW = 0.5
_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def cpu():
    """(model name, the features of _FEATURES it has, cores this process may use)."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, [x for x in _FEATURES if x in flags], len(os.sched_getaffinity(0))


def openblas_core():
    """The kernel OpenBLAS chose ("SkylakeX", "Haswell", "Prescott", ...), None without one."""
    for name in ("libopenblas.so.0", "libopenblasp-r0.3.21.so", "libopenblas.so"):
        try:
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_NOLOAD)
        except OSError:
            continue
        fn = getattr(lib, "openblas_get_corename", None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            return fn().decode()
    return None


def torch_blas():
    """The BLAS torch's CPU GEMMs call, from torch.__config__.show(): "mkl", "openblas
    (core X)", ..."""
    info = torch.__config__.show()
    m = re.search(r"BLAS_INFO=(\w+)", info)
    blas = m.group(1) if m else ("mkl" if "Math Kernel Library" in info else "unknown")
    if blas == "open":
        blas = "openblas"
    if blas == "openblas":
        core = openblas_core()
        blas += f" (core {core})" if core else ""
    return blas


def describe():
    """One line: CPU, features, cores, load, torch and its BLAS."""
    model, feats, cores = cpu()
    load = os.getloadavg()[0]
    return (f"{model}; {', '.join(feats) or 'no AVX2/AVX-512/AMX'}; {cores} cores usable; "
            f"load average {load:.2f}; torch {torch.__version__} with {torch_blas()}")


def _best_ms(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def gemm_speeds(dtype, m, n, k, threads, reps=3):
    """(torch.mm GFLOP/s, the engine's GFLOP/s) of [m, k] x [k, n] in `dtype` on `threads` cores,
    best of `reps` (one process: call it on every rank, or on one while the others wait)."""
    from . import Context, AgGemm
    x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t_torch = _best_ms(lambda: torch.mm(x, w.t()), reps)
    finally:
        torch.set_num_threads(before)
    local = Context.local(compute_threads=threads)
    try:
        op = AgGemm(local, max_m=m, n=n, k=k, input_dtype=dtype)
        try:
            t_engine = _best_ms(lambda: op(x, w), reps)
        finally:
            op.close()
    finally:
        local.close()
    flops = 2.0 * m * n * k / 1e6  # per ms -> GFLOP/s
    return flops / t_torch, flops / t_engine


def check(dtype, m, n, k, threads, reps=3):
    """None when torch.mm runs at least SLOW x the engine's speed at this shape; else a warning
    to print next to every ratio against torch that uses this dtype."""
    t, e = gemm_speeds(dtype, m, n, k, threads, reps)
    if t >= SLOW * e:
        return None
    blas = torch_blas()
    fix = ""
    if blas == "mkl" and "intel" not in cpu()[0].lower():
        fix = (" MKL runs kernels below this CPU's best on non-Intel CPUs; oneDNN (fluxcpp's "
               "engine, and torch's own for bf16) does not.")
    elif blas.startswith("openblas"):
        fix = (" OpenBLAS picked a kernel for an older CPU: set OPENBLAS_CORETYPE to this CPU's "
               "(e.g. SkylakeX for AVX-512, Haswell for AVX2) before starting Python.")
    return (f"torch.mm {str(dtype)[6:]} at {m}x{n}x{k} runs at {t:.0f} GFLOP/s, fluxcpp's GEMM "
            f"engine at {e:.0f} on the same {threads} core(s) ({blas}): ratios against torch "
            f"measure torch's BLAS here, not the communication.{fix}")
