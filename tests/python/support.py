"""Shared pieces of the Python tests: the gloo reference group, checks that count failures, and
the skip message for ops the loaded library does not have."""
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
from mpi4py import MPI

import fluxcpp

COMM = MPI.COMM_WORLD
RANK, W = COMM.Get_rank(), COMM.Get_size()
failures = []


def init_gloo():
    """A gloo process group over the same ranks, rendezvous through a file that rank 0 names."""
    path = tempfile.mkdtemp(prefix="fluxcpp_gloo_") if RANK == 0 else None
    path = COMM.bcast(path, root=0)
    dist.init_process_group("gloo", init_method=f"file://{path}/rendezvous", rank=RANK,
                            world_size=W)
    COMM.Barrier()
    if RANK == 0:
        shutil.rmtree(path, ignore_errors=True)


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"[rank {RANK}] FAIL: {what}", file=sys.stderr, flush=True)


def close(got, want, what, tol):
    """max |got - want| <= tol * max(1, max |want|), compared in f64."""
    g, w = got.double(), want.double()
    if g.shape != w.shape:
        check(False, f"{what}: shape {list(g.shape)} != {list(w.shape)}")
        return
    err = (g - w).abs().max().item() if g.numel() else 0.0
    scale = max(1.0, w.abs().max().item() if w.numel() else 0.0)
    check(err <= tol * scale, f"{what}: max error {err:.3g} > {tol:.3g} x {scale:.3g}")


def equal(got, want, what):
    check(got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want),
          f"{what}: not bitwise equal (shapes {list(got.shape)} / {list(want.shape)})")


def raises(exc, fn, what, status=None, contains=()):
    """fn() raises exc (with .status == status if given, and each of `contains` in its text)."""
    try:
        fn()
    except exc as e:
        if status is not None:
            check(getattr(e, "status", None) == status, f"{what}: status {e.status} != {status}")
        for c in contains:
            check(c in str(e), f"{what}: {c!r} not in message {str(e)!r}")
        return e
    except Exception as e:  # noqa: BLE001 - reported as a failure
        check(False, f"{what}: raised {type(e).__name__}: {e}, expected {exc.__name__}")
        return None
    check(False, f"{what}: no {exc.__name__} raised")
    return None


def available(*c_ops):
    """Whether the library has every op; prints why a test is skipped otherwise."""
    missing = [op for op in c_ops if not fluxcpp.has(f"fluxcpp_{op}_create")
               and not fluxcpp.has(f"fluxcpp_{op}")]
    if missing and RANK == 0:
        print(f"SKIP {', '.join(missing)}: {fluxcpp.LIBRARY_PATH} does not export "
              f"fluxcpp_{missing[0]}_create yet (the test runs once the library has it)",
              flush=True)
    return not missing


def tol_for(dtype, k):
    """Tolerance of a K-long dot product in dtype relative to the inputs' scale."""
    eps = {torch.float32: 2e-7, torch.float64: 2e-16, torch.bfloat16: 8e-3}[dtype]
    return eps * max(8, k) * 4


def finish(name):
    """Exit status 0 only if no rank failed."""
    total = COMM.allreduce(len(failures))
    if RANK == 0:
        print(f"{name}: W={W}: {'ok' if total == 0 else f'{total} failure(s)'}", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(0 if total == 0 else 1)


# Keep torch from oversubscribing the small CI box.
torch.set_num_threads(int(os.environ.get("FLUXCPP_TEST_TORCH_THREADS", "1")))
