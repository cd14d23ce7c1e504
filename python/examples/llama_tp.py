#!/usr/bin/python3
"""A Llama-style decoder under tensor parallelism on CPUs, from PyTorch, with greedy generation.

RMSNorm, rotary embeddings, grouped-query attention with a KV cache, a SwiGLU MLP (or, with
--experts, an MoE FFN); weights from --seed or from a torch.save checkpoint (Hugging Face Llama /
Mixtral parameter names). Tensor parallel as Megatron: attention and KV heads split over the
ranks (q/k/v one column-parallel GEMM, o row-parallel), MLP gate/up column-parallel, down
row-parallel, the LM head row-parallel over the hidden size (every rank gets all logits);
activations replicated between the layers (sequence_parallel=False).

Backends (the same math):
  fluxcpp  fluxcpp.ColumnParallelLinear / RowParallelLinear (GemmAr: GEMM + deterministic
           all-reduce, bitwise the same logits on every rank), packed weights; the column-parallel
           GEMMs on an AgGemm over a one-rank context (oneDNN); the MoE FFN as MoeDispatch ->
           GroupedGemm -> MoeCombine -> AllGather (expert parallel).
  torch    torch.mm on the same shards + torch.distributed all_reduce over gloo (gloo has no bf16
           all_reduce in torch 1.13: bf16 partials are reduced in f32); MoE: every rank runs its
           experts on the tokens routed to them, then all_reduce.
  single   the whole model in one process (no MPI).

  mpirun -np 2 python3 python/examples/llama_tp.py --backend fluxcpp --dtype bf16
  mpirun -np 2 python3 python/examples/llama_tp.py --backend torch --dtype bf16
  python3 python/examples/llama_tp.py --backend single --dtype bf16

Prints TTFT (prefill latency: the prompt to the first token), TPOT (per output token after the
first), prefill and decode tokens/s (medians over --repeat runs after --warmup runs)."""
import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = p.add_argument
    a("--backend", choices=("fluxcpp", "torch", "single"), default="fluxcpp")
    a("--layers", type=int, default=2)
    a("--hidden", type=int, default=1024)
    a("--heads", type=int, default=16, help="attention heads (divisible by the ranks)")
    a("--kv-heads", type=int, default=8, help="KV heads (grouped-query attention)")
    a("--ffn", type=int, default=2816, help="MLP (or each expert's) intermediate size")
    a("--vocab", type=int, default=32000)
    a("--experts", type=int, default=0, help="an MoE FFN of this many experts in every layer "
      "(0: the dense SwiGLU MLP); divisible by the ranks")
    a("--topk", type=int, default=2, help="experts per token (with --experts)")
    a("--rope-theta", type=float, default=10000.0)
    a("--dtype", choices=("f32", "bf16"), default="f32")
    a("--prompt-len", type=int, default=128, help="prompt tokens per sequence")
    a("--gen", type=int, default=32, help="tokens generated per sequence")
    a("--batch", type=int, default=1, help="sequences decoded together")
    a("--prefill-batch", type=int, default=0,
      help="distinct prompts prefilled together (0: --batch); the other sequences repeat them "
      "(their KV caches copied after the prefill), so decoding at a large batch needs no large "
      "prefill. TTFT is this prefill's")
    a("--seed", type=int, default=0, help="weights and prompts")
    a("--checkpoint", help="a torch.save file of the full weights (Llama / Mixtral names); "
      "layers, hidden, ffn, vocab, kv-heads and experts come from its shapes")
    a("--save-checkpoint", help="write the seeded weights there (rank 0) and continue")
    a("--repeat", type=int, default=3, help="timed runs (medians reported)")
    a("--warmup", type=int, default=1, help="untimed runs first")
    a("--threads", type=int, default=1, help="torch threads per rank")
    a("--no-packed", action="store_true", help="fluxcpp: GEMMs on the weights as they lie, not "
      "on fluxcpp.PackedWeight copies")
    a("--local-gemm", choices=("fluxcpp", "torch"), default="fluxcpp",
      help="fluxcpp: the column-parallel GEMMs on an AgGemm over a one-rank context (fluxcpp) "
      "or torch.mm (torch)")
    a("--ranks-per-node", type=int,
      default=int(os.environ.get("FLUXCPP_BENCH_RANKS_PER_NODE", "0") or 0),
      help="fluxcpp: Context(ranks_per_node=...) (default FLUXCPP_BENCH_RANKS_PER_NODE, 0: real hosts)")
    a("--print-tokens", type=int, default=8, help="generated ids of the first sequence shown")
    a("--json", help="append the results as one JSON line to this file (rank 0)")
    a("--profile", action="store_true", help="after the timed runs, one more generation timed "
      "by part (linear layers by role, attention, RMSNorm, other) on rank 0")
    a("--tag", help="a note stored in the --json row (e.g. the machine's load)")
    a("--no-progress", action="store_true", help="no progress line on stderr")
    args = p.parse_args(argv)
    args.prefill_batch = args.prefill_batch or args.batch
    if args.batch % args.prefill_batch:
        p.error(f"--batch {args.batch} must be a multiple of --prefill-batch {args.prefill_batch}")
    if args.gen < 1 or args.prompt_len < 1:
        p.error("--gen and --prompt-len must be >= 1")
    return args


# ---------------------------------------------------------------------------------------------
# Configuration and weights

class Config:
    def __init__(self, layers, hidden, heads, kv_heads, ffn, vocab, experts=0, topk=2,
                 rope_theta=10000.0, eps=1e-5):
        self.layers, self.hidden, self.heads, self.kv_heads = layers, hidden, heads, kv_heads
        self.ffn, self.vocab, self.experts, self.topk = ffn, vocab, experts, topk
        self.rope_theta, self.eps = rope_theta, eps
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"hidden {hidden} must be divisible by heads {heads}, and heads by "
                             f"kv-heads {kv_heads}")
        self.head_dim = hidden // heads

    def check_world(self, W):
        for what, v in (("heads", self.heads), ("kv-heads", self.kv_heads), ("ffn", self.ffn),
                        ("hidden", self.hidden), ("experts", self.experts)):
            if v % W:
                raise ValueError(f"--{what} {v} must be divisible by the {W} ranks")

    def __repr__(self):
        moe = f" experts={self.experts} topk={self.topk}" if self.experts else ""
        return (f"layers={self.layers} hidden={self.hidden} heads={self.heads}/{self.kv_heads} "
                f"ffn={self.ffn} vocab={self.vocab}{moe}")


def layer_prefix(i):
    return f"model.layers.{i}."


def seeded_weights(cfg, seed):
    """The full (unsharded) weights in f32, the same on every rank for a seed: linear layers
    N(0, 1/fan_in), norms 1 + N(0, 0.01)."""
    g = torch.Generator().manual_seed(seed)
    H, hd = cfg.hidden, cfg.head_dim

    def lin(n, k):
        return torch.randn(n, k, generator=g) / math.sqrt(k)

    def norm(n):
        return 1 + 0.1 * torch.randn(n, generator=g)

    w = {"model.embed_tokens.weight": torch.randn(cfg.vocab, H, generator=g)}
    for i in range(cfg.layers):
        p = layer_prefix(i)
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "self_attn.q_proj.weight"] = lin(cfg.heads * hd, H)
        w[p + "self_attn.k_proj.weight"] = lin(cfg.kv_heads * hd, H)
        w[p + "self_attn.v_proj.weight"] = lin(cfg.kv_heads * hd, H)
        w[p + "self_attn.o_proj.weight"] = lin(H, cfg.heads * hd)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        if cfg.experts:
            m = p + "block_sparse_moe."
            w[m + "gate.weight"] = lin(cfg.experts, H)
            for e in range(cfg.experts):
                w[m + f"experts.{e}.w1.weight"] = lin(cfg.ffn, H)  # gate
                w[m + f"experts.{e}.w3.weight"] = lin(cfg.ffn, H)  # up
                w[m + f"experts.{e}.w2.weight"] = lin(H, cfg.ffn)  # down
        else:
            w[p + "mlp.gate_proj.weight"] = lin(cfg.ffn, H)
            w[p + "mlp.up_proj.weight"] = lin(cfg.ffn, H)
            w[p + "mlp.down_proj.weight"] = lin(H, cfg.ffn)
    w["model.norm.weight"] = norm(H)
    w["lm_head.weight"] = lin(cfg.vocab, H)
    return w


def load_checkpoint(path, heads, topk, rope_theta):
    """(Config, weights) of a torch.save file: a state dict (or one under "state_dict" /
    "model") with Llama / Mixtral parameter names; the LM head may be tied to the embedding."""
    w = torch.load(path, map_location="cpu")
    for key in ("state_dict", "model"):
        if isinstance(w, dict) and key in w and isinstance(w[key], dict):
            w = w[key]
    w = {k: v for k, v in w.items() if hasattr(v, "shape")}
    emb = w["model.embed_tokens.weight"]
    vocab, hidden = emb.shape
    layers = 0
    while layer_prefix(layers) + "input_layernorm.weight" in w:
        layers += 1
    p = layer_prefix(0)
    kv_heads = w[p + "self_attn.k_proj.weight"].shape[0] // (hidden // heads)
    experts = 0
    while f"{p}block_sparse_moe.experts.{experts}.w1.weight" in w:
        experts += 1
    ffn = (w[f"{p}block_sparse_moe.experts.0.w1.weight"] if experts
           else w[p + "mlp.gate_proj.weight"]).shape[0]
    w.setdefault("lm_head.weight", emb)
    cfg = Config(layers, hidden, heads, kv_heads, ffn, vocab, experts, topk, rope_theta)
    return cfg, w


def shard(cfg, w, r, W, dtype):
    """Rank r's tensors of W: embedding, norms and router replicated; the fused qkv and gate/up
    weights (column-parallel: this rank's heads / KV heads / ffn columns as output rows), o and
    down (row-parallel: the matching input columns), the LM head's hidden columns; with experts,
    this rank's E/W experts stacked as [L, 2*ffn, hidden] (gate then up) and [L, hidden, ffn]."""
    hq, hkv, hd = cfg.heads // W, cfg.kv_heads // W, cfg.head_dim
    f, H = cfg.ffn // W, cfg.hidden
    q, kv, fs = (slice(r * hq * hd, (r + 1) * hq * hd), slice(r * hkv * hd, (r + 1) * hkv * hd),
                 slice(r * f, (r + 1) * f))

    def c(t):
        return t.to(dtype).contiguous()

    s = {"embed": c(w["model.embed_tokens.weight"]), "norm": c(w["model.norm.weight"]),
         "lm_head": c(w["lm_head.weight"][:, r * H // W:(r + 1) * H // W]), "layers": []}
    for i in range(cfg.layers):
        p = layer_prefix(i)
        a = p + "self_attn."
        L = {"attn_norm": c(w[p + "input_layernorm.weight"]),
             "mlp_norm": c(w[p + "post_attention_layernorm.weight"]),
             "qkv": c(torch.cat([w[a + "q_proj.weight"][q], w[a + "k_proj.weight"][kv],
                                 w[a + "v_proj.weight"][kv]])),
             "o": c(w[a + "o_proj.weight"][:, q])}
        if cfg.experts:
            m, n_local = p + "block_sparse_moe.", cfg.experts // W
            own = range(r * n_local, (r + 1) * n_local)
            L["router"] = c(w[m + "gate.weight"])
            L["experts_gate_up"] = c(torch.stack([torch.cat(
                [w[f"{m}experts.{e}.w1.weight"], w[f"{m}experts.{e}.w3.weight"]]) for e in own]))
            L["experts_down"] = c(torch.stack([w[f"{m}experts.{e}.w2.weight"] for e in own]))
        else:
            L["gate_up"] = c(torch.cat([w[p + "mlp.gate_proj.weight"][fs],
                                        w[p + "mlp.up_proj.weight"][fs]]))
            L["down"] = c(w[p + "mlp.down_proj.weight"][:, fs])
        s["layers"].append(L)
    return s


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
    """torch.distributed over gloo. Rank and size from the launcher's environment (mpirun's
    OMPI_COMM_WORLD_*, PMI_*, or torchrun's RANK / WORLD_SIZE); rendezvous at MASTER_ADDR /
    MASTER_PORT when set (env://), else through a file that rank 0 names over mpi4py (as
    scripts/bench_torch.py does under mpirun)."""

    def __init__(self):
        import torch.distributed as dist
        env = os.environ
        for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                     ("RANK", "WORLD_SIZE")):
            if r in env and s in env:
                rank, size = int(env[r]), int(env[s])
                break
        else:
            rank, size = 0, 1
        if "MASTER_ADDR" in env and "MASTER_PORT" in env:
            dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size)
        else:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
            rank, size = comm.Get_rank(), comm.Get_size()
            path = comm.bcast(tempfile.mkdtemp(prefix="llama_tp_gloo_") if rank == 0 else None)
            dist.init_process_group("gloo", init_method=f"file://{path}/rendezvous", rank=rank,
                                    world_size=size)
            comm.Barrier()
            if rank == 0:
                shutil.rmtree(path, ignore_errors=True)
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


class TorchBackend:
    """torch.mm on the shards; the row-parallel sum with dist.all_reduce (f32 for bf16: gloo has
    no bf16 reduction) — or no communication at all on one rank (--backend single)."""

    def __init__(self, world):
        self.world = world
        self.dist = getattr(world, "dist", None)

    def _all_reduce(self, y):
        if self.dist is None:
            return y
        if y.dtype == torch.bfloat16:
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


def swiglu(h, f):
    return torch.nn.functional.silu(h[:, :f]) * h[:, f:]


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


# ---------------------------------------------------------------------------------------------
# The model

class Model:
    """Rank r's part of the decoder; forward(tokens [B, T], pos) -> logits [B, vocab] of each
    sequence's last position (every rank holds all of them), the KV cache advanced by T."""

    def __init__(self, cfg, s, backend, W, dtype, max_batch, max_seq, max_m):
        self.cfg, self.dtype, self.W = cfg, dtype, W
        self.rank = getattr(backend, "world", World()).rank
        hd = cfg.head_dim
        self.hq, self.hkv, self.hd, self.f = cfg.heads // W, cfg.kv_heads // W, hd, cfg.ffn // W
        self.embed, self.norm = s["embed"], s["norm"]
        self.layers = []
        for L in s["layers"]:
            layer = {"attn_norm": L["attn_norm"], "mlp_norm": L["mlp_norm"],
                     "qkv": backend.column(L["qkv"], max_m), "o": backend.row(L["o"], max_m)}
            if cfg.experts:
                layer["router"] = L["router"]
                layer["experts"] = backend.experts(cfg, L["experts_gate_up"], L["experts_down"],
                                                   max_m)
            else:
                layer["gate_up"] = backend.column(L["gate_up"], max_m)
                layer["down"] = backend.row(L["down"], max_m)
            self.layers.append(layer)
        self.lm_head = backend.row(s["lm_head"], max_batch)
        nqkv = (self.hq + 2 * self.hkv) * hd
        # Outputs of the linear layers, reused call after call (each is consumed before the next
        # layer writes it again).
        self.buf = {"qkv": torch.empty(max_m, nqkv, dtype=dtype),
                    "o": torch.empty(max_m, cfg.hidden, dtype=dtype),
                    "gate_up": torch.empty(max_m, 2 * self.f, dtype=dtype),
                    "down": torch.empty(max_m, cfg.hidden, dtype=dtype),
                    "logits": torch.empty(max_batch, cfg.vocab, dtype=dtype)}
        self.cache = [(torch.zeros(max_batch, self.hkv, max_seq, hd, dtype=dtype),
                       torch.zeros(max_batch, self.hkv, max_seq, hd, dtype=dtype))
                      for _ in self.layers]
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        freqs = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), -1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)
        scale = 1.0 / math.sqrt(hd)
        self.cos_q, self.sin_q = (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)

    def rmsnorm(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.eps)
        return (xf if x.dtype == torch.float32 else xf.to(x.dtype)) * w

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def attention(self, qkv, li, pos, B, T):
        """qkv [B*T, (hq + 2*hkv)*hd] -> [B*T, hq*hd]; the KV cache written at pos..pos+T."""
        hq, hkv, hd = self.hq, self.hkv, self.hd
        g, S = hq // hkv, pos + T
        qkv = qkv.view(B, T, hq + 2 * hkv, hd)
        cos, sin = self.cos[pos:S, None], self.sin[pos:S, None]  # [T, 1, hd]
        # q scaled by 1/sqrt(hd) through its own tables
        q = self.rope(qkv[:, :, :hq], self.cos_q[pos:S, None], self.sin_q[pos:S, None])
        kc, vc = self.cache[li]                                   # [max_batch, hkv, S_max, hd]
        kc[:B, :, pos:S] = self.rope(qkv[:, :, hq:hq + hkv], cos, sin).transpose(1, 2)
        vc[:B, :, pos:S] = qkv[:, :, hq + hkv:].transpose(1, 2)
        # the q heads of KV head j are j*g .. j*g+g-1: batched [B*hkv, g*T, hd] x [B*hkv, S, hd]
        k = kc[:B].view(B * hkv, -1, hd)
        v = vc[:B].view(B * hkv, -1, hd)
        if T == 1:
            q = q.view(B * hkv, g, hd)
            if 2 * S < k.shape[1]:
                return self.softmax_v(torch.bmm(q, k[:, :S].transpose(1, 2)),
                                      v[:, :S]).view(B, hq * hd)
            # The whole cache, positions >= S masked: one contiguous batched GEMM (torch's bf16
            # bmm on the strided [:, :S] views is several times slower).
            scores = torch.bmm(q, k.transpose(1, 2))
            scores[:, :, S:] = float("-inf")
            return self.softmax_v(scores, v).view(B, hq * hd)
        # Prefill: query rows in chunks, each against the keys up to its last position (causal:
        # about half the work of the whole square, and small score blocks).
        q = q.view(B, T, hkv, g, hd).permute(0, 2, 3, 1, 4)      # [B, hkv, g, T, hd]
        o = torch.empty((B, T, hkv, g, hd), dtype=q.dtype)
        for c0 in range(0, T, self.CHUNK):
            c1 = min(T, c0 + self.CHUNK)
            end = pos + c1
            qc = q[:, :, :, c0:c1].reshape(B * hkv, g * (c1 - c0), hd)
            # contiguous keys and values: torch's bmm on strided views can be several times slower
            kk, vv = k[:, :end].contiguous(), v[:, :end].contiguous()
            scores = torch.bmm(qc, kk.transpose(1, 2))            # [B*hkv, g*C, end]
            mask = torch.full((c1 - c0, end), float("-inf"), dtype=scores.dtype)
            scores += mask.triu_(pos + c0 + 1).repeat(g, 1)
            oc = self.softmax_v(scores, vv)                       # [B*hkv, g*C, hd]
            o[:, c0:c1] = oc.view(B, hkv, g, c1 - c0, hd).permute(0, 3, 1, 2, 4)
        return o.view(B * T, hq * hd)

    CHUNK = 128

    @staticmethod
    def softmax_v(scores, v):
        if scores.dtype == torch.float32:
            probs = torch.softmax(scores, -1)
        else:
            probs = torch.softmax(scores, -1, dtype=torch.float32).to(scores.dtype)
        return torch.bmm(probs, v)

    def moe(self, layer, h):
        probs = torch.softmax(torch.mm(h, layer["router"].t()).float(), -1)
        w, ids = torch.topk(probs, self.cfg.topk, -1)
        w /= w.sum(-1, keepdim=True)
        return layer["experts"](h, ids.to(torch.int32), w)

    def forward(self, tokens, pos):
        B, T = tokens.shape
        M = B * T
        buf = self.buf
        x = self.embed[tokens.reshape(-1)]                        # [M, H], the residual stream
        for li, layer in enumerate(self.layers):
            h = self.rmsnorm(x, layer["attn_norm"])
            qkv = layer["qkv"](h, buf["qkv"][:M])
            x += layer["o"](self.attention(qkv, li, pos, B, T), buf["o"][:M])
            h = self.rmsnorm(x, layer["mlp_norm"])
            if self.cfg.experts:
                x += self.moe(layer, h)
            else:
                gu = layer["gate_up"](h, buf["gate_up"][:M])
                x += layer["down"](swiglu(gu, self.f), buf["down"][:M])
        last = x.view(B, T, -1)[:, -1]
        H, W, r = self.cfg.hidden, self.W, self.rank
        h = self.rmsnorm(last, self.norm)[:, r * H // W:(r + 1) * H // W].contiguous()
        return self.lm_head(h, buf["logits"][:B])

    def copy_cache(self, P, B, S):
        """Sequences P..B-1 take the caches of sequences (i mod P) up to position S."""
        for kc, vc in self.cache:
            for c in (kc, vc):
                c[P:B, :, :S] = c[:P, :, :S].repeat(B // P - 1, 1, 1, 1)


class Progress:
    """A progress line on stderr (rank 0), once a run has taken more than a second."""

    def __init__(self, enabled, total_runs):
        self.enabled, self.total = enabled, total_runs
        self.run, self.t0, self.last, self.shown = 0, 0.0, 0.0, False

    def start(self, run, label):
        self.run, self.label, self.t0, self.last = run, label, time.perf_counter(), 0.0

    def step(self, what):
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.t0 > 1.0 and now - self.last > 0.5:
            sys.stderr.write(f"\r[llama_tp] run {self.run + 1}/{self.total} ({self.label}): "
                             f"{what}   ")
            sys.stderr.flush()
            self.last, self.shown = now, True

    def done(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 70 + "\r")
            sys.stderr.flush()
            self.shown = False


class Profile:
    """--profile: wall time per part of the forward on this rank — the linear layers by role,
    attention, RMSNorm, the rest ("other": embedding, RoPE tables, residual adds, SwiGLU, argmax,
    Python). A row-parallel layer's time includes waiting for the slowest rank."""
    PARTS = ("qkv", "o", "gate_up", "down", "experts", "lm_head", "attention", "rmsnorm")

    def __init__(self, model):
        self.t = dict.fromkeys(self.PARTS, 0.0)
        for layer in model.layers:
            for key in ("qkv", "o", "gate_up", "down", "experts"):
                if key in layer:
                    layer[key] = self.wrap(key, layer[key])
        model.lm_head = self.wrap("lm_head", model.lm_head)
        model.attention = self.wrap("attention", model.attention)
        model.rmsnorm = self.wrap("rmsnorm", model.rmsnorm)

    def wrap(self, part, fn):
        def timed(*a):
            t0 = time.perf_counter()
            y = fn(*a)
            self.t[part] += time.perf_counter() - t0
            return y
        return timed

    def line(self, label, total, n):
        parts = [(k, v) for k, v in self.t.items() if v > 0]
        other = total - sum(v for _, v in parts)
        text = " + ".join(f"{k} {v / n * 1e3:.2f}" for k, v in parts + [("other", other)])
        self.t = dict.fromkeys(self.PARTS, 0.0)
        return f"  profile {label}: {total / n * 1e3:.2f} ms = {text}"


def profile(model, prompts, args, world):
    """One prefill and the decode steps after it, timed by part (rank 0's numbers)."""
    prof = Profile(model)
    P, T = prompts.shape
    world.barrier()
    t0 = time.perf_counter()
    tok = model.forward(prompts, 0).argmax(-1)
    lines = [prof.line(f"prefill {P}x{T}", time.perf_counter() - t0, 1)]
    if args.batch > P:
        model.copy_cache(P, args.batch, T)
        tok = tok.repeat(args.batch // P)
    n = args.gen - 1
    if n > 0:
        world.barrier()
        t0 = time.perf_counter()
        for i in range(n):
            tok = model.forward(tok.view(args.batch, 1), T + i).argmax(-1)
        lines.append(prof.line(f"decode step, batch {args.batch}", time.perf_counter() - t0, n))
    return lines


def generate(model, prompts, gen, batch, progress=None):
    """Greedy decoding. prompts [P, T]: prefilled together; with batch > P the other sequences
    repeat them (caches copied). Returns (tokens [batch, gen], first logits [P, vocab], TTFT s,
    decode s) — TTFT up to the first token, decode over the gen-1 tokens after it."""
    P, T = prompts.shape
    t0 = time.perf_counter()
    logits = model.forward(prompts, 0)
    tok = logits.argmax(-1)
    t1 = time.perf_counter()
    first = logits.clone()
    if batch > P:
        model.copy_cache(P, batch, T)
        tok = tok.repeat(batch // P)
    out = [tok]
    t2 = time.perf_counter()
    for i in range(1, gen):
        tok = model.forward(tok.view(batch, 1), T + i - 1).argmax(-1)
        out.append(tok)
        if progress is not None:
            progress.step(f"decode {i + 1}/{gen} tokens")
    t3 = time.perf_counter()
    return torch.stack(out, 1), first, t1 - t0, t3 - t2


def build(args, cfg, weights, world, backend, dtype):
    max_seq = args.prompt_len + args.gen
    max_m = max(args.prefill_batch * args.prompt_len, args.batch)
    s = shard(cfg, weights, world.rank, world.size, dtype)
    return Model(cfg, s, backend, world.size, dtype, args.batch, max_seq, max_m)


def make_backend(args, dtype):
    """(world, backend, closers) for args.backend."""
    if args.backend == "single":
        world = World()
        return world, TorchBackend(world), []
    if args.backend == "torch":
        world = GlooWorld()
        return world, TorchBackend(world), [world]
    import fluxcpp
    from mpi4py import MPI
    ctx = fluxcpp.Context(ranks_per_node=args.ranks_per_node)
    local_ctx = None
    if args.local_gemm == "fluxcpp":
        local_ctx = fluxcpp.Context(MPI.COMM_SELF, compute_threads=args.threads)
    world = MpiWorld(MPI.COMM_WORLD)
    world.ranks_per_host = ctx.node_size
    backend = FluxBackend(world, ctx, local_ctx, dtype, not args.no_packed)
    return world, backend, [c for c in (local_ctx, ctx) if c is not None]


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    world, backend, closers = make_backend(args, dtype)
    try:
        if args.checkpoint:
            cfg, weights = load_checkpoint(args.checkpoint, args.heads, args.topk, args.rope_theta)
        else:
            cfg = Config(args.layers, args.hidden, args.heads, args.kv_heads, args.ffn,
                         args.vocab, args.experts, args.topk, args.rope_theta)
            weights = seeded_weights(cfg, args.seed)
            if args.save_checkpoint and world.rank == 0:
                torch.save(weights, args.save_checkpoint)
        cfg.check_world(world.size)
        model = build(args, cfg, weights, world, backend, dtype)
        del weights
        with torch.inference_mode():
            g = torch.Generator().manual_seed(args.seed + 1)
            prompts = torch.randint(0, cfg.vocab, (args.prefill_batch, args.prompt_len),
                                    generator=g)
            runs = args.warmup + args.repeat
            progress = Progress(world.rank == 0 and not args.no_progress, runs)
            ttft, tpot = [], []
            for run in range(runs):
                warm = run < args.warmup
                progress.start(run, "warm-up" if warm else "timed")
                progress.step("prefill")
                world.barrier()
                tokens, _, t_first, t_dec = generate(model, prompts, args.gen, args.batch,
                                                     progress)
                progress.done()
                t_first, t_dec = world.max(t_first), world.max(t_dec)
                if not warm:
                    ttft.append(t_first)
                    tpot.append(t_dec / max(1, args.gen - 1))
            lines = profile(model, prompts, args, world) if args.profile else []
        report(args, cfg, world, ttft, tpot, tokens)
        if world.rank == 0 and lines:
            print("\n".join(lines), flush=True)
        backend.close()
    finally:
        for c in closers:
            c.close()


def report(args, cfg, world, ttft, tpot, tokens):
    if world.rank != 0:
        return
    t_first, t_tok = statistics.median(ttft), statistics.median(tpot)
    row = {"backend": args.backend, "world": world.size, "dtype": args.dtype,
           "config": repr(cfg), "batch": args.batch, "prefill_batch": args.prefill_batch,
           "prompt_len": args.prompt_len, "gen": args.gen, "repeat": len(ttft),
           "ttft_ms": t_first * 1e3, "tpot_ms": t_tok * 1e3,
           "prefill_tok_s": args.prefill_batch * args.prompt_len / t_first,
           "decode_tok_s": args.batch / t_tok if args.gen > 1 else None,
           "ttft_all_ms": [t * 1e3 for t in ttft], "tpot_all_ms": [t * 1e3 for t in tpot]}
    if args.tag:
        row["tag"] = args.tag
    if args.backend == "fluxcpp":
        row.update(packed=not args.no_packed, local_gemm=args.local_gemm,
                   ranks_per_host=world.ranks_per_host)
    hosts = f" hosts={world.size // world.ranks_per_host}" if args.backend == "fluxcpp" else ""
    print(f"llama_tp: backend={args.backend} W={world.size}{hosts} dtype={args.dtype} {cfg} "
          f"batch={args.batch} prefill-batch={args.prefill_batch} prompt={args.prompt_len} "
          f"gen={args.gen}")
    dec = (f"TPOT {row['tpot_ms']:.2f} ms  decode {row['decode_tok_s']:.1f} tok/s"
           if args.gen > 1 else "no decode (--gen 1)")
    print(f"  TTFT {row['ttft_ms']:.1f} ms  prefill {row['prefill_tok_s']:.0f} tok/s  {dec}  "
          f"(median of {len(ttft)})")
    print(f"  tokens[0][:{args.print_tokens}]: {tokens[0, :args.print_tokens].tolist()}",
          flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
