#!/usr/bin/python3
"""An expert-parallel MoE layer on fluxcpp, checked against one rank, timed against torch + gloo.

Every rank holds T/W tokens and E/W experts (SwiGLU FFNs: gate/up [2*ffn, hidden], down
[hidden, ffn]); a replicated router picks --topk experts per token (softmax, top-k, the k weights
renormalised). Forward only (fluxcpp's MoE ops have no autograd).

  fluxcpp          routing (torch) -> fluxcpp.MoeDispatch (each token's k copies to their
                   experts' ranks, rows grouped by local expert) -> fluxcpp.GroupedGemm (gate/up)
                   -> SwiGLU -> GroupedGemm (down) -> fluxcpp.MoeCombine (rows back to their
                   tokens, weighted and summed).
  torch+gloo a2a   the usual hand-written path: the rows sorted by expert, the counts exchanged
                   with dist.all_to_all_single, the rows (and their expert ids) with
                   all_to_all_single (uneven splits), one torch.mm per local expert, the rows back
                   with all_to_all_single, weighted sum with index_add_. (gloo in torch 1.13 has
                   all_to_all_single but not the list all_to_all; bf16 travels as its bits
                   viewed as f16.)
  torch+gloo ag    without an all-to-all: dist.all_gather of the tokens and routing, every rank
                   runs its experts on the tokens routed to them, dist.all_reduce of the weighted
                   sums (in f32) and this rank's rows.

The dispatched rows are checked bitwise against the tokens routed to this rank's experts; every
path's output against the whole layer on one rank in f64 (built by every rank from the same
seeds, without communication), within a tolerance scaled with the dot products' length. A
mismatch prints MISMATCH and exits with status 1 on every rank. Then each path is timed (median
over --repeat runs of the slowest rank, the paths taking turns run by run), with "expert GEMMs
only" (the two GroupedGemm calls on the dispatched rows, no communication) as the floor.

  mpirun -np 2 python3 python/examples/moe_ep.py                        # small, quick
  mpirun -np 2 python3 python/examples/moe_ep.py --tokens 1024 --hidden 1024 --ffn 1024 \\
      --experts 8 --topk 2 --dtype bf16
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
    a("--tokens", type=int, default=96, help="tokens T of the whole batch (divisible by the ranks)")
    a("--hidden", type=int, default=128)
    a("--ffn", type=int, default=256, help="each expert's intermediate size")
    a("--experts", type=int, default=6, help="experts E (divisible by the ranks)")
    a("--topk", type=int, default=2, help="experts per token")
    a("--dtype", choices=tuple(DTYPES), default="f32")
    add_run_args(a, "add 1 to one expert weight of the fluxcpp path on the last rank (the check "
                 "must then fail: the tests use it)")
    args = p.parse_args(argv)
    if args.tokens % W or args.experts % W:
        p.error(f"--tokens {args.tokens} and --experts {args.experts} must be divisible by the "
                f"{W} ranks")
    if not 1 <= args.topk <= args.experts:
        p.error("--topk must be in [1, --experts]")
    return args


def route(x, router, k):
    """(ids [T, k] int32, weights [T, k] f32): softmax over the experts, top-k, renormalised."""
    probs = torch.softmax((x @ router.t()).float(), -1)
    w, ids = torch.topk(probs, k, -1)
    return ids.to(torch.int32), w / w.sum(-1, keepdim=True)


def swiglu(h):
    f = h.shape[-1] // 2
    return torch.nn.functional.silu(h[:, :f]) * h[:, f:]


def expert(x, gate_up, down):
    return swiglu(x @ gate_up.t()) @ down.t()


def bits(x):
    return x.view(torch.float16) if x.dtype == torch.bfloat16 else x


def unbits(x, dtype):
    return x.view(dtype) if dtype == torch.bfloat16 else x


class FluxMoe:
    def __init__(self, ctx, args, dtype, gate_up, down):
        per, H, F, K, E = args.tokens // W, args.hidden, args.ffn, args.topk, args.experts
        L, cap = E // W, W * (args.tokens // W) * K
        self.gate_up, self.down = gate_up, down
        self.dispatch = fluxcpp.MoeDispatch(ctx, per, H, K, E, cap, dtype)
        self.gemm1 = fluxcpp.GroupedGemm(ctx, L, cap, 2 * F, H, dtype)
        self.gemm2 = fluxcpp.GroupedGemm(ctx, L, cap, H, F, dtype)
        self.combine = fluxcpp.MoeCombine(ctx, per, H, K, E, cap, dtype)
        self.recv = torch.empty((cap, H), dtype=dtype)
        self.out = torch.empty((per, H), dtype=dtype)

    def experts(self, got):
        return self.gemm2(swiglu(self.gemm1(got.recv, got.expert_counts, self.gate_up)),
                          got.expert_counts, self.down)

    def __call__(self, x, ids, w, keep=None):
        got = self.dispatch(x, ids, recv=self.recv)
        if keep is not None:
            keep.append(got)
        return self.combine(self.experts(got), ids, w, out=self.out)

    def close(self):
        for op in (self.dispatch, self.gemm1, self.gemm2, self.combine):
            op.close()


class TorchA2a:
    """all_to_all_single there and back, one torch.mm chain per local expert."""

    def __init__(self, args, gate_up, down):
        self.E, self.L = args.experts, args.experts // W
        self.gate_up, self.down = gate_up, down

    def __call__(self, x, ids, w):
        T, K = ids.shape
        flat = ids.reshape(-1).long()
        order = torch.argsort(flat, stable=True)            # slots by expert, so by rank
        send_ids = flat[order]
        rows = x[order // K]
        send_counts = torch.bincount(send_ids // self.L, minlength=W)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        recv = torch.empty((sum(rc), x.shape[1]), dtype=x.dtype)
        dist.all_to_all_single(bits(recv), bits(rows), rc, sc)
        recv_ids = torch.empty(sum(rc), dtype=torch.int64)
        dist.all_to_all_single(recv_ids, send_ids, rc, sc)
        out = torch.empty_like(recv)
        local = recv_ids - RANK * self.L
        for e in range(self.L):
            sel = (local == e).nonzero().squeeze(1)
            if sel.numel():
                out[sel] = expert(recv[sel], self.gate_up[e], self.down[e])
        back = torch.empty_like(rows)
        dist.all_to_all_single(bits(back), bits(out), sc, rc)
        y = torch.zeros((T, x.shape[1]), dtype=torch.float32)
        y.index_add_(0, order // K, back.float() * w.reshape(-1)[order, None])
        return y.to(x.dtype)


class TorchAllGather:
    """all_gather of the tokens and routing, local experts, all_reduce + this rank's rows."""

    def __init__(self, args, gate_up, down):
        self.L = args.experts // W
        self.gate_up, self.down = gate_up, down

    def __call__(self, x, ids, w):
        T = x.shape[0]
        parts = [torch.empty_like(bits(x)) for _ in range(W)]
        dist.all_gather(parts, bits(x))
        xs = unbits(torch.cat(parts), x.dtype)
        id_parts = [torch.empty_like(ids) for _ in range(W)]
        dist.all_gather(id_parts, ids)
        w_parts = [torch.empty_like(w) for _ in range(W)]
        dist.all_gather(w_parts, w)
        all_ids, all_w = torch.cat(id_parts), torch.cat(w_parts)
        y = torch.zeros((T * W, x.shape[1]), dtype=torch.float32)
        for e in range(self.L):
            tok, slot = (all_ids == RANK * self.L + e).nonzero(as_tuple=True)
            if tok.numel():
                h = expert(xs[tok], self.gate_up[e], self.down[e])
                y.index_add_(0, tok, h.float() * all_w[tok, slot, None])
        dist.all_reduce(y)
        return y[RANK * T:(RANK + 1) * T].to(x.dtype)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.dtype]
    T, H, F, K, E = args.tokens, args.hidden, args.ffn, args.topk, args.experts
    per, L = T // W, E // W
    s = args.seed
    x = seeded((T, H), s).to(dtype)
    router = seeded((E, H), s + 1, scale=H ** -0.5).to(dtype)
    gate_up = seeded((E, 2 * F, H), s + 2, scale=H ** -0.5).to(dtype)
    down = seeded((E, H, F), s + 3, scale=F ** -0.5).to(dtype)
    # routing of each rank's block, as that rank computes it
    routed = [route(x[r * per:(r + 1) * per], router, K) for r in range(W)]
    ids_all = torch.cat([i for i, _ in routed])
    w_all = torch.cat([w for _, w in routed])

    # the one-rank reference in f64
    ref = torch.zeros((T, H), dtype=torch.float64)
    for e in range(E):
        tok, slot = (ids_all == e).nonzero(as_tuple=True)
        if tok.numel():
            h = expert(x[tok].double(), gate_up[e].double(), down[e].double())
            ref.index_add_(0, tok, h * w_all[tok, slot, None].double())
    mine = slice(RANK * per, (RANK + 1) * per)
    x_r, (ids_r, w_r) = x[mine].contiguous(), routed[RANK]
    # the rows this rank's experts receive, in MoeDispatch's order: (expert, source rank, t, k)
    want_recv = [x[src * per + t] for e in range(RANK * L, (RANK + 1) * L) for src in range(W)
                 for t in range(per) for k in range(K) if routed[src][0][t, k] == e]
    want_recv = torch.stack(want_recv) if want_recv else torch.empty((0, H), dtype=dtype)

    init_gloo()
    check = Checker("moe_ep")
    tol = tolerance(dtype, H + F + K)
    local = slice(RANK * L, (RANK + 1) * L)
    gu_r, dn_r = gate_up[local].contiguous(), down[local].contiguous()
    with fluxcpp.Context() as ctx:
        flux_gu = gu_r.clone()
        if args.corrupt and RANK == W - 1:
            flux_gu[0, 0] += 1
        flux = FluxMoe(ctx, args, dtype, flux_gu, dn_r)
        keep = []
        y = flux(x_r, ids_r, w_r, keep)
        check.compare("fluxcpp dispatched rows", keep[0].recv, want_recv, 0)
        check.compare("fluxcpp y", y, ref[mine], tol)
        a2a, ag = TorchA2a(args, gu_r, dn_r), TorchAllGather(args, gu_r, dn_r)
        check.compare("torch+gloo a2a y", a2a(x_r, ids_r, w_r), ref[mine], tol)
        check.compare("torch+gloo ag y", ag(x_r, ids_r, w_r), ref[mine], tol)
        if not check.report() and not args.no_bench:
            bench(args, flux, a2a, ag, x_r, router, keep[0])
        flux.close()
    check.exit_if_failed()  # after closing the ops: status 1 on a mismatch
    dist.destroy_process_group()


def bench(args, flux, a2a, ag, x_r, router, got):
    K = args.topk

    def layer(path):
        def run():
            ids, w = route(x_r, router, K)
            path(x_r, ids, w)
        return run

    with torch.no_grad():
        t = timed({"fluxcpp": layer(flux), "torch+gloo a2a": layer(a2a),
                   "torch+gloo ag": layer(ag), "expert GEMMs only": lambda: flux.experts(got)},
                  args.warmup, args.repeat)
    if RANK == 0:
        print(f"moe_ep: W={W} dtype={args.dtype} tokens={args.tokens} hidden={args.hidden} "
              f"ffn={args.ffn} experts={args.experts} topk={K} (median of {args.repeat}, "
              "slowest rank, ms)")
        fl = t["fluxcpp"]
        print(f"  fluxcpp {fl:8.3f}  torch+gloo a2a {t['torch+gloo a2a']:8.3f} "
              f"({t['torch+gloo a2a'] / fl:.2f}x)  torch+gloo ag {t['torch+gloo ag']:8.3f} "
              f"({t['torch+gloo ag'] / fl:.2f}x)  expert GEMMs only "
              f"{t['expert GEMMs only']:8.3f}", flush=True)
    append_json(args.json, {"example": "moe_ep", "world": W, "dtype": args.dtype,
                            "tokens": args.tokens, "hidden": args.hidden, "ffn": args.ffn,
                            "experts": args.experts, "topk": K, "repeat": args.repeat,
                            "tag": args.tag,
                            **{k.replace(" ", "_") + "_ms": v for k, v in t.items()}})


if __name__ == "__main__":
    main()
