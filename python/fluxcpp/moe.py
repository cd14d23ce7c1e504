"""MoE: moe_layout, GroupedGemm (GemmGroupedV3), MoeDispatch / MoeCombine (expert parallel),
AgScatterGroupedGemm / GroupedGemmGatherRs (GemmGroupedV3AGScatter / GatherRS, MoE under TP)."""
import collections
import ctypes

import torch

from . import _lib
from ._base import Op
from ._checks import c_dtype, int_array, optional, output, size, tensor
from ._lib import checked

MoeLayout = collections.namedtuple(
    "MoeLayout", "expert_counts rank_rows rank_tokens scatter_index gather_index topk_index")
DispatchResult = collections.namedtuple("DispatchResult",
                                        "recv recv_weights recv_src expert_counts")


def moe_layout(topk_ids, num_experts, num_ranks):
    """fluxcpp_moe_layout: the expert-major layout of a routing table topk_ids [T, K] int32.

    Returns MoeLayout(expert_counts [E], rank_rows [num_ranks], rank_tokens [num_ranks] (int64),
    scatter_index [T, K], gather_index [T*K], topk_index [T*K] (int32))."""
    where = "moe_layout"
    p = tensor(where, "topk_ids", topk_ids, torch.int32, (None, None))
    T, K = topk_ids.shape
    E, R = size(where, "num_experts", num_experts, 1), size(where, "num_ranks", num_ranks, 1)
    res = MoeLayout(torch.empty(E, dtype=torch.int64), torch.empty(R, dtype=torch.int64),
                    torch.empty(R, dtype=torch.int64), torch.empty((T, K), dtype=torch.int32),
                    torch.empty(T * K, dtype=torch.int32), torch.empty(T * K, dtype=torch.int32))
    return checked(_lib.fn("fluxcpp_moe_layout")(p, T, K, E, R, *(t.data_ptr() for t in res)), res)


class GroupedGemm(Op):
    """fluxcpp_grouped_gemm (FLUX GemmGroupedV3), local: forward(input, splits, weight,
    scale=None, *, out=None): splits [G] rows per group (int64), input [sum(splits), k],
    weight [G, n, k] ([G, k, n] when transposed), scale [G] f32; out [m, n]."""
    _c = "grouped_gemm"
    _collective = False

    def __init__(self, ctx, num_groups, max_m, n, k, input_dtype, output_dtype=None,
                 transpose_weight=False):
        name = type(self).__name__
        output_dtype = input_dtype if output_dtype is None else output_dtype
        self.num_groups = size(name, "num_groups", num_groups, 1)
        self.max_m = size(name, "max_m", max_m)
        self.n, self.k = size(name, "n", n, 1), size(name, "k", k, 1)
        self.input_dtype, self.output_dtype = input_dtype, output_dtype
        self.transpose_weight = bool(transpose_weight)
        G = self.num_groups
        self._wshape = (G, self.k, self.n) if self.transpose_weight else (G, self.n, self.k)
        self._fw = f"{name}.forward"
        self._create(ctx, G, self.max_m, self.n, self.k, c_dtype(name, "input_dtype", input_dtype),
                     c_dtype(name, "output_dtype", output_dtype), int(self.transpose_weight))
        self._fwd = _lib.fn("fluxcpp_grouped_gemm_forward")

    def forward(self, input, splits, weight, scale=None, *, out=None):
        h = self._handle or self._h()
        fw = self._fw
        sp, vals, keep = int_array(fw, "splits", splits, torch.int64, self.num_groups)
        m = sum(vals)
        ip = tensor(fw, "input", input, self.input_dtype, (m, self.k))
        wp = tensor(fw, "weight", weight, self.input_dtype, self._wshape)
        cp = optional(fw, "scale", scale, torch.float32, (self.num_groups,))
        out, op = output(fw, "out", out, self.output_dtype, (m, self.n))
        return checked(self._fwd(h, ip, sp, wp, cp, op), out)


class _MoeEp(Op):
    """Shared create arguments of MoeDispatch and MoeCombine (ep = W)."""

    def _setup(self, max_tokens, hidden, topk, num_experts, max_recv_rows):
        name = type(self).__name__
        self.max_tokens = size(name, "max_tokens", max_tokens)
        self.hidden, self.topk = size(name, "hidden", hidden, 1), size(name, "topk", topk, 1)
        self.num_experts = size(name, "num_experts", num_experts, 1)
        self.max_recv_rows = size(name, "max_recv_rows", max_recv_rows)

    def _capacity(self):
        return self.max_recv_rows or self._W * self.max_tokens * self.topk


class MoeDispatch(_MoeEp):
    """fluxcpp_moe_dispatch (FLUX DisScatterForward): expert parallel over the context.

    forward(input, topk_ids, topk_weights=None, *, recv=None) -> DispatchResult(recv [R_r,
    hidden] (a view of `recv` when given, which is [capacity, hidden]), recv_weights [R_r] or
    None, recv_src [R_r, 3], expert_counts [L]). On overflow the fluxcpp.Error also has
    .num_recv_rows (this rank's R_r)."""
    _c = "moe_dispatch"

    def __init__(self, ctx, max_tokens, hidden, topk, num_experts, max_recv_rows, dtype):
        self._setup(max_tokens, hidden, topk, num_experts, max_recv_rows)
        self.dtype = dtype
        self._fw = "MoeDispatch.forward"
        self._create(ctx, self.max_tokens, self.hidden, self.topk, self.num_experts,
                     self.max_recv_rows, c_dtype("MoeDispatch", "dtype", dtype))
        self._L = self.num_experts // self._W if self.num_experts % self._W == 0 else 0
        self._fwd = _lib.fn("fluxcpp_moe_dispatch_forward")

    def _poison(self):
        counts = (ctypes.c_int64 * max(self._L, 1))()
        rows = ctypes.c_int64()
        self._fwd(self._handle, None, -1, None, None, None, None, None, counts, ctypes.byref(rows))

    def forward(self, input, topk_ids, topk_weights=None, *, recv=None):
        h = self._handle or self._h()
        fw = self._fw
        cap = self._capacity()
        try:
            ip = tensor(fw, "input", input, self.dtype, (None, self.hidden))
            T = input.shape[0]
            tp = tensor(fw, "topk_ids", topk_ids, torch.int32, (T, self.topk))
            wp = optional(fw, "topk_weights", topk_weights, torch.float32, (T, self.topk))
            recv, rp = output(fw, "recv", recv, self.dtype, (cap, self.hidden))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        rw = None if topk_weights is None else torch.empty(cap, dtype=torch.float32)
        src = torch.empty((cap, 3), dtype=torch.int32)
        counts = torch.empty(self._L, dtype=torch.int64)
        nrows = ctypes.c_int64(-1)
        s = self._fwd(h, ip, T, tp, wp, rp, None if rw is None else rw.data_ptr(),
                      src.data_ptr(), counts.data_ptr(), ctypes.byref(nrows))
        if s:
            _lib.raise_status(s, {"num_recv_rows": nrows.value})
        R = nrows.value
        return DispatchResult(recv[:R], None if rw is None else rw[:R], src[:R], counts)


class MoeCombine(_MoeEp):
    """fluxcpp_moe_combine (FLUX DisScatterBackward), the inverse of MoeDispatch:
    forward(input, topk_ids, topk_weights=None, *, out=None): input [R_r, hidden] in dispatch
    order; topk_ids [T, K] and topk_weights [T, K] f32 this rank's own; out [T, hidden]."""
    _c = "moe_combine"

    def __init__(self, ctx, max_tokens, hidden, topk, num_experts, max_recv_rows, input_dtype,
                 output_dtype=None):
        self._setup(max_tokens, hidden, topk, num_experts, max_recv_rows)
        output_dtype = input_dtype if output_dtype is None else output_dtype
        self.input_dtype, self.output_dtype = input_dtype, output_dtype
        self._fw = "MoeCombine.forward"
        self._create(ctx, self.max_tokens, self.hidden, self.topk, self.num_experts,
                     self.max_recv_rows, c_dtype("MoeCombine", "input_dtype", input_dtype),
                     c_dtype("MoeCombine", "output_dtype", output_dtype))
        self._fwd = _lib.fn("fluxcpp_moe_combine_forward")

    def _poison(self):
        self._fwd(self._handle, None, -1, -1, None, None, None)

    def forward(self, input, topk_ids, topk_weights=None, *, out=None):
        h = self._handle or self._h()
        fw = self._fw
        try:
            ip = tensor(fw, "input", input, self.input_dtype, (None, self.hidden))
            tp = tensor(fw, "topk_ids", topk_ids, torch.int32, (None, self.topk))
            T = topk_ids.shape[0]
            wp = optional(fw, "topk_weights", topk_weights, torch.float32, (T, self.topk))
            out, op = output(fw, "out", out, self.output_dtype, (T, self.hidden))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, input.shape[0], T, tp, wp, op), out)


class _MoeTp(Op):
    """Shared create arguments and rank layout of the MoE ops under TP (FLUX's layout: tp =
    W/ep_size, EP rank q = rank/tp owns experts [q*L, (q+1)*L), L = E/ep_size)."""

    def __init__(self, ctx, max_tokens, hidden, ffn_shard, topk, num_experts, ep_size,
                 input_dtype, output_dtype=None, transpose_weight=False):
        name = type(self).__name__
        output_dtype = input_dtype if output_dtype is None else output_dtype
        self.max_tokens = size(name, "max_tokens", max_tokens)
        self.hidden, self.ffn_shard = size(name, "hidden", hidden, 1), size(name, "ffn_shard",
                                                                            ffn_shard, 1)
        self.topk = size(name, "topk", topk, 1)
        self.num_experts = size(name, "num_experts", num_experts, 1)
        self.ep_size = size(name, "ep_size", ep_size, 1)
        self.input_dtype, self.output_dtype = input_dtype, output_dtype
        self.transpose_weight = bool(transpose_weight)
        self._fw = f"{name}.forward"
        self._create(ctx, self.max_tokens, self.hidden, self.ffn_shard, self.topk,
                     self.num_experts, self.ep_size, c_dtype(name, "input_dtype", input_dtype),
                     c_dtype(name, "output_dtype", output_dtype), int(self.transpose_weight))
        self._fwd = _lib.fn(f"fluxcpp_{self._c}_forward")
        # create succeeded, so E % ep_size == 0 and W % ep_size == 0
        self._L = self.num_experts // self.ep_size
        q = self._rank // (self._W // self.ep_size)
        self._experts = (q * self._L, (q + 1) * self._L)

    def _rows(self, split_vals):
        """(b, M_r): this rank's first global row and row count of the expert-major layout."""
        lo, hi = self._experts
        return sum(split_vals[:lo]), sum(split_vals[lo:hi])


class AgScatterGroupedGemm(_MoeTp):
    """fluxcpp_ag_scatter_grouped_gemm (FLUX GemmGroupedV3AGScatter, MoE layer 0 under TP).

    forward(input, splits, scatter_index, weight, scale=None, *, out=None, gathered_input=None):
    input [T/W, hidden]; splits [E] int64 and scatter_index [T, K] int32 identical on every rank;
    weight [L, ffn_shard, hidden] ([L, hidden, ffn_shard] when transposed); scale [L] f32;
    out [M_r, ffn_shard]; gathered_input [T, hidden]."""
    _c = "ag_scatter_grouped_gemm"

    def _poison(self):
        self._fwd(self._handle, None, -1, None, None, None, None, None, None)

    def forward(self, input, splits, scatter_index, weight, scale=None, *, out=None,
                gathered_input=None):
        h = self._handle or self._h()
        fw = self._fw
        L = self._L
        try:
            ip = tensor(fw, "input", input, self.input_dtype, (None, self.hidden))
            T = input.shape[0] * self._W
            sp, vals, keep = int_array(fw, "splits", splits, torch.int64, self.num_experts)
            xp = tensor(fw, "scatter_index", scatter_index, torch.int32, (T, self.topk))
            wshape = ((L, self.hidden, self.ffn_shard) if self.transpose_weight
                      else (L, self.ffn_shard, self.hidden))
            wp = tensor(fw, "weight", weight, self.input_dtype, wshape)
            cp = optional(fw, "scale", scale, torch.float32, (L,))
            _, rows = self._rows(vals)
            out, op = output(fw, "out", out, self.output_dtype, (rows, self.ffn_shard))
            gp = optional(fw, "gathered_input", gathered_input, self.input_dtype, (T, self.hidden))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, T, sp, xp, wp, cp, op, gp), out)


class GroupedGemmGatherRs(_MoeTp):
    """fluxcpp_grouped_gemm_gather_rs (FLUX GemmGroupedV3GatherRS, MoE layer 1 under TP).

    forward(input, splits, scatter_index, weight, routing_weights=None, *, out=None): input
    [M_r, ffn_shard]; splits [E], scatter_index [T, K], routing_weights [T, K] f32 identical on
    every rank; weight [L, hidden, ffn_shard] ([L, ffn_shard, hidden] when transposed);
    out [T/W, hidden]."""
    _c = "grouped_gemm_gather_rs"

    def _poison(self):
        self._fwd(self._handle, None, -1, None, None, None, None, None)

    def forward(self, input, splits, scatter_index, weight, routing_weights=None, *, out=None):
        h = self._handle or self._h()
        fw = self._fw
        L = self._L
        try:
            sp, vals, keep = int_array(fw, "splits", splits, torch.int64, self.num_experts)
            xp = tensor(fw, "scatter_index", scatter_index, torch.int32, (None, self.topk))
            T = scatter_index.shape[0]
            if T % self._W:
                raise ValueError(f"{fw}: num_tokens={T} (scatter_index rows) is not divisible "
                                 f"by W={self._W}")
            _, rows = self._rows(vals)
            ip = tensor(fw, "input", input, self.input_dtype, (rows, self.ffn_shard))
            wshape = ((L, self.ffn_shard, self.hidden) if self.transpose_weight
                      else (L, self.hidden, self.ffn_shard))
            wp = tensor(fw, "weight", weight, self.input_dtype, wshape)
            rp = optional(fw, "routing_weights", routing_weights, torch.float32, (T, self.topk))
            out, op = output(fw, "out", out, self.output_dtype, (T // self._W, self.hidden))
        except Exception as e:  # whatever failed here, the peers must hear of it
            self._refuse(e)
            raise
        return checked(self._fwd(h, ip, T, sp, xp, wp, rp, op), out)


GemmGroupedV3 = GroupedGemm
GemmGroupedV3AGScatter = AgScatterGroupedGemm
GemmGroupedV3GatherRS = GroupedGemmGatherRs
DisScatterForward = MoeDispatch
DisScatterBackward = MoeCombine
