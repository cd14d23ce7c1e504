"""Ops other branches add to the C library (MoeDispatch, MoeCombine, AgScatterGroupedGemm,
GroupedGemmGatherRs, AsyncSendRecv), each against torch + gloo. Each part runs when the loaded
libfluxcpp exports the op and says SKIP otherwise; constructing it then raises
fluxcpp.Unavailable (a fluxcpp.Error and a NotImplementedError), which is checked."""
import torch
import torch.distributed as dist

import fluxcpp
from support import (RANK, W, available, check, close, context, equal, finish, init_gloo, raises,
                     tol_for)

init_gloo()


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def gather_obj(x):
    parts = [torch.empty_like(x) for _ in range(W)]
    dist.all_gather(parts, x.contiguous())
    return parts


def routing(T, K, E, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(-1, E, (T, K), generator=g, dtype=torch.int32)
    return ids, torch.rand((T, K), generator=g)


with context() as ctx:
    T, K, E, hidden = 6, 2, 2 * W, 16
    L = E // W
    if available("moe_dispatch", "moe_combine"):
        with fluxcpp.MoeDispatch(ctx, T, hidden, K, E, 0, torch.float32) as disp, \
                fluxcpp.MoeCombine(ctx, T, hidden, K, E, 0, torch.float32) as comb:
            x = rand((T, hidden), torch.float32, RANK)
            ids, wts = routing(T, K, E, RANK)
            res = disp(x, ids, wts)
            xs, idss, wss = gather_obj(x), gather_obj(ids), gather_obj(wts)
            rows, src, rw = [], [], []
            for e in range(RANK * L, (RANK + 1) * L):  # (local expert, source rank, t, k)
                for s in range(W):
                    for t in range(T):
                        for k in range(K):
                            if idss[s][t, k] == e:
                                rows.append(xs[s][t]); src.append([s, t, k]); rw.append(wss[s][t, k])
            R = len(rows)
            check(res.recv.shape == (R, hidden), f"moe_dispatch rows {res.recv.shape[0]} != {R}")
            if R:
                equal(res.recv, torch.stack(rows), "moe_dispatch recv")
                equal(res.recv_src, torch.tensor(src, dtype=torch.int32), "moe_dispatch recv_src")
                equal(res.recv_weights, torch.stack(rw), "moe_dispatch recv_weights")
            y = comb(res.recv * 2, ids, wts)
            ref = torch.zeros(T, hidden, dtype=torch.float64)
            for t in range(T):
                for k in range(K):
                    if ids[t, k] >= 0:
                        ref[t] += float(wts[t, k]) * 2 * x[t].double()
            close(y, ref, "moe_combine(dispatch(x) * 2)", 1e-6)
    else:
        raises(NotImplementedError, lambda: fluxcpp.MoeDispatch(ctx, T, hidden, K, E, 0,
                                                                torch.float32),
               "MoeDispatch on a library without it", status=fluxcpp.Status.INVALID_USAGE,
               contains=("fluxcpp_moe_dispatch_create",))

    if available("ag_scatter_grouped_gemm", "grouped_gemm_gather_rs"):
        Tg, ffn = 2 * W, 12
        ids, wts = routing(Tg, K, E, 1234)  # identical on every rank
        lay = fluxcpp.moe_layout(ids, E, 1)
        w0 = rand((E, ffn, hidden), torch.float32, 3)  # expert e's ffn columns, all ranks
        w1 = rand((E, hidden, ffn), torch.float32, 4)
        with fluxcpp.AgScatterGroupedGemm(ctx, Tg, hidden, ffn, K, E, W, torch.float32) as l0, \
                fluxcpp.GroupedGemmGatherRs(ctx, Tg, hidden, ffn, K, E, W, torch.float32) as l1:
            x = rand((Tg // W, hidden), torch.float32, RANK)
            X = torch.cat(gather_obj(x))
            lo, hi = RANK * L, (RANK + 1) * L
            h = l0(x, lay.expert_counts, lay.scatter_index, w0[lo:hi].contiguous())
            P = torch.cat([torch.zeros(1, dtype=torch.int64), lay.expert_counts.cumsum(0)])
            b = int(P[lo])
            ref = torch.zeros(int(P[hi]) - b, ffn, dtype=torch.float64)
            for t in range(Tg):
                for k in range(K):
                    j = int(lay.scatter_index[t, k])
                    if j >= 0 and b <= j < int(P[hi]):
                        e = int(ids[t, k])
                        ref[j - b] = X[t].double() @ w0[e].double().t()
            close(h, ref, "ag_scatter_grouped_gemm", tol_for(torch.float32, hidden))
            y = l1(h, lay.expert_counts, lay.scatter_index, w1[lo:hi].contiguous(), wts)
            full = torch.zeros(Tg, hidden, dtype=torch.float64)
            for t in range(Tg):
                for k in range(K):
                    e = int(ids[t, k])
                    if e >= 0:
                        full[t] += float(wts[t, k]) * (X[t].double() @ w0[e].double().t()) @ \
                            w1[e].double().t()
            close(y, full[RANK * Tg // W:(RANK + 1) * Tg // W], "grouped_gemm_gather_rs",
                  tol_for(torch.float32, hidden * ffn))
    else:
        raises(fluxcpp.Unavailable, lambda: fluxcpp.GemmGroupedV3AGScatter(
            ctx, 2 * W, hidden, 8, K, E, W, torch.float32), "AgScatterGroupedGemm unavailable")

    if available("async_send_recv"):
        with fluxcpp.AsyncSendRecv(ctx, 4, 8, torch.float32, num_slots=2) as p2p:
            if W > 1:
                nxt, prv = (RANK + 1) % W, (RANK - 1) % W
                data = rand((3, 8), torch.float32, RANK)
                seq = p2p.isend(nxt, data)
                got = p2p.recv(prv)
                p2p.send_wait(nxt, seq)
                equal(got, rand((3, 8), torch.float32, prv), "async_send_recv ring message")
                check(p2p.probe(prv) == -1, "async_send_recv probe of an empty queue")
    else:
        raises(fluxcpp.Unavailable, lambda: fluxcpp.AsyncSendRecv(ctx, 4, 8, torch.float32),
               "AsyncSendRecv unavailable")

finish("python.moe_ep")
