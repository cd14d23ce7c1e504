// fluxcpp/moe_dispatch.hpp: MoE dispatch (FLUX DisScatterForward, DeepEP dispatch) — every rank
// sends each routed slot's row to the rank that owns its expert; rows land expert-major.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct MoeDispatchOptions {
  int64_t max_tokens = 0;     // most tokens one rank passes to a forward
  int64_t hidden = 0;         // elements per row
  int64_t topk = 0;           // K: slots per token
  int64_t num_experts = 0;    // E, E % W == 0; rank r owns experts [r·L, (r+1)·L), L = E/W
  int64_t max_recv_rows = 0;  // capacity: most rows any rank may receive (0: W·max_tokens·topk)
  DType dtype = DType::kFloat32;
};

// One rank's arguments of a forward.
struct MoeDispatchInput {
  const void* input = nullptr;          // [num_tokens, hidden]
  int64_t num_tokens = 0;               // T_r, 0 <= T_r <= max_tokens (may differ per rank)
  const int32_t* topk_ids = nullptr;    // [num_tokens, topk], each in [0, E) or -1
  const float* topk_weights = nullptr;  // [num_tokens, topk] or null
};

// Where a forward writes on this rank.
struct MoeDispatchOutput {
  void* recv = nullptr;                   // [max_recv_rows, hidden]; rows >= R_r are untouched
  float* recv_weights = nullptr;          // [max_recv_rows] or null
  int32_t* recv_src = nullptr;            // [max_recv_rows, 3] (s, t, k) or null
  int64_t* recv_expert_counts = nullptr;  // [L], required
  int64_t* num_recv_rows = nullptr;       // R_r, or null
};

namespace detail {
class MoeDispatchImpl;
}

class FLUXCPP_API MoeDispatch {
 public:
  // Collective: every rank passes the same options (checked); allocates the symmetric buffers.
  // Errors are raised on every rank.
  MoeDispatch(const Context& ctx, const MoeDispatchOptions& options);
  MoeDispatch(MoeDispatch&&) noexcept;
  MoeDispatch& operator=(MoeDispatch&&) noexcept;
  ~MoeDispatch();  // noexcept; never communicates

  // Collective, blocking; returns R_r. With c_s[e] the slots of rank s with id e, rank r receives
  // R_r = Σ_s Σ_l c_s[r·L + l] rows sorted by (local expert, source rank, token, k):
  // recv[ρ_r(s,t,k)] = input_s[t], ρ_r as in docs/api.md; recv_weights[ρ] = topk_weights_s[t][k]
  // (if any rank asks for recv_weights, every rank with routed slots passes topk_weights);
  // recv_src[ρ] = (s, t, k); recv_expert_counts[l] = Σ_s c_s[r·L + l]. A token may name an
  // expert twice (two rows); -1 slots produce no row. Overflow (some R_q > max_recv_rows) is
  // kInvalidArgument on every rank naming q, R_q, the capacity and the largest R over the ranks;
  // recv_expert_counts and num_recv_rows are still written, recv is untouched. Any other bad
  // argument on any rank is kInvalidArgument on every rank and writes nothing. The op stays
  // usable after both. A pure copy: bitwise reproducible.
  int64_t forward(const MoeDispatchInput& input, const MoeDispatchOutput& output);

  const MoeDispatchOptions& options() const;  // max_recv_rows resolved

 private:
  std::unique_ptr<detail::MoeDispatchImpl> impl_;
};

}  // namespace fluxcpp
