"""Sizes and counts through Python: every create size of every op class (and Context's int
settings, the layers', moe_layout's, AsyncSendRecv's ranks and sequence numbers, split lists) is
a Python int within what the C parameter holds. bool, float, None and str are TypeError;
2**64 + 128, 2**70, 2**63 (past int64), -1, 0 where C needs a positive value and 2**31 for a C int
are ValueError; each message names the op, the argument and the value. No bad value reaches C
(the context's timeout bounds any hang this would cause). A valid int, or a numpy integer,
works and the attribute holds exactly the int C received."""
import numpy as np
import torch

import fluxcpp
from support import RANK, W, available, check, finish, raises

f32 = torch.float32
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
BAD_TYPES = [True, False, 1.5, None, "8"]
BAD_RANGE = [2**64 + 128, 2**70, -1, 2**63]


def arg(name, value, minimum=0, int32=False):
    """A size argument: its name, a valid value, the smallest value C takes, whether it is int."""
    return (name, value, minimum, int32)


def plain(name, value):
    """A non-size argument (a dtype, a flag)."""
    return (name, value, None, False)


# (class or function, its C op (for available()), positional arguments after ctx)
CASES = [
    (fluxcpp.AllGather, "all_gather", [arg("max_m", 4 * W), arg("k", 8, 1), plain("dtype", f32)]),
    (fluxcpp.ReduceScatter, "reduce_scatter",
     [arg("max_m", 4 * W), arg("n", 8, 1), plain("dtype", f32)]),
    (fluxcpp.AgGemm, "ag_gemm",
     [arg("max_m", 4 * W), arg("n", 16, 1), arg("k", 8, 1), plain("input_dtype", f32)]),
    (fluxcpp.GemmRs, "gemm_rs",
     [arg("max_m", 4 * W), arg("n", 16, 1), arg("k", 8, 1), plain("input_dtype", f32)]),
    (fluxcpp.AllToAllSingle, "all_to_all_single",
     [arg("max_rows", 4 * W), arg("n", 8, 1), plain("dtype", f32)]),
    (fluxcpp.A2aGemm, "a2a_gemm",
     [arg("max_m", 4 * W), arg("n", 16, 1), arg("k", 8, 1), plain("input_dtype", f32)]),
    (fluxcpp.GemmA2aTranspose, "gemm_a2a_transpose",
     [arg("max_bs", 1), arg("max_seq", 2 * W), arg("hidden", 8, 1), arg("nheads", W, 1),
      arg("head_dim", 4, 1), plain("input_dtype", f32)]),
    (fluxcpp.A2aTransposeGemm, "a2a_transpose_gemm",
     [arg("max_bs", 1), arg("max_seq", 2 * W), arg("nheads", W, 1), arg("head_dim", 4, 1),
      arg("n", 8, 1), plain("input_dtype", f32)]),
    (fluxcpp.GroupedGemm, "grouped_gemm",
     [arg("num_groups", 2, 1), arg("max_m", 8), arg("n", 8, 1), arg("k", 8, 1),
      plain("input_dtype", f32)]),
    (fluxcpp.MoeDispatch, "moe_dispatch",
     [arg("max_tokens", 4), arg("hidden", 8, 1), arg("topk", 2, 1), arg("num_experts", 2 * W, 1),
      arg("max_recv_rows", 0), plain("dtype", f32)]),
    (fluxcpp.MoeCombine, "moe_combine",
     [arg("max_tokens", 4), arg("hidden", 8, 1), arg("topk", 2, 1), arg("num_experts", 2 * W, 1),
      arg("max_recv_rows", 0), plain("input_dtype", f32)]),
    (fluxcpp.AgScatterGroupedGemm, "ag_scatter_grouped_gemm",
     [arg("max_tokens", 4 * W), arg("hidden", 8, 1), arg("ffn_shard", 8, 1), arg("topk", 2, 1),
      arg("num_experts", 2 * W, 1), arg("ep_size", W, 1), plain("input_dtype", f32)]),
    (fluxcpp.GroupedGemmGatherRs, "grouped_gemm_gather_rs",
     [arg("max_tokens", 4 * W), arg("hidden", 8, 1), arg("ffn_shard", 8, 1), arg("topk", 2, 1),
      arg("num_experts", 2 * W, 1), arg("ep_size", W, 1), plain("input_dtype", f32)]),
    (fluxcpp.AsyncSendRecv, "async_send_recv",
     [arg("max_m", 4), arg("n", 8, 1), plain("dtype", f32), arg("num_slots", 2, 1, True)]),
    (fluxcpp.ColumnParallelLinear, "ag_gemm",
     [arg("in_features", 8, 1), arg("out_features_shard", 8, 1), arg("max_m", 4 * W)]),
    (fluxcpp.RowParallelLinear, "gemm_rs",
     [arg("in_features_shard", 8, 1), arg("out_features", 8, 1), arg("max_m", 4 * W)]),
]


def bad_values(minimum, int32):
    """(value, exception, text the message must hold) for a size argument."""
    out = [(v, TypeError, type(v).__name__) for v in BAD_TYPES]
    out += [(v, ValueError, str(v)) for v in BAD_RANGE]
    if minimum == 1:
        out.append((0, ValueError, "0"))
    if int32:
        out.append((2**31, ValueError, str(2**31)))
    return out


def expect(exc, fn, where, name, text, what):
    e = raises(exc, fn, what, contains=(where, name, text))
    if e is not None and exc is ValueError:
        check("out of range" in str(e), f"{what}: 'out of range' not in {str(e)!r}")


def close_op(op):
    if op is not None:
        op.close()


def size_matrix(ctx):
    for cls, c_op, args in CASES:
        where = cls.__name__
        kw = {"sequence_parallel": True} if issubclass(cls, torch.nn.Module) else {}
        for i, (name, _, minimum, int32) in enumerate(args):
            if minimum is None:
                continue
            for bad, exc, text in bad_values(minimum, int32):
                vals = [a[1] for a in args]
                vals[i] = bad
                expect(exc, lambda: cls(ctx, *vals, **kw), where, name, text,
                       f"{where}({name}={bad!r})")
        if not available(c_op):
            continue
        # A valid int, then a numpy integer for every size: the attribute is the Python int.
        for conv, label in ((lambda v: v, "int"), (np.int64, "numpy.int64"),
                            (np.int32, "numpy.int32")):
            vals = [a[1] if a[2] is None else conv(a[1]) for a in args]
            op = None
            try:
                op = cls(ctx, *vals, **kw)
            except Exception as e:  # noqa: BLE001 - reported as a failure
                check(False, f"{where} with {label} sizes: {type(e).__name__}: {e}")
                continue
            if not isinstance(op, torch.nn.Module):
                for name, value, minimum, _ in args:
                    if minimum is not None:
                        got = getattr(op, name)
                        check(type(got) is int and got == value,
                              f"{where}.{name} = {got!r} ({type(got).__name__}), expected {value}")
            close_op(op)


def boundaries(ctx):
    # The largest int64 passes the Python check and reaches C, which says it is too large (on
    # every rank alike); one more is a ValueError before C.
    raises(fluxcpp.Error, lambda: fluxcpp.AgGemm(ctx, INT64_MAX, 16, 8, f32), "max_m=INT64_MAX",
           status=fluxcpp.Status.INVALID_ARGUMENT, contains=("max_m",))
    expect(ValueError, lambda: fluxcpp.AgGemm(ctx, INT64_MAX + 1, 16, 8, f32), "AgGemm",
           "max_m", str(INT64_MAX + 1), "max_m=INT64_MAX+1")
    if available("async_send_recv"):
        raises(fluxcpp.Error, lambda: fluxcpp.AsyncSendRecv(ctx, 4, 8, f32, INT32_MAX),
               "num_slots=INT32_MAX", status=fluxcpp.Status.INVALID_ARGUMENT,
               contains=("num_slots",))
    # A numpy bool is a bool.
    expect(TypeError, lambda: fluxcpp.AgGemm(ctx, np.bool_(True), 16, 8, f32), "AgGemm", "max_m",
           "bool", "max_m=numpy.bool_")


def context_and_functions(ctx):
    for name in ("ranks_per_host", "ranks_per_node", "compute_threads", "comm_threads"):
        for bad, exc, text in bad_values(0, True):
            if name == "ranks_per_node" and bad is None:  # the former name's "not given"
                continue
            expect(exc, lambda: fluxcpp.Context(**{name: bad}), "Context", name, text,
                   f"Context({name}={bad!r})")
    raises(ValueError, lambda: fluxcpp.Context(ranks_per_host=1, ranks_per_node=2),
           "Context(ranks_per_host=1, ranks_per_node=2)",
           contains=("Context", "ranks_per_host=1", "ranks_per_node=2", "differ"))
    for bad in (True, "8", None):
        raises(TypeError, lambda: fluxcpp.Context(timeout_s=bad), f"Context(timeout_s={bad!r})",
               contains=("Context", "timeout_s", type(bad).__name__))
    with fluxcpp.Context(timeout_s=np.float64(30), compute_threads=np.int64(1),
                         comm_threads=np.int32(1)) as c2:
        check(c2.world_size == W, "Context with numpy settings")

    ids = torch.zeros((4, 2), dtype=torch.int32)
    for i, name in enumerate(("num_experts", "num_ranks")):
        for bad, exc, text in bad_values(1, False):
            vals = [2 * W, W]
            vals[i] = bad
            expect(exc, lambda: fluxcpp.moe_layout(ids, *vals), "moe_layout", name, text,
                   f"moe_layout({name}={bad!r})")
    lay = fluxcpp.moe_layout(ids, np.int64(2 * W), np.int64(W))
    check(lay.expert_counts.numel() == 2 * W, "moe_layout with numpy sizes")


def forward_sizes(ctx):
    # Split lists: each entry is a size (the same bad entry on every rank, so every rank raises
    # and enters C with the poison; the op stays usable).
    with fluxcpp.AllToAllSingle(ctx, 4 * W, 8, f32) as a2a:
        x = torch.ones(W, 8)
        for bad, exc, text in bad_values(0, False):
            splits = [bad] + [1] * (W - 1)
            expect(exc, lambda: a2a(x, splits, [1] * W), "AllToAllSingle.forward",
                   "input_splits[0]", text, f"AllToAllSingle input_splits[0]={bad!r}")
        y = a2a(x, [np.int64(1)] * W, [1] * W)
        check(torch.equal(y, x), "AllToAllSingle with numpy splits, after the bad ones")
    with fluxcpp.GroupedGemm(ctx, 2, 8, 8, 8, f32) as gg:
        w = torch.zeros(2, 8, 8)
        for bad, exc, text in bad_values(0, False):
            expect(exc, lambda: gg(torch.ones(3, 8), [1, bad], w), "GroupedGemm.forward",
                   "splits[1]", text, f"GroupedGemm splits[1]={bad!r}")
        check(gg(torch.ones(3, 8), [1, np.int32(2)], w).shape == (3, 8),
              "GroupedGemm with a numpy split")

    if not available("async_send_recv"):
        return
    nxt, prv = (RANK + 1) % W, (RANK - 1) % W
    ring = sorted({nxt, prv} - {RANK})
    for bad, exc, text in bad_values(0, True):
        expect(exc, lambda: fluxcpp.AsyncSendRecv(ctx, 4, 8, f32, 2, [bad]), "AsyncSendRecv",
               "peers[0]", text, f"AsyncSendRecv peers=[{bad!r}]")
    raises(TypeError, lambda: fluxcpp.AsyncSendRecv(ctx, 4, 8, f32, 2, 5), "peers=5",
           contains=("AsyncSendRecv", "peers", "int"))
    with fluxcpp.AsyncSendRecv(ctx, 4, 8, f32, 2, [np.int64(p) for p in ring]) as p2p:
        check(p2p.peers == ring and all(type(p) is int for p in p2p.peers),
              f"AsyncSendRecv.peers = {p2p.peers!r}, expected {ring}")
        data = torch.ones(1, 8)
        for fn in ("send", "isend", "recv", "probe", "send_wait", "send_test"):
            pname = "src" if fn in ("recv", "probe") else "dst"
            for bad, exc, text in bad_values(0, True):
                args = {"send": (bad, data), "isend": (bad, data), "recv": (bad,),
                        "probe": (bad,), "send_wait": (bad, 1), "send_test": (bad, 1)}[fn]
                expect(exc, lambda: getattr(p2p, fn)(*args), f"AsyncSendRecv.{fn}", pname, text,
                       f"AsyncSendRecv.{fn}({pname}={bad!r})")
        for fn in ("send_wait", "send_test"):
            # seq is a uint64_t: 2**63 fits, 2**64 does not
            seq_bad = [(v, TypeError, type(v).__name__) for v in BAD_TYPES]
            seq_bad += [(v, ValueError, str(v)) for v in (2**64 + 128, 2**70, -1, 2**64)]
            for bad, exc, text in seq_bad:
                expect(exc, lambda: getattr(p2p, fn)(nxt, bad), f"AsyncSendRecv.{fn}", "seq",
                       text, f"AsyncSendRecv.{fn}(seq={bad!r})")
        if W > 1:
            seq = p2p.isend(np.int64(nxt), data)
            got = p2p.recv(np.int32(prv))
            p2p.send_wait(nxt, np.uint64(seq))
            check(torch.equal(got, data), "AsyncSendRecv with numpy ranks")


with fluxcpp.Context(timeout_s=30) as ctx:
    size_matrix(ctx)
    boundaries(ctx)
    context_and_functions(ctx)
    forward_sizes(ctx)

finish("python.sizes")
