// The expert-major layout of an MoE routing table: counts, per-partition rows and tokens, and the
// stable scatter / gather permutations. Memory only: "ranks" here are just a contiguous partition
// of the experts. The contract is fluxcpp::moe_layout (include/fluxcpp/moe_layout.hpp).
#pragma once

#include <cstdint>

#include "fluxcpp/moe_layout.hpp"

namespace fluxcpp::kernels {

// Raises Error(kInvalidArgument) unless the sizes are valid (see fluxcpp::moe_layout).
void check_moe_layout_shape(int64_t num_tokens, int64_t topk, int64_t num_experts,
                            int64_t num_ranks);

// Validates every argument first (raising Error(kInvalidArgument) naming "moe_layout", the argument
// and the values; nothing is written then), then fills the non-null outputs in two passes over
// topk_ids. Runs on the calling thread; keeps no state.
void moe_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t topk, int64_t num_experts,
                int64_t num_ranks, const MoeLayoutOutputs& out);

}  // namespace fluxcpp::kernels
