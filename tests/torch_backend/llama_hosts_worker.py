"""A torchrun worker of test_torchrun_hosts.py: python/examples/llama_tp.py on ranks spread over
hosts with no MPI anywhere, its fused layers (--backend fluxcpp: the context from the job's store)
and its torch layers over dist.all_reduce on the "fluxcpp" backend, each against the same model
on one rank: identical greedy tokens in f32. Exit status 0 when both match."""
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python", "examples"))
import llama_tp as L  # noqa: E402

a = L.parse_args(["--layers", "2", "--hidden", "192", "--heads", "12", "--kv-heads", "4",
                  "--ffn", "384", "--vocab", "512", "--prompt-len", "12", "--gen", "16",
                  "--batch", "2", "--backend", "fluxcpp", "--dist-backend", "fluxcpp"])
cfg = L.Config(a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab, a.experts, a.topk)
weights = L.seeded_weights(cfg, 0)
prompts = torch.randint(0, cfg.vocab, (2, 12), generator=torch.Generator().manual_seed(1))


def tokens(world, backend):
    model = L.build(a, cfg, weights, world, backend, torch.float32)
    with torch.inference_mode():
        out, _, _, _ = L.generate(model, prompts, a.gen, a.batch)
    return out


one = L.World()
ref = tokens(one, L.TorchBackend(one))
world, fused, closers = L.make_backend(a, torch.float32)
cfg.check_world(world.size)
rank = world.rank
failures = []
host = os.environ.get("FLUXCPP_HOST_ID", "?")
ctx = fused.ctx
print(f"rank {rank} ({host}): context of {ctx.world_size} ranks, {ctx.node_size} on this host, "
      f"group backend {L.dist_backend(world.dist)}", flush=True)
if ctx.node_size == ctx.world_size:
    failures.append(f"the context has one host ({ctx.node_size} of {ctx.world_size} ranks)")
got = tokens(world, fused)
if not torch.equal(got, ref):
    failures.append(f"fused layers: tokens differ from one rank: {got.tolist()} vs {ref.tolist()}")
got = tokens(world, L.TorchBackend(world))
if not torch.equal(got, ref):
    failures.append(f"dist.all_reduce over fluxcpp: tokens differ from one rank: {got.tolist()} "
                    f"vs {ref.tolist()}")
fused.close()
for c in closers:
    c.close()
for f in failures:
    print(f"FAIL (rank {rank}): {f}", flush=True)
print(f"rank {rank}: {'ok' if not failures else 'FAILED'}", flush=True)
sys.exit(1 if failures else 0)
