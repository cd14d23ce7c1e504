"""PyTorch's tensor parallelism (DTensor) over "fluxcpp" against gloo and against one rank.

    test_dtensor.py [W]          (W = 2 by default; W must divide the 4 heads)

Starts W ranks (multiprocessing, spawn) under a watchdog (procs.join_all). Every rank runs
the same transformer-like block (LayerNorm, q/k/v/o attention, an up/down MLP; d = 64,
h = 128), parallelised by `parallelize_module` over `init_device_mesh("cpu", (W,))`, twice:
first in a process group of gloo, then in a fresh one of "fluxcpp". Two plans:

- "tp": ColwiseParallel q/k/v/up, RowwiseParallel o/down (all_reduce forward and backward);
- "sp": the same plus SequenceParallel norm, sequence-sharded activations between the blocks
  (all_gather and reduce_scatter forward, their transposes backward).

Each rank checks the forward output, the gradients of the input and of every parameter, and the
parameters (full tensors: `full_tensor()`; 30 in all), from the same seed, weights and inputs:
- fluxcpp against gloo: `torch.equal` at W = 2 (a sum of two numbers is the same whatever the
  order); otherwise within K * eps relative, K = 256 (the longest contraction);
- fluxcpp against the unparallelised block on this rank: within K * eps relative.
Then the functional collectives DTensor calls (torch.distributed._functional_collectives:
all_gather_tensor, reduce_scatter_tensor, all_reduce, all_to_all_single) run directly on
fluxcpp against exact references (small integer values: every sum is exact), in f32, bf16, f64.
Exit status 0 when every rank passed."""
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
import warnings

from procs import join_all  # tests/python (on PYTHONPATH in the suite)

D, H, HEADS, B, T = 64, 128, 4, 2, 8
K = 2 * H  # the longest contraction (down: 2h -> d)


def make_block():
    """The model class (torch is imported in the ranks only: the parent stays light)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(D)
            self.q, self.k, self.v = nn.Linear(D, H), nn.Linear(D, H), nn.Linear(D, H)
            self.o = nn.Linear(H, D)
            self.up, self.down = nn.Linear(D, 2 * H), nn.Linear(2 * H, D)

        def forward(self, x):
            y = self.norm(x)
            b, t, _ = y.shape
            hd = H // HEADS  # local heads: -1 (a rank holds HEADS / W of them)
            q, k, v = (m(y).view(b, t, -1, hd).transpose(1, 2) for m in (self.q, self.k, self.v))
            a = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5, dim=-1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
            return x + self.down(nn.functional.gelu(self.up(x)))

    return Block


def plan(kind):
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel)
    if kind == "tp":
        return {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                "o": RowwiseParallel(), "up": ColwiseParallel(), "down": RowwiseParallel()}
    seq = Shard(1)
    return {"norm": SequenceParallel(), "q": ColwiseParallel(input_layouts=seq),
            "k": ColwiseParallel(input_layouts=seq), "v": ColwiseParallel(input_layouts=seq),
            "o": RowwiseParallel(output_layouts=seq), "up": ColwiseParallel(input_layouts=seq),
            "down": RowwiseParallel(output_layouts=seq)}


def inputs():
    import torch
    g = torch.Generator().manual_seed(7)
    return torch.randn(B, T, D, generator=g), torch.randn(B, T, D, generator=g)


def run_model(kind, mesh, rank, world):
    """Forward and backward of the parallelised block: {name: full tensor}."""
    import torch
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import parallelize_module
    torch.manual_seed(0)
    model = parallelize_module(make_block()(), mesh, plan(kind))
    x, g = inputs()
    if kind == "sp":  # the sequence is sharded between the blocks
        x, g = x.chunk(world, dim=1)[rank], g.chunk(world, dim=1)[rank]
    x = x.clone().requires_grad_()
    out = model(x)
    (out * g).sum().backward()
    res = {"out": out.detach(), "x.grad": x.grad}
    if kind == "sp":
        res = {n: DTensor.from_local(t.contiguous(), mesh, [Shard(1)]).full_tensor()
               for n, t in res.items()}
    for n, p in model.named_parameters():
        res[n + ".grad"] = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        res[n] = p.full_tensor().detach() if isinstance(p, DTensor) else p.detach()
    return {n: t.clone() for n, t in res.items()}


def run_reference():
    """The unparallelised block on this rank alone."""
    import torch
    torch.manual_seed(0)
    model = make_block()()
    x, g = inputs()
    x.requires_grad_()
    out = model(x)
    (out * g).sum().backward()
    res = {"out": out.detach(), "x.grad": x.grad}
    for n, p in model.named_parameters():
        res[n + ".grad"], res[n] = p.grad, p.detach()
    return res


def check_functional(mesh, rank, world, fail):
    """DTensor's functional collectives on the group against exact references."""
    import torch
    import torch.distributed._functional_collectives as fc

    def data(r, dtype, shape=(4, 6)):
        g = torch.Generator().manual_seed(100 + r)
        return (torch.randint(-8, 9, shape, generator=g).double() / 4).to(dtype)

    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        mine, every = data(rank, dtype), [data(r, dtype) for r in range(world)]
        total = sum(t.double() for t in every).to(dtype)
        exp = {"all_reduce sum": total, "all_reduce avg": (total.double() / world).to(dtype),
               "all_reduce max": torch.stack(every).amax(0)}
        got = {"all_reduce sum": fc.all_reduce(mine, "sum", mesh),
               "all_reduce avg": fc.all_reduce(mine, "avg", mesh),
               "all_reduce max": fc.all_reduce(mine, "max", mesh)}
        for dim in (0, 1):
            exp[f"all_gather_tensor dim {dim}"] = torch.cat(every, dim)
            got[f"all_gather_tensor dim {dim}"] = fc.all_gather_tensor(mine, dim, mesh)
            big = [data(10 + r, dtype, (4 * world, 6 * world)) for r in range(world)]
            exp[f"reduce_scatter_tensor dim {dim}"] = (
                sum(t.double() for t in big).to(dtype).chunk(world, dim)[rank])
            got[f"reduce_scatter_tensor dim {dim}"] = fc.reduce_scatter_tensor(
                big[rank], "sum", dim, mesh)
        rows = [data(20 * r + s, dtype, (2, 6)) for r in range(world) for s in range(world)]
        exp["all_to_all_single"] = torch.cat([rows[s * world + rank] for s in range(world)])
        got["all_to_all_single"] = fc.all_to_all_single(
            torch.cat(rows[rank * world:(rank + 1) * world]), None, None, mesh)
        for name, want in exp.items():
            have = fc.wait_tensor(got[name])
            if not torch.equal(have, want):
                fail(f"functional {name} {dtype}: {have.flatten()[:6]} != {want.flatten()[:6]}")


def compare(name, got, want, exact, fail):
    import torch
    if exact:
        if not torch.equal(got, want):
            err = (got.double() - want.double()).abs().max().item()
            fail(f"{name}: not bitwise equal (max |diff| {err:.3g})")
        return 0.0
    tol = K * torch.finfo(torch.float32).eps
    err = (got.double() - want.double()).abs().max().item()
    scale = max(1.0, want.double().abs().max().item())
    if not err <= tol * scale:
        fail(f"{name}: max |diff| {err:.3g} > {tol:.3g} * {scale:.3g}")
    return err / scale


def rank_main(rank, world, tmp):
    warnings.simplefilter("ignore", FutureWarning)  # funcol's renames
    import datetime
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    import fluxcpp  # noqa: F401  registers "fluxcpp"
    torch.set_num_threads(1)  # W ranks on a small machine: the same kernels in every run
    failures = []

    def fail(what):
        failures.append(what)
        print(f"[rank {rank}] FAIL: {what}", file=sys.stderr, flush=True)

    results = {}
    for backend in ("gloo", "fluxcpp"):
        dist.init_process_group(backend, init_method=f"file://{tmp}/{backend}.store", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60))
        mesh = init_device_mesh("cpu", (world,))
        results[backend] = {kind: run_model(kind, mesh, rank, world) for kind in ("tp", "sp")}
        if backend == "fluxcpp":
            check_functional(mesh, rank, world, fail)
        dist.destroy_process_group()
    ref = run_reference()
    worst = 0.0
    for kind in ("tp", "sp"):
        ours, gloo = results["fluxcpp"][kind], results["gloo"][kind]
        if set(ours) != set(ref) or set(gloo) != set(ref):
            fail(f"{kind}: tensors {sorted(ours)} / {sorted(gloo)} != {sorted(ref)}")
            continue
        for n in ref:
            compare(f"{kind} {n} fluxcpp vs gloo", ours[n], gloo[n], world == 2, fail)
            worst = max(worst, compare(f"{kind} {n} vs one rank", ours[n], ref[n], False, fail))
    if rank == 0:
        print(f"{len(ref)} tensors x 2 plans: fluxcpp == gloo "
              f"({'bitwise' if world == 2 else 'K-scaled tolerance'}); worst relative "
              f"difference to one rank {worst:.3g} (bound {K * 2 ** -23:.3g})", flush=True)
    sys.exit(1 if failures else 0)


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="fluxcpp_dtensor_")
    try:
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=rank_main, args=(r, world, tmp)) for r in range(world)]
        for p in procs:
            p.start()
        hung = join_all(procs, timeout_s=120)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bad = [f"rank {r} hung (killed)" if r in hung else f"rank {r} exited {p.exitcode}"
           for r, p in enumerate(procs) if r in hung or p.exitcode != 0]
    print(f"{'PASS' if not bad else 'FAIL: ' + ', '.join(bad)} "
          f"({time.monotonic() - start:.1f} s, W = {world})", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
