"""fluxcpp.swap_linears: a Hugging Face Llama (transformers, random weights from a small config)
whose tensor-parallel linears are swapped for fluxcpp's layers, by the model's own
base_model_tp_plan and, after torch's parallelize_module made it a DTensor model (ColwiseParallel
/ RowwiseParallel over a gloo mesh), by its DTensor placements: logits against the unparallelised
model in f64 (tolerance scaled with K) and against the DTensor model's; a backward through the
swapped model: the swapped layers' weight gradients against the shards of the full model's."""
import copy

import torch

import fluxcpp
from support import RANK, W, check, close, context, finish, init_gloo, raises, tol_for

try:
    import transformers
except ImportError:
    transformers = None

if transformers is None:
    if RANK == 0:
        print("SKIP python.swap: transformers is not installed (python/requirements.txt)")
    finish("python.swap")

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,  # noqa: E402
                                               parallelize_module)

torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=48, intermediate_size=96,
                               num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=6,
                               max_position_embeddings=64, attn_implementation="eager")
full = transformers.LlamaForCausalLM(cfg).eval()  # the same on every rank (one seed)
batch, seq = 2, 8
ids = torch.randint(0, cfg.vocab_size, (batch, seq))
tol = tol_for(torch.float32, cfg.intermediate_size) * cfg.num_hidden_layers
plan = cfg.base_model_tp_plan  # {"layers.*.self_attn.q_proj": "colwise", ...}


def near(got, want, what):
    """close() relative to want's largest magnitude (gradients here are far from 1)."""
    scale = want.abs().max().clamp(min=1e-30)
    close(got / scale, want / scale, what, tol)


def logits(model):
    with torch.no_grad():
        return model(ids).logits


def swapped(model, ctx, plan):
    layers = fluxcpp.swap_linears(model.model, ctx, plan, max_m=batch * seq)
    check(len(layers) == 7 * cfg.num_hidden_layers,
          f"{len(layers)} linears swapped, expected {7 * cfg.num_hidden_layers}")
    check(all(isinstance(model.model.get_submodule(n), fluxcpp.swap.TPLinear) for n in layers),
          "every swapped module is a TPLinear")
    return layers


with context() as ctx:
    init_gloo()
    want = logits(copy.deepcopy(full).double())

    # The model's own plan (Hugging Face's strings), full weights: this rank's chunks.
    model = copy.deepcopy(full)
    layers = swapped(model, ctx, plan)
    near(logits(model), want, "tp_plan swap: logits vs the unparallelised model (f64)")
    # a backward: the swapped layers' gradients are the shards of the full model's
    ref = copy.deepcopy(full)
    ref(ids).logits.square().sum().backward()
    model(ids).logits.square().sum().backward()
    q, o = "layers.0.self_attn.q_proj", "layers.1.mlp.down_proj"
    n = cfg.hidden_size // W
    near(layers[q].weight.grad, ref.model.get_submodule(q).weight.grad[RANK * n:(RANK + 1) * n],
         f"tp_plan swap: {q} dw (colwise shard)")
    n = cfg.intermediate_size // W
    near(layers[o].weight.grad, ref.model.get_submodule(o).weight.grad[:, RANK * n:(RANK + 1) * n],
         f"tp_plan swap: {o} dw (rowwise shard)")
    near(model.model.embed_tokens.weight.grad, ref.model.embed_tokens.weight.grad,
         "tp_plan swap: the embedding's gradient (through every layer)")
    for layer in layers.values():
        layer.close()

    # A DTensor model (parallelize_module), then swapped by its placements (plan None).
    mesh = init_device_mesh("cpu", (W,))
    dt = copy.deepcopy(full)
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(dt.model, mesh, {p: styles[s]() for p, s in plan.items()})
    from_dtensor = logits(dt)
    near(from_dtensor, want, "DTensor model: logits vs the unparallelised model (f64)")
    layers = swapped(dt, ctx, None)
    near(logits(dt), from_dtensor, "DTensor swap: logits vs the DTensor model's")
    near(logits(dt), want, "DTensor swap: logits vs the unparallelised model (f64)")
    for layer in layers.values():
        layer.close()

    # misuse: a width that W does not divide, a context that is not one
    lin = torch.nn.Sequential(torch.nn.Linear(4, 3 * W + 1))
    raises(ValueError, lambda: fluxcpp.swap_linears(lin, ctx, {"0": "colwise"}, max_m=4),
           "swap: out_features not divisible by W", contains=("not divisible by W",))
    raises(TypeError, lambda: fluxcpp.swap_linears(lin, None, {"0": "colwise"}, max_m=4),
           "swap: ctx None")

finish("python.swap")
