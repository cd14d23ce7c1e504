"""python/examples/llama_tp.py's torch backend with its all-reduces on dist.all_reduce over the
"fluxcpp" backend (--dist-backend fluxcpp), at W ranks under mpirun, against the same model on
one rank: identical greedy tokens in f32, on every rank; in bf16 (reduced as bf16, which gloo
cannot) the first logits within the tolerance test_llama_tp.py gives the fused layers."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                                "examples"))
from support import COMM, check, close, finish  # noqa: E402
import llama_tp as L  # noqa: E402

a = L.parse_args(["--layers", "2", "--hidden", "192", "--heads", "12", "--kv-heads", "6",
                  "--ffn", "384", "--vocab", "512", "--prompt-len", "12", "--gen", "24",
                  "--batch", "2", "--dist-backend", "fluxcpp"])
cfg = L.Config(a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab, a.experts, a.topk)
weights = L.seeded_weights(cfg, 0)
prompts = torch.randint(0, cfg.vocab, (2, 12), generator=torch.Generator().manual_seed(1))


def run(world, backend, dtype):
    model = L.build(a, cfg, weights, world, backend, dtype)
    with torch.inference_mode():
        tokens, first, _, _ = L.generate(model, prompts, 24, a.batch)
    return tokens, first.double()


one = L.World()
ref, ref_logits = run(one, L.TorchBackend(one), torch.float32)
world = L.GlooWorld(a.dist_backend)
check(L.dist_backend(world.dist) == "fluxcpp", f"the group's backend is {world.dist.get_backend()}")
tok, _ = run(world, L.TorchBackend(world), torch.float32)
check(torch.equal(tok, ref), f"f32 tokens differ from the one-rank model: {tok} vs {ref}")
everywhere = COMM.allgather(tok.tolist())
check(all(t == everywhere[0] for t in everywhere), "tokens differ between ranks")
_, one_bf16 = run(one, L.TorchBackend(one), torch.bfloat16)
_, tp = run(world, L.TorchBackend(world), torch.bfloat16)
scale = ref_logits.abs().max().item()
err_one = (one_bf16 - ref_logits).abs().max().item() / scale
close(tp, ref_logits, f"bf16 logits over fluxcpp (one-rank bf16: {err_one:.3g})",
      max(0.03, 2 * err_one))
world.close()
finish("torch_backend.llama")
