#include "ops/grouped_gemm_gather_rs.hpp"

#include <algorithm>
#include <cstring>

#include "error_util.hpp"
#include "kernels/moe_combine_kernel.hpp"
#include "kernels/reduce.hpp"
#include "ops/core/create.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/tiled_gemm.hpp"

namespace fluxcpp {
namespace detail {

void GroupedGemmGatherRsImpl::create(const comm::Parts& c, const std::string& local_error) {
  const MoeTpOptions o = opts_;
  ops::check_moe_tp_create(c, kOp, o, local_error);
  const int W = c.topo().world_size();
  acc_ = o.input_dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  in_row_ = static_cast<std::size_t>(o.ffn_shard) * dtype_size(o.input_dtype);
  acc_row_ = static_cast<std::size_t>(o.hidden) * dtype_size(acc_);
  routing_ = ops::MoeTpRouting(kOp, o, W, c.topo().world_rank());
  const int64_t L = o.num_experts / o.ep_size;
  weights_ = ops::ExpertWeights(L, o.input_dtype, o.hidden, o.ffn_shard, o.transpose_weight);
  // Our partials for every rank live in the out slot (computed there even when alone); other
  // hosts' partials for us land in the in slot.
  const std::size_t max_share = static_cast<std::size_t>(o.max_tokens / W) * acc_row_;
  a2a_ = ops::A2aExchange(links_, layout_, max_share * W, max_share * W, /*needed=*/true);
  // Releasing, writing locally: gemm-only writes the partials outside a call.
  make_core(ops::OpCore::Spec::of(kOp, {"num_tokens"})
                .runs_gemm()
                .with_vector(ops::kMoeTpVector)
                .releasing()
                .writing_locally());
  comm::agree(c.control(), [&] { resize_or_raise(acc_buf_, max_share, kOp, "the running sum"); });
}

void GroupedGemmGatherRsImpl::forward(const void* input, int64_t T, const int64_t* splits,
                                      const int32_t* scatter_index, const void* weight,
                                      const float* routing_weights, void* output) {
  call(ops::Path::kFused, {static_cast<const char*>(input), T, splits, scatter_index, weight,
                           routing_weights, static_cast<char*>(output)});
}

void GroupedGemmGatherRsImpl::forward_gemm_only(const void* input, int64_t T, const int64_t* splits,
                                                const int32_t* scatter_index, const void* weight,
                                                const float* routing_weights) {
  call(ops::Path::kGemmOnly, {static_cast<const char*>(input), T, splits, scatter_index, weight,
                              routing_weights, nullptr});
}

void GroupedGemmGatherRsImpl::forward_comm_only(int64_t T, const int64_t* splits,
                                                const int32_t* scatter_index,
                                                const float* routing_weights, void* output) {
  call(ops::Path::kCommOnly,
       {nullptr, T, splits, scatter_index, nullptr, routing_weights, static_cast<char*>(output)});
}

char* GroupedGemmGatherRsImpl::share_of(int t) const {
  return a2a_.out_slot() + share_ * static_cast<std::size_t>(t);
}

void GroupedGemmGatherRsImpl::call(ops::Path path, const ops::MoeTpCall& a) {
  ops::CallDescriptor d;
  const int r = ctx_->topo().world_rank();
  d.error = ops::check_forward(*ctx_, kOp, a.T, opts_.max_tokens, {});
  if (d.error.empty()) d.error = routing_.load(a.T, a.splits, a.scatter, a.factors);
  if (d.error.empty() && path != ops::Path::kCommOnly && routing_.rows() > 0) {
    if (a.input == nullptr)
      d.error = fmt::format("{}: input is NULL with {} rows on this rank (rank {})", kOp,
                            routing_.rows(), r);
    else if (a.weight == nullptr)
      d.error = fmt::format("{}: weight is NULL with {} rows on this rank (rank {})", kOp,
                            routing_.rows(), r);
  }
  if (d.error.empty() && path != ops::Path::kGemmOnly && a.T > 0 && a.output == nullptr)
    d.error = fmt::format("{}: output is NULL with num_tokens={} (rank {})", kOp, a.T, r);
  const bool ok = d.error.empty();
  d.fields = {a.T, 0, 0, 0};
  hashes_[0] = ok ? static_cast<int64_t>(routing_.hash()) : 0;
  hashes_[1] = ok ? static_cast<int64_t>(routing_.weights_hash()) : 0;
  d.vector = hashes_;
  d.agreed_check = [this] { return ops::check_agreed_routing(*ctx_, kOp, core_->handshake()); };
  share_ = ok ? static_cast<std::size_t>(a.T / ctx_->topo().world_size()) * acc_row_ : 0;
  if (ok) schedule_ = plan(path, routing_.rows());
  core_->run(path, d, a.T == 0, [&](const ops::Call&) { run(schedule_, a); });
}

void GroupedGemmGatherRsImpl::gemm(const kernels::GemmWeight& w, const char* rows, int64_t n,
                                   const kernels::GemmOut& o) {
  // Split by the layout and the routing only, never by timing or threads (Tiling's comment).
  ops::tiled_gemm(*core_, w, rows, opts_.ffn_shard, n, 0, opts_.hidden, o, {},
                  ops::Tiling::kSerialAcrossHosts);
}

void GroupedGemmGatherRsImpl::partial(const Schedule& s, int t, const ops::MoeTpCall& a) {
  const auto& slots = routing_.slots_from(t);
  const int64_t per = routing_.tokens_per_rank(), t0 = t * per, H = opts_.hidden;
  char* share = share_of(t);
  std::memset(share, 0, share_);  // part = +0 for every token
  if (slots.empty()) return;
  const std::size_t n_slots = slots.size();
  y_of_.resize(n_slots);
  // 1. The GEMM rows of these slots, in the accumulator type: computed now, or (kAllRows) every
  // row's are done and row i is Y row i.
  if (s.kind == Schedule::Kind::kByRank) {
    destination_rows(slots, a);
  } else {
    for (std::size_t i = 0; i < n_slots; ++i) y_of_[i] = slots[i].row;
  }
  // 2. Per token, its slots in k order: part <- part + w·Y (slots are sorted by (t, k)).
  for (std::size_t i = 0; i < n_slots; ++i) {
    const ops::RoutedSlot& slot = slots[i];
    const float* w = a.factors != nullptr ? a.factors + slot.t * opts_.topk + slot.k : nullptr;
    char* part = share + static_cast<std::size_t>(slot.t - t0) * acc_row_;
    const char* y = y_rows_.data() + static_cast<std::size_t>(y_of_[i]) * acc_row_;
    kernels::add_weighted_row(acc_, part, y, H, w);
  }
}

void GroupedGemmGatherRsImpl::destination_rows(const std::vector<ops::RoutedSlot>& slots,
                                               const ops::MoeTpCall& a) {
  // Expert by expert. The split into GEMM calls depends on the routing only (fixed tiles, this
  // thread): the same bits every call.
  const std::size_t n_slots = slots.size();
  ops::bucket_by_expert(slots, 0, n_slots, routing_, order_, first_);
  if (y_rows_.size() < n_slots * acc_row_) y_rows_.resize(n_slots * acc_row_);
  for (int64_t l = 0; l < routing_.num_local_experts(); ++l) {
    const int64_t n = first_[l + 1] - first_[l];
    if (n == 0) continue;
    const int32_t* idx = order_.data() + first_[l];
    bool consecutive = true;
    const int32_t row0 = slots[idx[0]].row;
    for (int64_t i = 0; i < n; ++i) {
      y_of_[idx[i]] = first_[l] + i;
      consecutive = consecutive && slots[idx[i]].row == row0 + i;
    }
    const char* arows = a.input + static_cast<std::size_t>(row0) * in_row_;
    if (!consecutive) {
      if (a_rows_.size() < static_cast<std::size_t>(n) * in_row_)
        a_rows_.resize(static_cast<std::size_t>(n) * in_row_);
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(a_rows_.data() + i * in_row_,
                    a.input + static_cast<std::size_t>(slots[idx[i]].row) * in_row_, in_row_);
      arows = a_rows_.data();
    }
    kernels::GemmOut o;
    o.c = y_rows_.data() + static_cast<std::size_t>(first_[l]) * acc_row_;
    o.ldc = opts_.hidden;
    o.dtype = acc_;
    gemm(weights_.of(l), arows, n, o);
  }
}

void GroupedGemmGatherRsImpl::all_rows(const ops::MoeTpCall& a) {
  // One GEMM per expert over its consecutive input rows, Y row i for input row i.
  const std::size_t rows = static_cast<std::size_t>(routing_.rows());
  if (y_rows_.size() < rows * acc_row_) y_rows_.resize(rows * acc_row_);
  const int64_t b = routing_.row_begin(ctx_->topo().world_rank());
  for (int64_t l = 0; l < routing_.num_local_experts(); ++l) {
    const int64_t i0 = routing_.expert_begin(l) - b, n = routing_.expert_end(l) - b - i0;
    if (n == 0) continue;
    kernels::GemmOut o;
    o.c = y_rows_.data() + static_cast<std::size_t>(i0) * acc_row_;
    o.ldc = opts_.hidden;
    o.dtype = acc_;
    gemm(weights_.of(l), a.input + static_cast<std::size_t>(i0) * in_row_, n, o);
  }
}

void GroupedGemmGatherRsImpl::reduce(const ops::MoeTpCall& a) {
  // acc = +0; acc <- acc + part_s for s = 0..W-1, rounded once. A part is never -0 (it starts at
  // +0), so starting from part_0 gives the same bits as starting from +0.
  const comm::Parts& c = *ctx_;
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  const int64_t count = routing_.tokens_per_rank() * opts_.hidden;
  auto part = [&](int s) -> const void* {
    if (s == r) return share_of(r);
    const ops::Inbox in = a2a_.from(s);
    in.wait_all();
    return in.data();
  };
  const void* first = part(0);
  if (W == 1) {
    kernels::reduce_sum(acc_, &first, 1, opts_.output_dtype, a.output, count);
    return;
  }
  for (int s = 1; s < W; ++s) {
    const void* srcs[2] = {s == 1 ? first : acc_buf_.data(), part(s)};
    const bool last = s == W - 1;
    kernels::reduce_sum(acc_, srcs, 2, last ? opts_.output_dtype : acc_,
                        last ? static_cast<void*>(a.output) : acc_buf_.data(), count);
  }
}

void GroupedGemmGatherRsImpl::run(const Schedule& s, const ops::MoeTpCall& a) {
  weights_.begin(a.weight);
  if (s.path == ops::Path::kGemmOnly) return compute(s, a, /*publish=*/false);
  if (s.path == ops::Path::kCommOnly) return run_comm_only(a);
  a2a_.begin(*core_, ops::equal_blocks(share_));
  compute(s, a, /*publish=*/true);
  reduce(a);
}

void GroupedGemmGatherRsImpl::compute(const Schedule& s, const ops::MoeTpCall& a, bool publish) {
  const int r = ctx_->topo().world_rank();
  if (s.kind == Schedule::Kind::kAllRows) all_rows(a);
  for (int t : core_->links().up_self()) {
    partial(s, t, a);
    if (publish && t != r) a2a_.to(t).publish_all();
  }
}

void GroupedGemmGatherRsImpl::run_comm_only(const ops::MoeTpCall& a) {
  // The partials are whatever the last gemm-only left: publish them for this call, then reduce.
  const int r = ctx_->topo().world_rank();
  a2a_.begin(*core_, ops::equal_blocks(share_));
  for (int t : core_->links().up_self())
    if (t != r) a2a_.to(t).publish_all();
  reduce(a);
}

}  // namespace detail

// The public class GroupedGemmGatherRs (include/fluxcpp/grouped_gemm_gather_rs.hpp): each member
// forwards to the implementation above, through ops::checked (a moved-from op is kInvalidUsage).
FLUXCPP_PUBLIC_MADE_OP(GroupedGemmGatherRs, MoeTpOptions);

void GroupedGemmGatherRs::forward(const void* input, int64_t num_tokens, const int64_t* splits,
                                  const int32_t* scatter_index, const void* weight,
                                  const float* routing_weights, void* output) {
  ops::checked(impl_).forward(input, num_tokens, splits, scatter_index, weight, routing_weights,
                              output);
}
void GroupedGemmGatherRs::forward_gemm_only(const void* input, int64_t num_tokens,
                                            const int64_t* splits, const int32_t* scatter_index,
                                            const void* weight, const float* routing_weights) {
  ops::checked(impl_).forward_gemm_only(input, num_tokens, splits, scatter_index, weight,
                                        routing_weights);
}
void GroupedGemmGatherRs::forward_comm_only(int64_t num_tokens, const int64_t* splits,
                                            const int32_t* scatter_index,
                                            const float* routing_weights, void* output) {
  ops::checked(impl_).forward_comm_only(num_tokens, splits, scatter_index, routing_weights, output);
}

}  // namespace fluxcpp
