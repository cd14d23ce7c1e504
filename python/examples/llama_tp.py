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
           all_reduce in torch 1.13: bf16 partials are reduced in f32), or over the "fluxcpp"
           backend with --dist-backend fluxcpp (bf16 reduced as bf16); MoE: every rank runs its
           experts on the tokens routed to them, then all_reduce.
  single   the whole model in one process (no MPI).

  mpirun -np 2 python3 python/examples/llama_tp.py --backend fluxcpp --dtype bf16
  mpirun -np 2 python3 python/examples/llama_tp.py --backend torch --dtype bf16
  python3 python/examples/llama_tp.py --backend single --dtype bf16

Prints TTFT (prefill latency: the prompt to the first token), TPOT (per output token after the
first), prefill and decode tokens/s (medians over --repeat runs after --warmup runs).

This file is the driver (flags, timing, --profile, the report); the model is llama_model.py, the
backends llama_backends.py (both next to it; the names the tests use are imported here too)."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

from llama_backends import (FluxBackend, GlooWorld, MpiWorld, TorchBackend, World,  # noqa: F401
                            dist_backend)
from llama_model import (Config, Model, generate, load_checkpoint, seeded_weights,  # noqa: F401
                         shard)


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
    a("--dist-backend", choices=("gloo", "fluxcpp"), default="gloo",
      help="torch: the torch.distributed backend of its all_reduce (fluxcpp: the \"fluxcpp\" "
      "backend, bf16 reduced as bf16)")
    a("--local-gemm", choices=("fluxcpp", "torch"), default="fluxcpp",
      help="fluxcpp: the column-parallel GEMMs on an AgGemm over a one-rank context (fluxcpp) "
      "or torch.mm (torch)")
    a("--ranks-per-node", type=int,
      default=int(os.environ.get("FLUXCPP_BENCH_RANKS_PER_NODE", "0") or 0),
      help="fluxcpp: Context(ranks_per_host=...) (default FLUXCPP_BENCH_RANKS_PER_NODE, 0: real hosts)")
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
        world = GlooWorld(args.dist_backend)
        return world, TorchBackend(world), [world]
    import fluxcpp
    if "OMPI_COMM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" in os.environ:
        # torchrun (or any launcher that hands out a store, no MPI): the world is a
        # torch.distributed group (--dist-backend), the context meets through its store, on one
        # host or several, and the one-rank context through a private store.
        import torch.distributed as dist
        world = GlooWorld(args.dist_backend)
        store = dist.distributed_c10d._get_default_store()
        ctx = fluxcpp.Context.from_store(store, world.rank, world.size)
        local_ctx = None
        if args.local_gemm == "fluxcpp":
            local_ctx = fluxcpp.Context.from_store(dist.HashStore(), 0, 1,
                                                   compute_threads=args.threads)
        closers = [world]
    else:
        from mpi4py import MPI
        ctx = fluxcpp.Context(ranks_per_host=args.ranks_per_node)
        local_ctx = None
        if args.local_gemm == "fluxcpp":
            local_ctx = fluxcpp.Context(MPI.COMM_SELF, compute_threads=args.threads)
        world = MpiWorld(MPI.COMM_WORLD)
        closers = []
    world.ranks_per_host = ctx.node_size
    backend = FluxBackend(world, ctx, local_ctx, dtype, not args.no_packed)
    return world, backend, [c for c in (local_ctx, ctx) if c is not None] + closers


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
