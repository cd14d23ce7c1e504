"""python/examples/llama_tp.py at W ranks against the same model on one rank (every rank builds
that reference itself from the same seeded weights, without communication): in f32 the greedy
tokens of 32 steps are identical, for the fluxcpp backend (packed weights and the one-rank
context's GEMM; and plain weights with torch's GEMM), the torch + gloo backend, the MoE FFN and
a model loaded from a torch.save checkpoint; the tokens are the same on every rank; in bf16 the
first logits are within a tolerance of the f32 model's, as close as the one-rank bf16 model's."""
import os
import sys
import tempfile

import torch
from mpi4py import MPI

import fluxcpp
from support import COMM, RANK, W, check, close, finish

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                                "examples"))
import llama_tp as L  # noqa: E402

GEN, PROMPT, BATCH = 32, 12, 2
f32, bf16 = torch.float32, torch.bfloat16


def args(experts=0, batch=BATCH, prefill_batch=0):
    return L.parse_args(["--layers", "2", "--hidden", "192", "--heads", "12", "--kv-heads", "6",
                         "--ffn", "384", "--vocab", "512", "--experts", str(experts),
                         "--prompt-len", str(PROMPT), "--gen", str(GEN), "--batch", str(batch),
                         "--prefill-batch", str(prefill_batch)])


def config(a):
    return L.Config(a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab, a.experts, a.topk)


def run(a, cfg, weights, world, backend, dtype, prompts):
    """(tokens [batch, GEN], first logits in f64) of the model built on this backend."""
    model = L.build(a, cfg, weights, world, backend, dtype)
    with torch.inference_mode():
        tokens, first, _, _ = L.generate(model, prompts, GEN, a.batch)
    backend.close()
    return tokens, first.double()


def single(a, cfg, weights, dtype, prompts):
    world = L.World()
    return run(a, cfg, weights, world, L.TorchBackend(world), dtype, prompts)


def same_tokens(got, want, what):
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[0].tolist()
        check(False, f"{what}: tokens differ from the one-rank model first at (sequence, step) "
                     f"{bad}: {got[bad[0]].tolist()} vs {want[bad[0]].tolist()}")
    everywhere = COMM.allgather(got.tolist())
    check(all(t == everywhere[0] for t in everywhere), f"{what}: tokens differ between ranks")


world = L.MpiWorld(COMM)
gloo = L.GlooWorld()
with fluxcpp.Context() as ctx, fluxcpp.Context(MPI.COMM_SELF) as local_ctx:
    def flux(dtype, packed=True, local=True):
        return L.FluxBackend(world, ctx, local_ctx if local else None, dtype, packed)

    for experts in (0, 2 * W):
        a = args(experts)
        cfg = config(a)
        weights = L.seeded_weights(cfg, 0)
        prompts = torch.randint(0, cfg.vocab, (BATCH, PROMPT),
                                generator=torch.Generator().manual_seed(1))
        ref, ref_logits = single(a, cfg, weights, f32, prompts)
        name = f"experts={experts}"
        tok, _ = run(a, cfg, weights, world, flux(f32), f32, prompts)
        same_tokens(tok, ref, f"fluxcpp f32 {name}")
        tok, _ = run(a, cfg, weights, gloo, L.TorchBackend(gloo), f32, prompts)
        same_tokens(tok, ref, f"torch+gloo f32 {name}")
        if experts:
            continue
        tok, _ = run(a, cfg, weights, world, flux(f32, packed=False, local=False), f32, prompts)
        same_tokens(tok, ref, "fluxcpp f32, plain weights, torch's column GEMM")

        # bf16: the first logits against the f32 model, as close as the one-rank bf16 model's.
        _, one = single(a, cfg, weights, bf16, prompts)
        _, tp = run(a, cfg, weights, world, flux(bf16), bf16, prompts)
        scale = ref_logits.abs().max().item()
        err_one = (one - ref_logits).abs().max().item() / scale
        close(tp, ref_logits, f"fluxcpp bf16 logits (one-rank bf16: {err_one:.3g})",
              max(0.03, 2 * err_one))

        # A checkpoint written by torch.save, read back with the shapes giving the config.
        path = COMM.bcast(tempfile.mkdtemp(prefix="llama_tp_") if RANK == 0 else None)
        file = os.path.join(path, "weights.pt")
        if RANK == 0:
            torch.save(weights, file)
        COMM.Barrier()
        cfg2, weights2 = L.load_checkpoint(file, cfg.heads, cfg.topk, cfg.rope_theta)
        check(repr(cfg2) == repr(cfg), f"checkpoint config {cfg2} != {cfg}")
        tok, _ = run(a, cfg2, weights2, world, flux(f32), f32, prompts)
        same_tokens(tok, ref, "fluxcpp f32 from a checkpoint")
        COMM.Barrier()
        if RANK == 0:
            os.remove(file)
            os.rmdir(path)

        # One prompt prefilled, decoded as a batch of 3 (caches copied): 3 copies of its tokens.
        a3 = args(batch=3, prefill_batch=1)
        tok, _ = run(a3, cfg, weights, world, flux(f32), f32, prompts[:1])
        same_tokens(tok, ref[:1].repeat(3, 1), "fluxcpp f32, batch 3 from one prefilled prompt")

finish("python.llama_tp")
