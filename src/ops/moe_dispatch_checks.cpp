// MoE dispatch's checks: a call's own arguments, and the verdict every rank reaches from the
// agreed counts and flags (the algorithm is in moe_dispatch.cpp).
#include <algorithm>

#include "error_util.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/moe_dispatch.hpp"

namespace fluxcpp {
namespace detail {

std::string MoeDispatchImpl::validate(const MoeDispatchInput& in,
                                      const MoeDispatchOutput& out) const {
  std::string e =
      ops::check_count(*ctx_, kOp, "num_tokens", in.num_tokens, opts_.max_tokens,
                       {{"input", in.input}, {"topk_ids", in.topk_ids}}, "max_tokens");
  if (e.empty() && out.recv_expert_counts == nullptr)
    e = fmt::format("{}: recv_expert_counts is NULL (rank {})", kOp, ctx_->topo().world_rank());
  return e;
}

uint64_t MoeDispatchImpl::flags_of(int s) const {
  return static_cast<uint64_t>(core_->handshake().vector(s)[opts_.num_experts]);
}

bool MoeDispatchImpl::meta_for(int t) const {
  return (flags_of(t) & (kWantsWeights | kWantsSrc)) != 0;
}

std::string MoeDispatchImpl::agree(const MoeDispatchOutput& out) {
  const int W = ctx_->topo().world_size(), r = ctx_->topo().world_rank();
  routing_.build([&](int s) { return core_->handshake().vector(s); });
  for (int64_t l = 0; l < L_; ++l) out.recv_expert_counts[l] = routing_.recv_count(l);
  if (out.num_recv_rows != nullptr) *out.num_recv_rows = routing_.recv_rows(r);
  // Every rank checks the same data in the same order: the same verdict everywhere.
  int64_t largest = 0;
  int over = -1;
  for (int q = 0; q < W; ++q) {
    largest = std::max(largest, routing_.recv_rows(q));
    if (over < 0 && routing_.recv_rows(q) > opts_.max_recv_rows) over = q;
  }
  if (over >= 0)
    return fmt::format(
        "{}: rank {} receives {} rows, more than max_recv_rows={}; nothing was moved (re-create "
        "with max_recv_rows >= {}, the most any rank receives in this call) (reported by rank {})",
        kOp, over, routing_.recv_rows(over), opts_.max_recv_rows, largest, r);
  for (int q = 0; q < W; ++q)
    if ((flags_of(q) & kNoRecv) != 0 && routing_.recv_rows(q) > 0)
      return fmt::format(
          "{}: recv is NULL on rank {}, which receives {} rows (reported by rank {})", kOp, q,
          routing_.recv_rows(q), r);
  int asker = -1;
  for (int q = 0; q < W && asker < 0; ++q)
    if ((flags_of(q) & kWantsWeights) != 0) asker = q;
  if (asker >= 0)
    for (int s = 0; s < W; ++s) {
      int64_t sent = 0;
      for (int q = 0; q < W; ++q) sent += routing_.rows(s, q);
      if (sent > 0 && (flags_of(s) & kHasWeights) == 0)
        return fmt::format(
            "{}: rank {} asks for recv_weights but rank {} passed topk_weights=NULL with {} "
            "routed slots (reported by rank {})",
            kOp, asker, s, sent, r);
    }
  return {};
}

}  // namespace detail
}  // namespace fluxcpp
