"""Shared pieces of the Python tests: the gloo reference group, checks that count failures, and
the skip message for ops the loaded library does not have.

Two launches: under mpirun (the default), or by tests/python/spawn.py, which starts the ranks
with Python multiprocessing as torchrun or a serving stack would and never touches MPI
(FLUXCPP_TEST_LAUNCH=store): the context then comes from Context.from_store over a FileStore,
and COMM is a stand-in over gloo with the few mpi4py calls the tests make."""
import ctypes
import ctypes.util
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist

import fluxcpp

STORE_LAUNCH = os.environ.get("FLUXCPP_TEST_LAUNCH") == "store"
IN_BATCH = False  # set by tests/python/batch.py, which runs several scripts in this process
failures = []


class _GlooComm:
    """The mpi4py calls the tests make (allgather, bcast, Barrier, allreduce of a sum), over
    the gloo group of a store-launched run."""

    def Get_rank(self):
        return dist.get_rank()

    def Get_size(self):
        return dist.get_world_size()

    def allgather(self, obj):
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    def bcast(self, obj, root=0):
        box = [obj]
        dist.broadcast_object_list(box, src=root)
        return box[0]

    def Barrier(self):
        dist.barrier()

    def allreduce(self, value):
        return sum(self.allgather(value))


if STORE_LAUNCH:
    RANK, W = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    STORE = dist.FileStore(os.environ["FLUXCPP_TEST_STORE"], W)
    dist.init_process_group("gloo", store=STORE, rank=RANK, world_size=W)
    COMM = _GlooComm()
else:
    from mpi4py import MPI
    COMM = MPI.COMM_WORLD
    RANK, W = COMM.Get_rank(), COMM.Get_size()


def context(**kw):
    """The test's context: over MPI_COMM_WORLD, or from the store in a store-launched run."""
    if STORE_LAUNCH:
        return fluxcpp.Context.from_store(STORE, RANK, W, **kw)
    return fluxcpp.Context(**kw)


_locals = 0


def local_context(**kw):
    """A context of this rank alone (MPI_COMM_SELF, or its own id in a store-launched run)."""
    if STORE_LAUNCH:
        global _locals
        _locals += 1
        return fluxcpp.Context.from_store(STORE, 0, 1, key=f"local/{RANK}/{_locals}", **kw)
    from mpi4py import MPI
    return fluxcpp.Context(MPI.COMM_SELF, **kw)


def mpi_initialized():
    """Whether this process initialised MPI (False when libmpi is not even loaded)."""
    name = ctypes.util.find_library("mpi")
    if name is None:
        return False
    flag = ctypes.c_int(0)
    ctypes.CDLL(name).MPI_Initialized(ctypes.byref(flag))
    return flag.value != 0


def init_gloo():
    """A gloo process group over the same ranks, rendezvous through a file that rank 0 names
    (in a store-launched run the group exists already, over the store)."""
    if STORE_LAUNCH:
        return
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


def same_on_every_rank(t, what):
    """t's bytes are the same on every rank (gathered over COMM)."""
    blobs = COMM.allgather(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    check(all(b == blobs[0] for b in blobs),
          f"{what}: results differ between ranks (ranks "
          f"{[r for r, b in enumerate(blobs) if b != blobs[0]]} differ from rank 0)")


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
    """Exit status 0 only if no rank failed (and, store-launched, none initialised MPI)."""
    if STORE_LAUNCH:
        check(not mpi_initialized(), f"{name}: MPI was initialised in a run started without it")
    total = COMM.allreduce(len(failures))
    if RANK == 0:
        how = ", started without MPI (Context.from_store)" if STORE_LAUNCH else ""
        print(f"{name}: W={W}{how}: {'ok' if total == 0 else f'{total} failure(s)'}", flush=True)
    # The store launch's group serves every script of a batch (tests/python/batch.py): it goes
    # with the batch's end; init_gloo's group is the script's own.
    if dist.is_initialized() and not (STORE_LAUNCH and IN_BATCH):
        dist.destroy_process_group()
    sys.exit(0 if total == 0 else 1)


def end_batch():
    """The end of a batch of scripts (tests/python/batch.py): what finish() left for it."""
    if dist.is_initialized():
        dist.destroy_process_group()


# Keep torch from oversubscribing the small CI box.
torch.set_num_threads(int(os.environ.get("FLUXCPP_TEST_TORCH_THREADS", "1")))
