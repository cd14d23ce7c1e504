"""Is a comparison with torch fair on this machine? What a benchmark prints before it compares
(docs/python.md, "Checking the baseline"): the CPU and its features, the load, the BLAS torch
uses and, for OpenBLAS, the kernel it picked; and, per shape and dtype, torch.mm's speed against
fluxcpp's GEMM engine (oneDNN) on the same cores. A torch.mm far below the engine (an OpenBLAS
that does not know the CPU falls back to its Prescott kernels: 4-5x slower in f32) makes every
ratio against torch.mm measure torch's BLAS instead of fluxcpp: check() says so, and how to fix
it; TorchGemm picks torch's fastest GEMM at the shape (torch.mm, or torch's own oneDNN linear
where torch.mm is slow), the baseline a fair comparison uses.

    import fluxcpp.baseline as baseline
    print(baseline.describe())
    warn = baseline.check(torch.float32, m, n, k, threads)   # None: torch.mm is at speed
    mm = baseline.TorchGemm(torch.float32, m, n, k, threads)  # mm.name, mm.warning
    y = mm.bind(w)(x)                                        # x @ w.T, torch at its best"""
import ctypes
import os
import re
import time

import torch

# torch.mm below this fraction of the engine's speed at the same shape is flagged.
SLOW = 0.5
# TorchGemm takes torch's oneDNN linear over torch.mm when it is this much faster.
FASTER = 1.2
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
    t_torch = _best_gflops(lambda x, w: (lambda a, wt=w.t(): torch.mm(a, wt)), dtype, m, n, k,
                           threads, reps)
    x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
    local = Context.local(compute_threads=threads)
    try:
        op = AgGemm(local, max_m=m, n=n, k=k, input_dtype=dtype)
        try:
            t_engine = _best_ms(lambda: op(x, w), reps)
        finally:
            op.close()
    finally:
        local.close()
    return t_torch, 2.0 * m * n * k / 1e6 / t_engine


def onednn_mm(w):
    """x -> x @ w.T through torch's own oneDNN linear (torch.utils.mkldnn's MkldnnLinear: the
    weight kept in oneDNN's layout, the input converted per call), for w [n, k]."""
    wm = w.to_mkldnn()
    return lambda x: torch._C._nn.mkldnn_linear(x.to_mkldnn(), wm).to_dense()


class TorchGemm:
    """torch's fastest GEMM x [m, k] @ w.T at a shape on this machine, the baseline a fair
    comparison uses: torch.mm, or torch's own oneDNN linear (onednn_mm) where that is FASTER x
    quicker (MKL on a non-Intel CPU, an OpenBLAS that does not know the CPU). name says which,
    note (None for torch.mm) why; warning (None when the baseline runs at least SLOW x fluxcpp's
    engine) says the baseline is still slow, as check() does.

        mm = baseline.TorchGemm(torch.float32, m, n, k, threads)
        f = mm.bind(w)       # x -> x @ w.T
    """

    def __init__(self, dtype, m, n, k, threads, reps=3):
        t, e = gemm_speeds(dtype, m, n, k, threads, reps)
        self.name, self.note, self.gflops, self.warning = "torch.mm", None, t, None
        try:
            d = _best_gflops(lambda x, w: onednn_mm(w), dtype, m, n, k, threads, reps)
        except RuntimeError:  # a torch built without oneDNN: torch.mm it is
            d = 0.0
        if d > FASTER * t:
            self.name, self.gflops = "torch oneDNN linear", d
            self.note = (f"torch.mm {str(dtype)[6:]} at {m}x{n}x{k} runs at {t:.0f} GFLOP/s "
                         f"({torch_blas()}), torch's own oneDNN linear (torch.utils.mkldnn) at "
                         f"{d:.0f}, fluxcpp's engine at {e:.0f}: the comparison uses torch's "
                         "oneDNN linear")
        if self.gflops < SLOW * e:
            self.warning = _slow(dtype, m, n, k, threads, self.gflops, e)

    def bind(self, w):
        """x -> x @ w.T on this baseline."""
        if self.name == "torch.mm":
            wt = w.t()
            return lambda x: torch.mm(x, wt)
        return onednn_mm(w)


def _best_gflops(make, dtype, m, n, k, threads, reps):
    """GFLOP/s of make(x, w)(x), best of reps, on `threads` cores."""
    x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fn = make(x, w)
        return 2.0 * m * n * k / 1e6 / _best_ms(lambda: fn(x), reps)
    finally:
        torch.set_num_threads(before)


def _slow(dtype, m, n, k, threads, t, e):
    """check()'s warning for a torch.mm at t GFLOP/s against the engine's e."""
    blas = torch_blas()
    fix = ""
    if blas == "mkl" and "intel" not in cpu()[0].lower():
        fix = (" MKL runs kernels below this CPU's best on non-Intel CPUs (its environment "
               "switches do not change it); oneDNN (fluxcpp's engine, and torch's own for bf16) "
               "does not.")
    elif blas.startswith("openblas"):
        fix = (" OpenBLAS picked a kernel for an older CPU: set OPENBLAS_CORETYPE to this CPU's "
               "(e.g. SkylakeX for AVX-512, Haswell for AVX2) before starting Python.")
    return (f"torch.mm {str(dtype)[6:]} at {m}x{n}x{k} runs at {t:.0f} GFLOP/s, fluxcpp's GEMM "
            f"engine at {e:.0f} on the same {threads} core(s) ({blas}): ratios against torch.mm "
            f"measure torch's BLAS here, not the communication.{fix}")


def check(dtype, m, n, k, threads, reps=3):
    """None when torch.mm runs at least SLOW x the engine's speed at this shape; else a warning
    to print next to every ratio against torch.mm that uses this dtype."""
    t, e = gemm_speeds(dtype, m, n, k, threads, reps)
    return None if t >= SLOW * e else _slow(dtype, m, n, k, threads, t, e)
