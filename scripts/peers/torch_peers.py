"""One rank of scripts/bench_peers.py's torch-side peers: the same tensors through
  fluxcpp         torch.distributed on the default group, made with the "fluxcpp" backend;
  fluxcpp_module  fluxcpp's Python module (AllReduce / AllGather / ReduceScatter) on that group;
  deepspeed_shm   deepspeed.comm.inference_all_reduce: DeepSpeed's CPU shared-memory all-reduce
                  (its ShareMemCommBuilder op, compiled by torch's cpp_extension); all-reduce
                  only, DeepSpeed has no shared-memory all-gather or reduce-scatter;
  gloo            torch.distributed on a gloo group of the same ranks.
Started by the driver (env:// rendezvous: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; LOCAL_SIZE
for DeepSpeed's op). Rank 0 appends one JSON line per row (peer, op, dtype, size) to --out as it
goes, so a run stopped by the driver's timeout keeps what it finished.

Inputs: rank r, element i = ((i % 17) + r + 1) / 4, exact in bf16, so every summation order gives
the same bits: the first call's output is compared with the closed-form reference. All-reduces
run in place (what inference_all_reduce and dist.all_reduce do); the timed calls keep reducing
the same tensor (its values grow, which costs nothing more)."""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_batch import batch_size  # noqa: E402

OPS = ("all_reduce", "all_gather", "reduce_scatter")
TORCH_PEERS = ("fluxcpp", "fluxcpp_module", "deepspeed_shm", "gloo")


def sizes(max_bytes):
    return [s for s in (4, 64, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20,
                        16 << 20, 64 << 20) if s <= max_bytes]


def pattern(rank, n, dtype):
    return ((torch.arange(n) % 17) + rank + 1).to(torch.float32).mul_(0.25).to(dtype)


def reference(op, rank, world, n, per, dtype):
    if op == "all_gather":
        return torch.cat([pattern(r, n, dtype) for r in range(world)])
    total = sum(pattern(r, per * world if op == "reduce_scatter" else n, torch.float32)
                for r in range(world))
    if op == "reduce_scatter":
        total = total[rank * per:(rank + 1) * per]
    return total.to(dtype)


class Peers:
    """Each peer's setup once per process; .errors holds why a peer is missing (exact text)."""

    def __init__(self, only):
        import fluxcpp  # registers the "fluxcpp" backend
        self.fluxcpp = fluxcpp
        dist.init_process_group("fluxcpp")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.gloo = dist.new_group(list(range(self.world)), backend="gloo")
        self.errors = {}
        self.ctx = None
        if "fluxcpp_module" in only:
            self.ctx = fluxcpp.Context.from_group()
        self.ds = None
        if "deepspeed_shm" in only:
            try:
                self.ds = self._deepspeed()
            except Exception as e:  # reported in the table, with its text
                self.errors["deepspeed_shm"] = f"{type(e).__name__}: {e}".strip()
        # Every rank must run the same peers: a peer missing on one rank is missing everywhere.
        ok = torch.tensor([0 if p in self.errors else 1 for p in TORCH_PEERS])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=self.gloo)
        self.peers = [p for p, k in zip(TORCH_PEERS, ok.tolist()) if p in only and k]
        if self.ds is not None:  # every rank has mapped every segment (the all_reduce above)
            from hf_autotp import unlink_segment
            unlink_segment(self.rank)
        for p, k in zip(TORCH_PEERS, ok.tolist()):
            if p in only and not k and p not in self.errors:
                self.errors[p] = "failed on another rank"

    def _deepspeed(self):
        import deepspeed.comm as dsc
        dsc.init_distributed(dist_backend="gloo")  # wraps the existing default group
        cdb = dsc.comm.cdb
        if getattr(cdb, "shm_comm_op", None) is None:
            raise RuntimeError("DeepSpeed built no ShareMemCommBuilder op (deepspeed_shm_comm): "
                               "inference_all_reduce would be torch.distributed.all_reduce")
        self.ds_level = getattr(cdb, "shm_vector_kernel_level", 0)
        return dsc

    def call(self, peer, op, dtype, n, per):
        """(fn, input, output) for one call; None when the peer has no such op."""
        W, g = self.world, self.gloo
        x = pattern(self.rank, per * W if op == "reduce_scatter" else n, dtype)
        if op == "all_reduce":
            if peer == "fluxcpp":
                return (lambda: dist.all_reduce(x)), x, x
            if peer == "gloo":
                return (lambda: dist.all_reduce(x, group=g)), x, x
            if peer == "deepspeed_shm":
                need = 1 if dtype == torch.float32 else 2  # its kernels' ISA level (avx2 / avx512bw)
                if self.ds_level < need:
                    raise RuntimeError(f"DeepSpeed's SHM kernels need ISA level {need}, the CPU "
                                       f"has {self.ds_level}: it would fall back to all_reduce")
                return (lambda: self.ds.inference_all_reduce(x)), x, x
            m = self.fluxcpp.AllReduce(self.ctx, n, dtype)
            return (lambda: m.forward(x, out=x)), x, x, m
        if peer == "deepspeed_shm":
            return None
        out = torch.empty(n * W if op == "all_gather" else per, dtype=dtype)
        if op == "all_gather":
            if peer == "fluxcpp_module":
                m = self.fluxcpp.AllGather(self.ctx, W, n, dtype)
                return (lambda: m.forward(x.view(1, n), out=out.view(W, n))), x, out, m
            grp = None if peer == "fluxcpp" else g
            return (lambda: dist.all_gather_into_tensor(out, x, group=grp)), x, out
        if peer == "fluxcpp_module":
            m = self.fluxcpp.ReduceScatter(self.ctx, W, per, dtype)
            return (lambda: m.forward(x.view(W, per), out=out.view(1, per))), x, out, m
        grp = None if peer == "fluxcpp" else g
        return (lambda: dist.reduce_scatter_tensor(out, x, group=grp)), x, out


# An all-reduce from this size up is also given against the copy bound: every rank copying the
# same bytes at once (a torch copy), timed in the same rounds as the peers.
COPY_BOUND_FROM = 1 << 20


def copy_call(nbytes):
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), src, dst


def run_row(P, a, op, dname, dtype, nbytes, emit):
    W = P.world
    esize = torch.tensor([], dtype=dtype).element_size()
    n = max(1, nbytes // esize)
    per = max(1, n // W)
    calls, wrong, errors, modules, reps = {}, {}, {}, [], {}
    bound = op == "all_reduce" and nbytes >= COPY_BOUND_FROM
    for peer in P.peers + (["copy"] if bound else []):
        try:
            c = copy_call(nbytes) if peer == "copy" else P.call(peer, op, dtype, n, per)
            if c is None:
                continue
            fn, _, out = c[:3]
            modules += list(c[3:])
            fn()
            if peer == "copy":
                wrong[peer] = int((out != 1).sum())
            else:
                ref = reference(op, P.rank, W, n, per, dtype)
                wrong[peer] = int((out.view(-1) != ref).sum())
        except Exception as e:
            errors[peer] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        # Every rank times the peer, or none does: a peer that failed on one rank alone (before
        # its first call, or raising in it) would leave the others' batch sizing unmatched.
        ok = torch.tensor([0 if peer in errors else 1])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=P.gloo)
        if not int(ok):
            errors.setdefault(peer, "failed on another rank")
            continue
        if peer not in wrong:  # the peer has no such op
            continue
        try:
            reps[peer] = batch_size(fn, P.gloo)
            for _ in range(reps[peer]):  # untimed warm-up, the same count on every rank
                fn()
            calls[peer] = fn
        except Exception as e:
            errors[peer] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    names = list(calls)
    times = {p: [] for p in names}
    for r in range(a.rounds):
        for p in (names if r % 2 == 0 else names[::-1]):  # interleaved, the order alternating
            dist.barrier(group=P.gloo)
            t0 = time.perf_counter()
            for _ in range(reps[p]):
                calls[p]()
            times[p].append((time.perf_counter() - t0) / reps[p])
    if names:  # the slowest rank's time of each round; wrong elements summed over ranks
        t = torch.tensor([times[p] for p in names], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=P.gloo)
        bad = torch.tensor([wrong[p] for p in names], dtype=torch.int64)
        dist.all_reduce(bad, group=P.gloo)
        times = {p: t[i].tolist() for i, p in enumerate(names)}
        wrong = {p: int(bad[i]) for i, p in enumerate(names)}
    for m in modules:
        m.close()
    for peer in names + list(errors):
        row = dict(peer=peer, op=op, dtype=dname, bytes=nbytes, world=W, reps=reps.get(peer))
        if peer in errors:
            row.update(us=None, ok=False, error=errors[peer])
        else:
            row.update(us=statistics.median(times[peer]) * 1e6, ok=wrong[peer] == 0,
                       wrong=wrong[peer])
        emit(row)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--peers", default=",".join(TORCH_PEERS))
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    P = Peers(a.peers.split(","))
    f = open(a.out, "a") if P.rank == 0 else None

    def emit(row):
        if f is not None:
            f.write(json.dumps(row) + "\n")
            f.flush()
    for peer, err in P.errors.items():
        emit(dict(peer=peer, world=P.world, error=err))
    for x in (torch.ones(1), torch.ones(1, dtype=torch.bfloat16)):  # every peer warm
        for _ in range(200):
            dist.all_reduce(x)
            dist.all_reduce(x, group=P.gloo)
    for dname in a.dtypes.split(","):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dname]
        for op in OPS:
            for nbytes in sizes(a.max_bytes):
                run_row(P, a, op, dname, dtype, nbytes, emit)
    if P.ctx is not None:
        P.ctx.close()
    dist.barrier(group=P.gloo)
    dist.destroy_process_group()
    if f is not None:
        f.close()
    sys.stdout.flush()
    os._exit(0)  # torch 2.15 may abort at interpreter exit after a clean destroy (see batch.py)


if __name__ == "__main__":
    main()
