#!/usr/bin/python3
"""A sequence-parallel MLP on fluxcpp, checked against one rank and timed against torch + gloo.

y = act(x @ w1.T) @ w2.T with Megatron's sequence parallelism: every rank holds M/W rows of x,
w1's rows (the first layer's output columns) and w2's columns are split over the ranks.

  fluxcpp      fluxcpp.ColumnParallelLinear(sequence_parallel=True) (AgGemm: all-gather of the
               rows fused with the GEMM) -> activation -> fluxcpp.RowParallelLinear(
               sequence_parallel=True) (GemmRs: GEMM fused with the reduce-scatter); backward
               through their autograd (GemmRs / AgGemm again), packed weights for the forward
               under no_grad.
  torch+gloo   the same math as a user writes it: dist.all_gather + torch.mm, activation,
               torch.mm + the reduce-scatter — which gloo in torch 1.13 does not have, so it is
               dist.all_reduce + this rank's rows (bf16 is gathered as its bits viewed as
               f16 and reduced in f32: gloo has neither for bf16); backward through two
               autograd.Functions built from the same calls.

Both are checked against the whole MLP on one rank in f64 (every rank builds it from the same
seeds, without communication): y, and with backward dx, dw1, dw2, within a tolerance scaled with
the dot products' length; with --data int --act relu in f32 every value is an exact integer, so
the check is bitwise. A mismatch prints MISMATCH and exits with status 1 on every rank.
Then each backend is timed (forward, and forward + backward; median over --repeat runs of the
slowest rank, the backends taking turns run by run), with "compute only" (this rank's torch.mm's
on already gathered rows, no communication) as the floor.

  mpirun -np 2 python3 python/examples/sp_mlp.py                        # small, quick
  mpirun -np 2 python3 python/examples/sp_mlp.py --tokens 2048 --hidden 1024 --ffn 2816 --dtype bf16
"""
import argparse

import torch
import torch.distributed as dist

import fluxcpp
from example_common import (DTYPES, RANK, W, Checker, add_run_args, append_json, init_gloo, seeded,
                            timed, tolerance)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = p.add_argument
    a("--tokens", type=int, default=192, help="rows M of the whole batch (divisible by the ranks)")
    a("--hidden", type=int, default=256, help="the MLP's input and output features")
    a("--ffn", type=int, default=768, help="intermediate features (divisible by the ranks)")
    a("--dtype", choices=tuple(DTYPES), default="f32")
    a("--act", choices=("gelu", "relu"), default="gelu")
    a("--data", choices=("normal", "int"), default="normal",
      help="seeded N(0, 1) inputs and N(0, 1/fan_in) weights, or integers in {-1, 0, 1} (with "
      "--act relu in f32: exact, checked bitwise)")
    a("--no-backward", action="store_true", help="forward only")
    a("--no-packed", action="store_true", help="fluxcpp's inference forward on the weights as "
      "they lie, not on PackedWeight copies")
    add_run_args(a, "add 1 to one weight of the fluxcpp layers on the last rank (the check must "
                 "then fail: the tests use it)")
    args = p.parse_args(argv)
    if args.tokens % W or args.ffn % W:
        p.error(f"--tokens {args.tokens} and --ffn {args.ffn} must be divisible by the {W} ranks")
    return args


def act_fn(name):
    return torch.nn.functional.gelu if name == "gelu" else torch.relu


# ------------------------------------------------------------------------------------------
# torch + gloo: the collectives a user writes, as autograd Functions

def gloo_all_gather(x):
    """[m, k] on every rank -> [W*m, k] (bf16 travels as its bits, viewed as f16)."""
    send = x.view(torch.float16) if x.dtype == torch.bfloat16 else x
    parts = [torch.empty_like(send) for _ in range(W)]
    dist.all_gather(parts, send.contiguous())
    y = torch.cat(parts)
    return y.view(torch.bfloat16) if x.dtype == torch.bfloat16 else y


def gloo_reduce_scatter(x):
    """[W*m, n] partial sums -> this rank's [m, n] rows of the sum: all_reduce + slice (gloo has
    no reduce_scatter; bf16 summed in f32)."""
    t = x.float() if x.dtype == torch.bfloat16 else x.clone()
    dist.all_reduce(t)
    m = x.shape[0] // W
    return t[RANK * m:(RANK + 1) * m].to(x.dtype)


def _conjugate(forward_fn, backward_fn):
    """An autograd function whose backward is the conjugate collective of its forward."""
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return forward_fn(x)

        @staticmethod
        def backward(ctx, dy):
            return backward_fn(dy.contiguous())
    return Fn


AllGather = _conjugate(gloo_all_gather, gloo_reduce_scatter)
ReduceScatter = _conjugate(gloo_reduce_scatter, gloo_all_gather)


class TorchMlp:
    def __init__(self, w1, w2, act):
        self.w1, self.w2 = (w.clone().requires_grad_() for w in (w1, w2))
        self.act = act

    def __call__(self, x):
        return ReduceScatter.apply(self.act(AllGather.apply(x) @ self.w1.t()) @ self.w2.t())

    def grads(self):
        return self.w1.grad, self.w2.grad

    def zero(self):
        self.w1.grad = self.w2.grad = None


class FluxMlp:
    def __init__(self, ctx, w1, w2, act, M, dtype, packed):
        f, H = w1.shape
        self.col = fluxcpp.ColumnParallelLinear(ctx, H, f, M, dtype=dtype, sequence_parallel=True,
                                                packed=packed)
        self.row = fluxcpp.RowParallelLinear(ctx, f, H, M, dtype=dtype, sequence_parallel=True,
                                             packed=packed)
        with torch.no_grad():
            self.col.weight.copy_(w1)
            self.row.weight.copy_(w2)
        self.act = act

    def __call__(self, x):
        return self.row(self.act(self.col(x)))

    def grads(self):
        return self.col.weight.grad, self.row.weight.grad

    def zero(self):
        self.col.weight.grad = self.row.weight.grad = None

    def close(self):
        self.row.close()
        self.col.close()


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype, act = DTYPES[args.dtype], act_fn(args.act)
    M, H, F = args.tokens, args.hidden, args.ffn
    m, f = M // W, F // W
    rows, cols = slice(RANK * m, (RANK + 1) * m), slice(RANK * f, (RANK + 1) * f)
    s, data = args.seed, args.data
    # the whole problem in f64, rounded to dtype as the backends see it
    x = seeded((M, H), s, data).to(dtype)
    w1 = seeded((F, H), s + 1, data, H ** -0.5).to(dtype)
    w2 = seeded((H, F), s + 2, data, F ** -0.5).to(dtype)
    dy = seeded((M, H), s + 3, data).to(dtype)
    backward = not args.no_backward

    # the one-rank reference in f64
    X, W1, W2 = (t.double().requires_grad_() for t in (x, w1, w2))
    Y = act(X @ W1.t()) @ W2.t()
    if backward:
        Y.backward(dy.double())
    exact = data == "int" and args.act == "relu" and dtype == torch.float32
    tol_y = 0 if exact else tolerance(dtype, H + F)
    tol_g = 0 if exact else tolerance(dtype, M + H + F)

    init_gloo()
    check = Checker("sp_mlp")
    with fluxcpp.Context() as ctx:
        w1_r, w2_r = w1[cols].contiguous(), w2[:, cols].contiguous()
        flux = FluxMlp(ctx, w1_r, w2_r, act, M, dtype, not args.no_packed)
        if args.corrupt and RANK == W - 1:
            with torch.no_grad():
                flux.row.weight[0, 0] += 1
        torch_mlp = TorchMlp(w1_r, w2_r, act)
        x_r, dy_r = x[rows].contiguous(), dy[rows].contiguous()
        for name, mlp in (("fluxcpp", flux), ("torch+gloo", torch_mlp)):
            xi = x_r.clone().requires_grad_(backward)
            y = mlp(xi)
            check.compare(f"{name} y", y, Y[rows], tol_y)
            if backward:
                y.backward(dy_r)
                g1, g2 = mlp.grads()
                check.compare(f"{name} dx", xi.grad, X.grad[rows], tol_g)
                check.compare(f"{name} dw1", g1, W1.grad[cols], tol_g)
                check.compare(f"{name} dw2", g2, W2.grad[:, cols], tol_g)
                mlp.zero()
        if not check.report() and not args.no_bench:
            bench(args, flux, torch_mlp, x_r, dy_r, w1_r, w2_r, act, backward)
        flux.close()
    check.exit_if_failed()  # after closing the ops: status 1 on a mismatch
    dist.destroy_process_group()


def bench(args, flux, torch_mlp, x_r, dy_r, w1_r, w2_r, act, backward):
    x_all = torch.cat([x_r] * W)  # the gathered rows' shape, for the compute-only floor
    w1t, w2t = w1_r.t(), w2_r.t()
    with torch.no_grad():  # (gloo cannot write into inference tensors)
        t = {f"fwd {k}": v for k, v in timed({
            "fluxcpp": lambda: flux(x_r), "torch+gloo": lambda: torch_mlp(x_r),
            "compute only": lambda: act(x_all @ w1t) @ w2t}, args.warmup, args.repeat).items()}

    def step(mlp):
        xi = x_r.clone().requires_grad_()
        mlp(xi).backward(dy_r)
        mlp.zero()

    def step_compute():  # this rank's GEMMs of forward + backward, no communication
        h = x_all @ w1t
        a = act(h)
        a @ w2t
        dY = torch.cat([dy_r] * W)
        dY.t() @ a
        da = dY @ w2_r
        da.t() @ x_all
        da @ w1_r

    def step_compute_no_grad():
        with torch.no_grad():
            step_compute()

    if backward:
        t.update({f"fwd+bwd {k}": v for k, v in timed({
            "fluxcpp": lambda: step(flux), "torch+gloo": lambda: step(torch_mlp),
            "compute only": step_compute_no_grad}, args.warmup, args.repeat).items()})
    if RANK == 0:
        print(f"sp_mlp: W={W} dtype={args.dtype} tokens={args.tokens} hidden={args.hidden} "
              f"ffn={args.ffn} act={args.act} (median of {args.repeat}, slowest rank, ms)")
        for p in ("fwd", "fwd+bwd") if backward else ("fwd",):
            fl, tg, co = (t[f"{p} {b}"] for b in ("fluxcpp", "torch+gloo", "compute only"))
            print(f"  {p:8s} fluxcpp {fl:8.3f}  torch+gloo {tg:8.3f}  ({tg / fl:.2f}x)  "
                  f"compute only {co:8.3f}", flush=True)
    append_json(args.json, {"example": "sp_mlp", "world": W, "dtype": args.dtype,
                            "tokens": args.tokens, "hidden": args.hidden, "ffn": args.ffn,
                            "act": args.act, "repeat": args.repeat, "tag": args.tag,
                            **{k.replace(" ", "_") + "_ms": v for k, v in t.items()}})


if __name__ == "__main__":
    main()
