// fluxcpp/moe_layout.hpp: the expert-major layout of an MoE routing table (FLUX
// calc_scatter_index_stable, DeepEP get_dispatch_layout).
#pragma once

#include <cstdint>
#include <vector>

#include "fluxcpp/export.h"

namespace fluxcpp {

// Where moe_layout writes. Every pointer but expert_counts may be null (that output is skipped).
struct MoeLayoutOutputs {
  int64_t* expert_counts = nullptr;  // [E]: slots routed to expert e
  int64_t* rank_rows = nullptr;      // [num_ranks]: Σ_l expert_counts[q·L + l], L = E/num_ranks
  int64_t* rank_tokens = nullptr;    // [num_ranks]: tokens with at least one slot owned by q
  int32_t* scatter_index = nullptr;  // [T, K]: row of slot (t, k) in the expert-major layout, or −1
  int32_t* gather_index =
      nullptr;  // [T·K]: gather_index[scatter_index[t][k]] = t; −1 from row M on
  int32_t* topk_index = nullptr;  // [T·K]: topk_index[scatter_index[t][k]] = k; −1 from row M on
};

// The same outputs, owned.
struct MoeLayout {
  std::vector<int64_t> expert_counts, rank_rows, rank_tokens;
  std::vector<int32_t> scatter_index, gather_index, topk_index;
};

// topk_ids [T, K] int32 (T = num_tokens, K = topk), each id in [0, E) or −1 (unrouted slot).
// The expert-major layout sorts the routed slots by (expert, t, k): slot (t, k) with id e sits at
// row P[e] + #{slots (t', k') with id e and t'·K + k' < t·K + k}, P[e] = Σ_{e'<e} counts[e'].
// num_ranks splits the experts contiguously (E % num_ranks == 0): rank q owns [q·L, (q+1)·L).
//
// A plain function: no context, no communication, thread-safe, O(T·K + E + num_ranks) time; equal
// inputs give bitwise-equal outputs. Requires T >= 0, K >= 1, E >= 1, num_ranks >= 1,
// T·K <= INT32_MAX, topk_ids non-null when T > 0, expert_counts non-null. Invalid arguments
// (including an id outside [−1, E), named with its token, k and value) raise
// Error(kInvalidArgument) before any output is written.
FLUXCPP_API void moe_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t topk,
                            int64_t num_experts, int64_t num_ranks, const MoeLayoutOutputs& out);

// Allocating form: every output, sized as above.
FLUXCPP_API MoeLayout moe_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t topk,
                                 int64_t num_experts, int64_t num_ranks);

}  // namespace fluxcpp
