"""Local ops: GroupedGemm against a torch.mm loop, moe_layout against a sorted reference,
inplace_cast against torch's own conversions (bitwise)."""
import torch

import fluxcpp
from support import RANK, check, close, context, equal, finish, raises, tol_for


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


with context() as ctx:
    for din, dout in ((torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                      (torch.float64, torch.float64)):
        for transpose in (False, True):
            G, n, k = 4, 24, 40
            splits = [5, 0, 9, 2]
            with fluxcpp.GroupedGemm(ctx, G, 32, n, k, din, dout, transpose_weight=transpose) as op:
                x = rand((sum(splits), k), din, RANK)
                w = rand((G, n, k), din, 3)
                scale = torch.tensor([1.0, 2.0, 0.5, -1.0])
                wc = w.transpose(1, 2).contiguous() if transpose else w
                y = op(x, torch.tensor(splits), wc, scale)
                parts, p = [], 0
                for g, s in enumerate(splits):
                    parts.append(scale[g].double() * (x[p:p + s].double() @ w[g].double().t()))
                    p += s
                close(y, torch.cat(parts), f"grouped_gemm {din}->{dout} transpose={transpose}",
                      tol_for(din, k))

    # moe_layout: expert-major rows sorted by (expert, t, k), -1 slots unrouted.
    g = torch.Generator().manual_seed(4)
    T, K, E, R = 13, 3, 8, 2
    ids = torch.randint(-1, E, (T, K), generator=g, dtype=torch.int32)
    lay = fluxcpp.moe_layout(ids, E, R)
    slots = sorted((int(ids[t, k]), t, k) for t in range(T) for k in range(K) if ids[t, k] >= 0)
    counts = torch.bincount(ids[ids >= 0].long(), minlength=E)
    equal(lay.expert_counts, counts, "moe_layout expert_counts")
    equal(lay.rank_rows, counts.view(R, -1).sum(1), "moe_layout rank_rows")
    want_scatter = torch.full((T, K), -1, dtype=torch.int32)
    gather = torch.full((T * K,), -1, dtype=torch.int32)
    topk = torch.full((T * K,), -1, dtype=torch.int32)
    for row, (e, t, k) in enumerate(slots):
        want_scatter[t, k], gather[row], topk[row] = row, t, k
    equal(lay.scatter_index, want_scatter, "moe_layout scatter_index")
    equal(lay.gather_index, gather, "moe_layout gather_index")
    equal(lay.topk_index, topk, "moe_layout topk_index")
    tokens = [len({t for (e, t, k) in slots if e // (E // R) == q}) for q in range(R)]
    equal(lay.rank_tokens, torch.tensor(tokens), "moe_layout rank_tokens")
    raises(fluxcpp.Error, lambda: fluxcpp.moe_layout(ids, 7, 2), "moe_layout E % ranks",
           status=fluxcpp.Status.INVALID_ARGUMENT)

    # inplace_cast: each pair, with and without the context, bitwise against torch's .to().
    x = rand((37,), torch.float64, 9) * 1e3
    for src, dst in ((torch.float32, torch.bfloat16), (torch.float64, torch.float32)):
        for c in (None, ctx):
            t = x.to(src).view(37)
            want = t.to(dst)
            got = fluxcpp.inplace_cast(t, dst, ctx=c)
            equal(got, want, f"inplace_cast {src}->{dst}")
            check(got.data_ptr() == t.data_ptr(), "inplace_cast works in place")
    for src, dst in ((torch.bfloat16, torch.float32), (torch.float32, torch.float64)):
        big = torch.zeros(2 * 37, dtype=src)
        big[:37] = x.to(src)
        got = fluxcpp.inplace_cast(big[:37], dst)
        equal(got, x.to(src).to(dst), f"inplace_cast widening {src}->{dst}")
        raises(ValueError, lambda: fluxcpp.inplace_cast(x.to(src), dst),
               f"inplace_cast widening without room {src}->{dst}", contains=("bytes",))
    raises(TypeError, lambda: fluxcpp.inplace_cast(x, torch.bfloat16), "inplace_cast f64->bf16")

finish("python.local")
