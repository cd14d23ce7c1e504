"""fluxcpp.baseline (one process): describe() names the CPU, the load and torch's BLAS; check()
flags a torch.mm far below the GEMM engine's speed (here made slow on purpose: the real one
sleeps 4x its own time first), naming the dtype, the shape and both speeds, and stays silent
when torch.mm runs as fast as the engine (here: torch.mm replaced by the engine's own GEMM);
TorchGemm takes torch's oneDNN linear over the slow torch.mm (its result checked against f64),
and torch.mm when it is at speed."""
import os
import sys
import time

import torch

import fluxcpp
from fluxcpp import baseline

line = baseline.describe()
for word in ("load average", "torch", baseline.torch_blas().split()[0]):
    assert word in line, (word, line)
model, feats, cores = baseline.cpu()
assert cores == len(os.sched_getaffinity(0)) and model

m, n, k = 64, 256, 512
real_mm = torch.mm


def slow_mm(a, b):
    t = time.perf_counter()
    real_mm(a, b)
    time.sleep(4 * (time.perf_counter() - t))
    return real_mm(a, b)


torch.mm = slow_mm
warn = baseline.check(torch.float32, m, n, k, 1)
assert warn and "torch.mm float32 at 64x256x512" in warn and "GFLOP/s" in warn, warn
# TorchGemm then takes torch's own oneDNN linear, says why, and computes x @ w.T.
mm = baseline.TorchGemm(torch.float32, m, n, k, 1)
assert mm.name == "torch oneDNN linear", mm.name
assert mm.note and "torch.mm float32 at 64x256x512" in mm.note and "oneDNN linear" in mm.note
x, w = torch.randn(m, k), torch.randn(n, k)
ref = x.double() @ w.double().t()
err = (mm.bind(w)(x).double() - ref).abs().max().item()
assert err < 1e-6 * k * ref.abs().max().item(), err

local = fluxcpp.Context.local(compute_threads=1)
engine = fluxcpp.AgGemm(local, max_m=m, n=n, k=k, input_dtype=torch.float32)


def engine_mm(a, b):  # b is w.t(): the engine takes w itself
    return engine(a, b.t())


torch.mm = engine_mm
ok = baseline.check(torch.float32, m, n, k, 1, reps=5)
real_onednn = baseline.onednn_mm


def slow_onednn(w):  # torch's oneDNN linear made slower than torch.mm here
    f = real_onednn(w)
    return lambda x: (slow_mm(x, w.t()), f(x))[1]


baseline.onednn_mm = slow_onednn
fast = baseline.TorchGemm(torch.float32, m, n, k, 1, reps=5)
baseline.onednn_mm = real_onednn
torch.mm = real_mm
assert fast.name == "torch.mm" and fast.note is None and fast.warning is None, vars(fast)
engine.close()
local.close()
assert ok is None, ok
print("test_baseline: ok")
sys.exit(0)
