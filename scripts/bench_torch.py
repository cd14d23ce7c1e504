#!/usr/bin/python3
"""fluxcpp through its Python module vs PyTorch's own path (torch.distributed gloo + torch's
GEMM) at the same shapes, on the ranks of one mpirun: the collectives in f32, the GEMM ops in f32
and bf16. torch's GEMM is its fastest here at each shape and dtype (fluxcpp.baseline.TorchGemm):
torch.mm, or torch's own oneDNN linear (torch.utils.mkldnn, the weight in oneDNN's layout) where
that is faster, e.g. f32 with the MKL of PyPI's torch on a non-Intel CPU; such rows say so, and
a baseline still far below fluxcpp's engine is marked "(!) slow torch GEMM".

Usage: mpirun -np W scripts/python scripts/bench_torch.py [--quick] [--json out.jsonl]
           [--shape M,N,K ...] [--layer HIDDEN,FFN,M ...] [--collectives] [--dtype f32|bf16]
--shape runs the GEMM ops (ag_gemm, gemm_rs, gemm_ar) at exactly those shapes and nothing else;
--dtype picks their dtype (default: both). Shapes as fluxcpp_bench --shape reads them (--help).
--layer runs a layer's MLP GEMMs (up: ag_gemm, and `local`, the replicated layer's GEMM on a
one-rank context against torch's GEMM alone; down: gemm_rs and gemm_ar), --collectives the
collectives alone.
Each row: the median time of one call (ms) of fluxcpp and of torch + gloo, and the speedup; the
GEMM ops also show fluxcpp on a PackedWeight of the weight (what the layers' packed=True runs),
and torch's GEMM alone on the rank's whole GEMM.
The torch path: all_gather -> dist.all_gather; ag_gemm -> dist.all_gather + GEMM;
reduce_scatter -> dist.all_reduce + this rank's rows (gloo has no reduce_scatter);
all_reduce -> a copy of the input + dist.all_reduce on it (fluxcpp's is out of place);
gemm_rs -> GEMM + dist.all_reduce + rows; gemm_ar -> GEMM + dist.all_reduce (torch 2.x's gloo
sums bf16 as it is); all_to_all_single -> dist.all_to_all_single."""
import argparse
import json
import shutil
import statistics
import tempfile
import time



def gemm_shapes_arg(value):
    """'M,N,K', or several of them separated by ';' or spaces: a list of (M, N, K)."""
    shapes = []
    for part in value.replace(";", " ").split():
        try:
            m, n, k = (int(v) for v in part.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{part}' is not M,N,K (three integers)")
        if min(m, n, k) <= 0:
            raise argparse.ArgumentTypeError(f"'{part}': M, N and K must be positive")
        shapes.append((m, n, k))
    if not shapes:
        raise argparse.ArgumentTypeError("no shape given")
    return shapes


def layer_arg(value):
    """'HIDDEN,FFN,M' (or several, as gemm_shapes_arg reads them): a list of (hidden, ffn, m)."""
    return gemm_shapes_arg(value)


ap = argparse.ArgumentParser(
    description="fluxcpp through its Python module vs torch.distributed (gloo) + torch.mm, on "
                "the ranks of one mpirun: mpirun -np W scripts/python scripts/bench_torch.py "
                "(PYTHONPATH=<build>/python).",
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog="""--shape M,N,K means, as in fluxcpp_bench --shape:
  ag_gemm  M total rows over all ranks (M/W each, gathered), N columns of this rank's weight
           [N, K], K; output [M, N] on every rank
  gemm_rs  M rows of this rank's K slice [M, K], weight [N, K]; each rank gets M/W rows
  gemm_ar  M rows (any M), weight [N, K]; every rank gets all M rows
ag_gemm and gemm_rs skip an M that W does not divide, saying so.
Example: mpirun -np 2 scripts/python scripts/bench_torch.py --shape 512,1536,1024 --dtype bf16""")
ap.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
ap.add_argument("--json", help="append one JSON object per row to this file (rank 0)")
ap.add_argument("--shape", type=gemm_shapes_arg, action="append", metavar="M,N,K",
                help="run only the GEMM ops (ag_gemm, gemm_rs, gemm_ar), at this shape; "
                     "repeatable, and one value may list several shapes separated by ';' "
                     "(quoted) or spaces, e.g. --shape '512,1536,1024;8,1536,1024'")
ap.add_argument("--layer", type=layer_arg, action="append", metavar="HIDDEN,FFN,M",
                help="run the MLP GEMMs of a layer of this hidden size and MLP width at M rows: "
                     "up at (M, FFN/W, HIDDEN): ag_gemm (sequence parallel) and local (one "
                     "rank's GEMM, replicated activations, vs torch.mm); down at (M, HIDDEN, "
                     "FFN/W): gemm_rs and gemm_ar; repeatable, like --shape")
ap.add_argument("--collectives", action="store_true",
                help="run the collectives only (no GEMM op)")
ap.add_argument("--dtype", choices=("f32", "bf16"), action="append",
                help="input (and output) dtype of the GEMM ops, torch.mm's too; repeatable "
                     "(default: f32 and bf16); the collectives always run f32")
args = ap.parse_args()

# After the arguments: --help needs neither torch nor MPI.
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from mpi4py import MPI  # noqa: E402

import fluxcpp  # noqa: E402
import fluxcpp.baseline  # noqa: E402

comm = MPI.COMM_WORLD
rank, W = comm.Get_rank(), comm.Get_size()
torch.set_num_threads(1)
path = comm.bcast(tempfile.mkdtemp(prefix="fluxcpp_gloo_") if rank == 0 else None)
dist.init_process_group("gloo", init_method=f"file://{path}/rdv", rank=rank, world_size=W)
comm.Barrier()
if rank == 0:
    shutil.rmtree(path, ignore_errors=True)
reps = 5 if args.quick else 15
if rank == 0:
    print(f"machine: {fluxcpp.baseline.describe()}", flush=True)


def timed(fn):
    fn()
    ts = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return comm.allreduce(statistics.median(ts), op=MPI.MAX) * 1e3


def report(op, shape, nbytes, t_flux, t_torch, bytes_per_rank=None, extra=None):
    """nbytes: the bytes moved as fluxcpp_bench counts them for its algbw (all W blocks of an
    all-gather or reduce-scatter, a rank's whole input of an all-to-all or all-reduce);
    bytes_per_rank: its x axis (one block; a rank's input for the all-to-all and all-reduce)."""
    if rank != 0:
        return
    row = {"op": op, "shape": shape, "world": W, "bytes": nbytes, "fluxcpp_ms": t_flux,
           "torch_gloo_ms": t_torch, "speedup": t_torch / t_flux}
    if bytes_per_rank is not None:
        row.update(bytes_per_rank=bytes_per_rank, algbw_gbs=nbytes / (t_flux * 1e6),
                   algbw_gloo_gbs=nbytes / (t_torch * 1e6))
    mm = flag = ""
    base = _baselines.get((extra or {}).get("dtype"), {}).get(shape_key(extra))
    if base and base.warning:
        row["baseline_warning"] = base.warning
        flag = "  (!) slow torch GEMM: see above"
    if base and base.note:
        row["baseline_note"] = base.note
        flag += "  (torch's oneDNN linear: torch.mm is slower here)"
    if extra:
        row.update(extra)
        mm = (f"  packed {t_torch / extra['fluxcpp_packed_ms']:6.2f}x  ({base.name} alone "
              f"{extra['torch_mm_ms']:9.3f} ms)")
    print(f"{op:18s} {shape:30s} fluxcpp {t_flux:9.3f} ms  torch+gloo {t_torch:9.3f} ms  "
          f"speedup {t_torch / t_flux:6.2f}x{mm}{flag}", flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")


f32 = torch.float32


GEMM_OPS = ("ag_gemm", "gemm_rs", "gemm_ar")


def fused(op_cls, ctx, m, n, k, dt, x, w, out):
    """(plain, packed) ms of one fluxcpp op: on the weight tensor, and on a PackedWeight of it
    (what the layers use with packed=True)."""
    with op_cls(ctx, m, n, k, dt) as op:
        t_plain = timed(lambda: op(x, w, out=out))
        with fluxcpp.PackedWeight(ctx, w) as pw:
            t_packed = timed(lambda: op(x, pw, out=out))
    return t_plain, t_packed


_local = []


def local_ctx():
    """A context of this rank alone, on the cores torch has (the replicated column layer's)."""
    if not _local:
        _local.append(fluxcpp.Context.local(compute_threads=torch.get_num_threads()))
    return _local[0]


# Per dtype and shape: torch's fastest GEMM (fluxcpp.baseline.TorchGemm: torch.mm, or torch's own
# oneDNN linear where torch.mm is slow here), its note and warning printed once and marked on
# every row they affect.
_baselines = {}


def shape_key(extra):
    return None if not extra else (extra["m"], extra["n"], extra["k"])


def torch_gemm(name, dt, m, n, k):
    """Rank 0 measures torch's GEMM paths against the engine at this shape (the others wait);
    every rank gets the choice."""
    mm = fluxcpp.baseline.TorchGemm(dt, m, n, k, torch.get_num_threads()) if rank == 0 else None
    mm = comm.bcast(mm, root=0)
    _baselines.setdefault(name, {})[(m, n, k)] = mm
    for prefix, line in (("note:", mm.note), ("(!)", mm.warning)):
        if line and rank == 0:
            print(f"{prefix} {line}", flush=True)
    return mm


def gemm_ops(ctx, m, n, k, name, dt, ops, layer):
    """ops (of GEMM_OPS) at shape (m, n, k) in dtype dt, each against its torch path."""
    shape = f"m={m} n={n} k={k} {name}"
    base = torch_gemm(name, dt, m, n, k)
    xk = torch.randn(m, k).to(dt)
    w = torch.randn(n, k).to(dt)
    mm = base.bind(w)  # x -> x @ w.T on torch's fastest path here
    t_mm = timed(lambda: mm(xk))  # the rank's whole GEMM, [M, K] x [K, N]
    extra = {"dtype": name, "m": m, "n": n, "k": k, "torch_mm_ms": t_mm,
             "torch_gemm": base.name}
    if layer:
        extra.update(layer=layer)
    split = tuple(o for o in ops if o in ("ag_gemm", "gemm_rs"))
    if m % W and split:
        if rank == 0:
            print(f"{', '.join(split):18s} {shape:30s} skipped: M = {m} is not a "
                  f"multiple of W = {W}", flush=True)
        ops = tuple(o for o in ops if o not in split)
    if "local" in ops:  # the replicated column layer's GEMM: one rank's, no communication
        out = torch.empty(m, n, dtype=dt)
        t_f, t_p = fused(fluxcpp.AgGemm, local_ctx(), m, n, k, dt, xk, w, out)
        report("local", shape, 0, t_f, t_mm, extra=dict(extra, fluxcpp_packed_ms=t_p))
    if "ag_gemm" in ops:
        x = torch.randn(m // W, k).to(dt)
        out = torch.empty(m, n, dtype=dt)
        gathered = torch.empty(m, k, dtype=dt)
        t_f, t_p = fused(fluxcpp.AgGemm, ctx, m, n, k, dt, x, w, out)

        def torch_ag():
            dist.all_gather_into_tensor(gathered, x)
            return mm(gathered)
        report("ag_gemm", shape, m * k * x.element_size(), t_f, timed(torch_ag),
               extra=dict(extra, fluxcpp_packed_ms=t_p))
    for op in ("gemm_rs", "gemm_ar"):
        if op not in ops:
            continue
        rows = slice(rank * m // W, (rank + 1) * m // W) if op == "gemm_rs" else slice(0, m)
        out = torch.empty(rows.stop - rows.start, n, dtype=dt)
        op_cls = fluxcpp.GemmRs if op == "gemm_rs" else fluxcpp.GemmAr
        t_f, t_p = fused(op_cls, ctx, m, n, k, dt, xk, w, out)

        def torch_path():  # torch 2.x's gloo sums bf16 as it is
            y = mm(xk)
            dist.all_reduce(y)
            return y[rows]
        report(op, shape, m * n * 4, t_f, timed(torch_path),
               extra=dict(extra, fluxcpp_packed_ms=t_p))


with fluxcpp.Context() as ctx:
    coll_sizes = [(64, 256), (1024, 1024)] if args.quick else \
        [(64, 256), (256, 1024), (1024, 1024), (4096, 1024)]
    if args.shape or args.layer:  # GEMM shapes given: the collectives are left out
        coll_sizes = []
    for m, k in coll_sizes:
        x = torch.randn(m // W, k)
        out = torch.empty(m, k)
        parts = [torch.empty_like(x) for _ in range(W)]
        with fluxcpp.AllGather(ctx, m, k, f32) as op:
            t_f = timed(lambda: op(x, out=out))
        t_t = timed(lambda: dist.all_gather(parts, x))
        report("all_gather", f"m={m} k={k}", m * k * 4, t_f, t_t, m * k * 4 // W)

        xr = torch.randn(m, k)
        with fluxcpp.ReduceScatter(ctx, m, k, f32) as op:
            o = torch.empty(m // W, k)
            t_f = timed(lambda: op(xr, out=o))

        def torch_rs():
            y = xr.clone()
            dist.all_reduce(y)
            return y[rank * m // W:(rank + 1) * m // W]
        t_t = timed(torch_rs)
        report("reduce_scatter", f"m={m} n={k}", m * k * 4, t_f, t_t, m * k * 4 // W)

        # all_reduce: the same m*k f32 elements on every rank; its algbw counts a rank's buffer.
        xa = torch.randn(m * k)
        with fluxcpp.AllReduce(ctx, m * k, dtype=f32) as op:
            o = torch.empty(m * k)
            t_f = timed(lambda: op.forward(xa, out=o))
        y = torch.empty(m * k)

        def torch_ar():
            y.copy_(xa)
            dist.all_reduce(y)
        t_t = timed(torch_ar)
        report("all_reduce", f"count={m * k}", m * k * 4, t_f, t_t, m * k * 4)

        splits = [m // W] * W
        with fluxcpp.AllToAllSingle(ctx, m, k, f32) as op:
            o = torch.empty(m, k)
            t_f = timed(lambda: op(xr, splits, splits, out=o))
        o2 = torch.empty(m, k)
        t_t = timed(lambda: dist.all_to_all_single(o2, xr, splits, splits))
        report("all_to_all_single", f"m={m} n={k}", m * k * 4, t_f, t_t, m * k * 4)

    gemm_shapes = [(256, 512, 512), (512, 1536, 1024), (8, 1536, 1024)] if args.quick else \
        [(128, 512, 512), (512, 1024, 1024), (1024, 1024, 1024), (2048, 1024, 2048),
         (512, 1536, 1024), (512, 2816, 1024), (8, 1536, 1024), (32, 2816, 1024)]
    jobs = [] if args.collectives else [(m, n, k, GEMM_OPS, None) for m, n, k in gemm_shapes]
    if args.shape or args.layer:
        jobs = [(m, n, k, GEMM_OPS, None) for group in args.shape or [] for m, n, k in group]
    for hidden, ffn, m in (t for group in args.layer or [] for t in group):
        # The MLP of a layer of this hidden size: up is the column-parallel GEMM (ag_gemm under
        # sequence parallelism), down the row-parallel one (gemm_rs, or gemm_ar when every rank
        # holds all rows), each rank with ffn / W of the MLP's width.
        layer = {"hidden": hidden, "ffn": ffn, "m": m}
        jobs += [(m, ffn // W, hidden, ("local", "ag_gemm"), layer),
                 (m, hidden, ffn // W, ("gemm_rs", "gemm_ar"), layer)]
    dtypes = {"f32": f32, "bf16": torch.bfloat16}
    for name in sorted(set(args.dtype or dtypes), key=list(dtypes).index):
        for m, n, k, ops, layer in jobs:
            gemm_ops(ctx, m, n, k, name, dtypes[name], ops, layer)

for c in _local:
    c.close()
dist.destroy_process_group()
