// fluxcpp/moe_combine.hpp: MoE combine (FLUX DisScatterBackward, DeepEP combine) — the inverse of
// moe_dispatch: every received row goes back to its source rank, which sums a token's rows in a
// fixed k order.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct MoeCombineOptions {
  int64_t max_tokens = 0;     // most tokens one rank passes to a forward
  int64_t hidden = 0;         // elements per row
  int64_t topk = 0;           // K
  int64_t num_experts = 0;    // E, E % W == 0
  int64_t max_recv_rows = 0;  // most rows any rank passes as input (0: W·max_tokens·topk)
  DType input_dtype = DType::kFloat32;  // pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
  DType output_dtype = DType::kFloat32;
};

// One rank's arguments of a forward: the routing it dispatched with, and its received rows.
struct MoeCombineInput {
  const void* input = nullptr;          // [num_rows, hidden], moe_dispatch's receive order
  int64_t num_rows = 0;                 // must be R_r of this routing
  int64_t num_tokens = 0;               // this rank's own tokens, <= max_tokens
  const int32_t* topk_ids = nullptr;    // [num_tokens, topk]
  const float* topk_weights = nullptr;  // [num_tokens, topk] or null
};

namespace detail {
class MoeCombineImpl;
}

class FLUXCPP_API MoeCombine {
 public:
  // Collective: every rank passes the same options (checked).
  MoeCombine(const Context& ctx, const MoeCombineOptions& options);
  MoeCombine(MoeCombine&&) noexcept;
  MoeCombine& operator=(MoeCombine&&) noexcept;
  ~MoeCombine();  // noexcept; never communicates

  // Collective, blocking. output [num_tokens, hidden] on rank r: for each t, acc = +0 (f32; f64
  // for f64 data); for k = 0..K-1 with e = topk_ids[t][k] >= 0 and owner q = e/L:
  // acc <- acc + topk_weights[t][k] · input_q[ρ_q(r,t,k)] (the product rounded to the accumulator
  // type, then added, never fused; without weights the multiply is skipped); output[t] = acc
  // rounded once. Bitwise identical from call to call and run to run. num_rows != R_r on any
  // rank, or any other bad argument, is kInvalidArgument on every rank; the op stays usable.
  void forward(const MoeCombineInput& input, void* output);

  const MoeCombineOptions& options() const;  // max_recv_rows resolved

 private:
  std::unique_ptr<detail::MoeCombineImpl> impl_;
};

}  // namespace fluxcpp
