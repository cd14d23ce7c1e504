"""swap_linears: a model's tensor-parallel nn.Linear pairs replaced by fluxcpp's layers
(docs/python.md, "torch.compile and torch.library")."""
import fnmatch

import torch

from ._base import Context
from .autograd import ColumnParallelLinear, RowParallelLinear

_STYLES = {"colwise": 0, "rowwise": 1}  # the weight's sharded dimension


class TPLinear(torch.nn.Module):
    """A fluxcpp layer in an nn.Linear's place: input [..., in_features] (all leading dimensions
    together at most the layer's max_m rows) -> [..., out_features of the layer]; `layer` is the
    ColumnParallelLinear or RowParallelLinear."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        y = self.layer(x.reshape(-1, x.shape[-1]))
        return y.view(*x.shape[:-1], y.shape[-1])


def _style(value):
    """'colwise', 'rowwise' or None (left as it is) of a plan entry: a string as in Hugging Face's
    tp_plan, or torch's ColwiseParallel() / RowwiseParallel()."""
    if isinstance(value, str):
        return value if value in _STYLES else None
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    if isinstance(value, ColwiseParallel):
        return "colwise"
    return "rowwise" if isinstance(value, RowwiseParallel) else None


def _matches(pattern, name):
    """parallelize_module's and Hugging Face's rule: '*' (fnmatch) within one dotted atom."""
    p, n = pattern.split("."), name.split(".")
    return len(p) == len(n) and all(fnmatch.fnmatchcase(b, a) for a, b in zip(p, n))


def _dtensor_style(linear):
    """A DTensor weight's style: Shard(0) colwise, Shard(1) rowwise, else None."""
    from torch.distributed.tensor import DTensor
    w = linear.weight
    if not isinstance(w, DTensor) or len(w.placements) != 1 or not w.placements[0].is_shard():
        return None
    return {0: "colwise", 1: "rowwise"}.get(w.placements[0].dim)


def _local(t, dim, ctx, where):
    """This rank's part of t: a DTensor's local shard along dim (its whole tensor if replicated),
    or chunk `rank` of W along dim (dim None: t itself) as torch's Shard(dim) places it."""
    from torch.distributed.tensor import DTensor
    W, rank = ctx.world_size, ctx.rank
    if isinstance(t, DTensor):
        mesh = t.device_mesh
        if mesh.ndim != 1 or mesh.size() != W or mesh.get_local_rank() != rank:
            raise ValueError(f"swap_linears: {where} is a DTensor on a mesh {mesh} that is not "
                             f"the context's ranks in order (rank {rank} of {W})")
        (p,) = t.placements
        if p.is_replicate():
            t = t.to_local()
        elif dim is not None and p.is_shard(dim):
            return t.to_local().detach()
        else:
            raise ValueError(f"swap_linears: {where} is placed {p}, expected Shard({dim}) or "
                             "Replicate()")
    if dim is None:
        return t.detach()
    if t.shape[dim] % W:
        raise ValueError(f"swap_linears: {where} has {t.shape[dim]} rows / columns along "
                         f"dimension {dim}, not divisible by W={W}")
    return t.detach().chunk(W, dim)[rank]


def swap_linears(model, ctx, plan=None, *, max_m, packed=False, local_ctx=None):
    """Replaces the nn.Linear modules of `model` that `plan` names by fluxcpp's layers with
    replicated activations (sequence_parallel=False), as torch's ColwiseParallel /
    RowwiseParallel shard them: "colwise" -> ColumnParallelLinear (weight and bias Shard(0): this
    rank's output features), "rowwise" -> RowParallelLinear (weight Shard(1), bias replicated,
    added once; GemmAr). Each in a TPLinear (any leading dimensions, max_m rows in all).

    plan: {pattern: style} as parallelize_module takes it (ColwiseParallel() / RowwiseParallel())
    or as Hugging Face's config.base_model_tp_plan ("colwise" / "rowwise"; other styles are left
    alone), patterns relative to `model`, '*' within a dotted atom; None: every nn.Linear whose
    weight is a DTensor sharded on dimension 0 or 1 (a model parallelize_module made). Weights
    are a full tensor (the same on every rank: this rank's chunk is taken) or a DTensor over the
    context's ranks in order (its local shard). Collective (the layers' ops are created, every
    rank in the same order). Returns {name: layer}; close() each when done (collective)."""
    if not isinstance(ctx, Context):
        raise TypeError(f"swap_linears: ctx must be a fluxcpp.Context, got {type(ctx).__name__}")
    found = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        if plan is None:
            style = _dtensor_style(mod)
        else:
            style = next((_style(v) for p, v in plan.items() if _matches(p, name)), None)
        if style is not None:
            found[name] = (mod, style)
    layers = {}
    for name, (lin, style) in found.items():
        dim = _STYLES[style]
        w = _local(lin.weight, dim, ctx, f"{name}.weight")
        b = None if lin.bias is None else _local(lin.bias, 0 if dim == 0 else None, ctx,
                                                 f"{name}.bias")
        if style == "colwise":
            layer = ColumnParallelLinear(ctx, w.shape[1], w.shape[0], max_m, b is not None,
                                         w.dtype, sequence_parallel=False, packed=packed,
                                         local_ctx=local_ctx)
        else:
            layer = RowParallelLinear(ctx, w.shape[1], w.shape[0], max_m, b is not None, w.dtype,
                                      sequence_parallel=False, packed=packed)
        with torch.no_grad():
            layer.weight.copy_(w)
            if b is not None:
                layer.bias.copy_(b)
        layer.weight.requires_grad_(lin.weight.requires_grad)
        if b is not None:
            layer.bias.requires_grad_(lin.bias.requires_grad)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, TPLinear(layer))
        layers[name] = layer
    return layers
