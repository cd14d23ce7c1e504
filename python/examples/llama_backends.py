"""The backends of python/examples/llama_tp.py: the world (rank, size, barrier, max over ranks)
and the linear layers and MoE experts of the model in llama_model.py, on fluxcpp (FluxBackend,
FluxExperts) or on torch.mm + torch.distributed over gloo (TorchBackend, TorchExperts; on one
rank without communication)."""
import os

import torch

from llama_model import swiglu


# ---------------------------------------------------------------------------------------------
# Backends: the linear layers, the MoE FFN's expert part, and the world (barrier, max over ranks)

class World:
    """rank, size; barrier(); max(x) over ranks; close()."""

    def __init__(self, rank=0, size=1):
        self.rank, self.size = rank, size

    def barrier(self):
        pass

    def max(self, x):
        return x

    def close(self):
        pass


class MpiWorld(World):
    def __init__(self, comm):
        super().__init__(comm.Get_rank(), comm.Get_size())
        self.comm = comm

    def barrier(self):
        self.comm.Barrier()

    def max(self, x):
        from mpi4py import MPI
        return self.comm.allreduce(x, op=MPI.MAX)


class GlooWorld(World):
    """torch.distributed over gloo (or backend "fluxcpp"). Rank and size from the launcher's environment (mpirun's
    OMPI_COMM_WORLD_*, PMI_*, or torchrun's RANK / WORLD_SIZE); rendezvous at MASTER_ADDR /
    MASTER_PORT when set (env://), else through a file that rank 0 names over mpi4py (as
    scripts/bench_torch.py does under mpirun)."""

    def __init__(self, backend="gloo"):
        import torch.distributed as dist
        if backend == "fluxcpp":
            import fluxcpp  # noqa: F401  registers the backend
        env = os.environ
        for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                     ("RANK", "WORLD_SIZE")):
            if r in env and s in env:
                rank, size = int(env[r]), int(env[s])
                break
        else:
            rank, size = 0, 1
        if "MASTER_ADDR" in env and "MASTER_PORT" in env:
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size)
        else:
            from example_common import COMM, init_gloo
            rank, size = COMM.Get_rank(), COMM.Get_size()
            init_gloo(COMM, "llama_tp_gloo_", backend=backend)
        super().__init__(rank, size)
        self.dist = dist

    def barrier(self):
        self.dist.barrier()

    def max(self, x):
        t = torch.tensor([float(x)], dtype=torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.item()

    def close(self):
        self.dist.destroy_process_group()


def dist_backend(dist):
    return str(dist.get_backend()).lower()


class TorchBackend:
    """torch.mm on the shards; the row-parallel sum with dist.all_reduce (f32 for bf16: gloo has
    no bf16 reduction) — or no communication at all on one rank (--backend single)."""

    def __init__(self, world):
        self.world = world
        self.dist = getattr(world, "dist", None)

    def _all_reduce(self, y):
        if self.dist is None:
            return y
        if y.dtype == torch.bfloat16 and dist_backend(self.dist) == "gloo":
            t = y.float()
            self.dist.all_reduce(t)
            return y.copy_(t)
        self.dist.all_reduce(y)
        return y

    def column(self, w, max_m):
        wt = w.t()
        return lambda x, out: torch.mm(x, wt, out=out)

    def row(self, w, max_m):
        wt = w.t()
        return lambda x, out: self._all_reduce(torch.mm(x, wt, out=out))

    def experts(self, cfg, gate_up, down, max_tokens):
        return TorchExperts(self, cfg, gate_up, down)

    def close(self):
        pass


class FluxBackend:
    """fluxcpp's layers with replicated activations: ColumnParallelLinear (a local GEMM) and
    RowParallelLinear (GemmAr), on packed weights; the MoE experts through moe_dispatch."""

    def __init__(self, world, ctx, local_ctx, dtype, packed):
        self.world, self.ctx, self.local_ctx = world, ctx, local_ctx
        self.dtype, self.packed = dtype, packed
        self.closables = []

    def _layer(self, layer, w):
        with torch.no_grad():
            layer.weight.copy_(w)
        self.closables.append(layer)
        return lambda x, out: layer(x, out=out)

    def column(self, w, max_m):
        import fluxcpp
        n, k = w.shape
        return self._layer(fluxcpp.ColumnParallelLinear(
            self.ctx, k, n, max_m, dtype=self.dtype, sequence_parallel=False,
            packed=self.packed and self.local_ctx is not None, local_ctx=self.local_ctx), w)

    def row(self, w, max_m):
        import fluxcpp
        n, k = w.shape
        return self._layer(fluxcpp.RowParallelLinear(
            self.ctx, k, n, max_m, dtype=self.dtype, sequence_parallel=False,
            packed=self.packed), w)

    def experts(self, cfg, gate_up, down, max_tokens):
        e = FluxExperts(self.ctx, cfg, gate_up, down, max_tokens, self.dtype)
        self.closables.append(e)
        return e

    def close(self):
        for c in reversed(self.closables):
            c.close()
        self.closables = []


class TorchExperts:
    """This rank's experts on every token routed to them (activations are replicated), weighted
    by the routing weights and summed in f32; then the all_reduce over ranks."""

    def __init__(self, backend, cfg, gate_up, down):
        self.backend, self.f = backend, cfg.ffn
        self.gate_up, self.down = gate_up, down
        self.first = backend.world.rank * gate_up.shape[0]

    def __call__(self, x, ids, weights):
        out = torch.zeros(x.shape, dtype=torch.float32)
        for l in range(self.gate_up.shape[0]):
            tok, slot = (ids == self.first + l).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            h = swiglu(torch.mm(x[tok], self.gate_up[l].t()), self.f)
            y = torch.mm(h, self.down[l].t()).float() * weights[tok, slot, None]
            out.index_add_(0, tok, y)
        if self.backend.dist is not None:
            self.backend.dist.all_reduce(out)
        return out.to(x.dtype)


class FluxExperts:
    """Expert parallel with fluxcpp: rank r routes its contiguous share of the (replicated)
    tokens, MoeDispatch sends each slot to its expert's rank (rows grouped by local expert),
    GroupedGemm (gate/up) -> SwiGLU -> GroupedGemm (down), MoeCombine brings the rows back
    weighted and summed per token, and AllGather makes the output whole on every rank."""

    def __init__(self, ctx, cfg, gate_up, down, max_tokens, dtype):
        import fluxcpp
        W = self.W = ctx.world_size
        self.rank = ctx.rank
        L, self.f, H, K, E = gate_up.shape[0], cfg.ffn, cfg.hidden, cfg.topk, cfg.experts
        self.per = -(-max_tokens // W)
        cap = W * self.per * K
        self.gate_up, self.down = gate_up, down
        self.dispatch = fluxcpp.MoeDispatch(ctx, self.per, H, K, E, cap, dtype)
        self.combine = fluxcpp.MoeCombine(ctx, self.per, H, K, E, cap, dtype)
        self.gemm1 = fluxcpp.GroupedGemm(ctx, L, cap, 2 * self.f, H, dtype)
        self.gemm2 = fluxcpp.GroupedGemm(ctx, L, cap, H, self.f, dtype)
        self.gather = fluxcpp.AllGather(ctx, W * self.per, H, dtype)
        self.recv = torch.empty((cap, H), dtype=dtype)
        self.mine = torch.zeros((self.per, H), dtype=dtype)

    def __call__(self, x, ids, weights):
        T = x.shape[0]
        per = -(-T // self.W)
        lo, hi = min(T, self.rank * per), min(T, (self.rank + 1) * per)
        my_ids, my_w = ids[lo:hi].contiguous(), weights[lo:hi].contiguous()
        got = self.dispatch(x[lo:hi], my_ids, recv=self.recv)
        h = swiglu(self.gemm1(got.recv, got.expert_counts, self.gate_up), self.f)
        y = self.gemm2(h, got.expert_counts, self.down)
        mine = self.mine[:per]
        self.combine(y, my_ids, my_w, out=mine[:hi - lo])
        return self.gather(mine)[:T]

    def close(self):
        for op in (self.dispatch, self.combine, self.gemm1, self.gemm2, self.gather):
            op.close()
