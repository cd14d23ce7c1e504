// The routing of one expert-parallel MoE call as every rank agreed it in the handshake: rank s's
// per-expert slot counts c_s[e], and what follows from them for this rank r (what it sends, what
// it receives and where each block lands in moe_dispatch's receive order). Shared by moe_dispatch
// and moe_combine, whose data movement is the same table read in opposite directions.
//
// Experts are split contiguously: rank q owns the L = E/W experts [q·L, (q+1)·L). On rank r the
// receive order (API.md's ρ_r) is sorted by (local expert l, source rank s, token, k), so the rows
// of source s for expert r·L + l start at dest_row(s, l); inside s's block for r (its own
// expert-major rows of the experts r owns) they start at block_row(s, l).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp::ops {

class MoeRouting {
 public:
  MoeRouting() = default;
  MoeRouting(int world_size, int64_t num_experts, int rank);

  // Reads every rank's counts: count(s) points at rank s's E counts.
  void build(const std::function<const int64_t*(int s)>& counts);

  int world_size() const { return W_; }
  int64_t count(int s, int64_t e) const { return c_[static_cast<std::size_t>(s) * E_ + e]; }
  // Rows rank s sends rank q: Σ_l c_s[q·L + l].
  int64_t rows(int s, int q) const { return rows_[static_cast<std::size_t>(s) * W_ + q]; }
  // R_q = Σ_s rows(s, q).
  int64_t recv_rows(int q) const { return recv_[q]; }
  // Of this rank: Σ_s c_s[r·L + l].
  int64_t recv_count(int64_t l) const { return recv_count_[l]; }
  // Of this rank: where source s's rows for local expert l start in the receive order.
  int64_t dest_row(int s, int64_t l) const { return dest_[static_cast<std::size_t>(s) * L_ + l]; }
  // Of this rank: where they start inside s's block for this rank (Σ_{l'<l} c_s[r·L + l']).
  int64_t block_row(int s, int64_t l) const { return block_[static_cast<std::size_t>(s) * L_ + l]; }

 private:
  int W_ = 1, r_ = 0;
  int64_t E_ = 1, L_ = 1;
  std::vector<int64_t> c_, rows_, recv_, recv_count_, dest_, block_;
};

// Create-time checks shared by moe_dispatch and moe_combine (collective): a rank-local error, the
// sizes, E % W, T·K within int32, the byte sizes; then every rank must have passed the same
// values. Raises the same Error on every rank. Returns the capacity (max_recv_rows, 0 resolved to
// W·max_tokens·topk).
struct MoeShape {
  int64_t max_tokens, hidden, topk, num_experts, max_recv_rows;
  DType input_dtype, output_dtype;
};
int64_t check_moe_create(const comm::Parts& c, const char* op, const MoeShape& s,
                         const std::string& local_error);

// This rank's own routing table through the moe_layout kernel (num_ranks = W): counts [E] and the
// non-null per-slot arrays. Returns "" or the kernel's message prefixed with op and suffixed with
// the rank (nothing useful is written then).
std::string own_layout(const char* op, int rank, const int32_t* topk_ids, int64_t num_tokens,
                       int64_t topk, int64_t num_experts, int64_t num_ranks, int64_t* counts,
                       int32_t* scatter_index, int32_t* gather_index, int32_t* topk_index);

// A rank's own expert-major layout (the prefix P[e] of its counts, with P[E] = M).
std::vector<int64_t> expert_prefix(const int64_t* counts, int64_t num_experts);

}  // namespace fluxcpp::ops
