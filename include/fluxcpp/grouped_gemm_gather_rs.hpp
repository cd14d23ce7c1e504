// fluxcpp/grouped_gemm_gather_rs.hpp: GemmGroupedV3GatherRS — MoE layer 1 under tensor
// parallelism: one GEMM per local expert, each row weighted by its routing weight, the topk rows
// of a token summed back into token order and the result reduce-scattered over the world.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/moe_tp_options.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

namespace detail {
class GroupedGemmGatherRsImpl;
}

class FLUXCPP_API GroupedGemmGatherRs {
 public:
  // Collective: validates (every rank must pass the same options) and allocates the symmetric
  // buffers. Errors are raised on every rank.
  GroupedGemmGatherRs(const Context& ctx, const MoeTpOptions& options);
  GroupedGemmGatherRs(GroupedGemmGatherRs&&) noexcept;
  GroupedGemmGatherRs& operator=(GroupedGemmGatherRs&&) noexcept;
  ~GroupedGemmGatherRs();  // noexcept; never communicates

  // Collective, blocking. T, splits, scatter_index, b and M_r as in AgScatterGroupedGemm (whose
  // output, after the activation, is this op's input). input [M_r, ffn_shard]; weight
  // [L, hidden, ffn_shard] ([L, ffn_shard, hidden] when transposed); routing_weights [T, K] f32
  // or null, identical on every rank (checked). Y_s(j): rank s's GEMM row for global row j, in
  // the accumulator type (f32; f64 for f64), never rounded. output [T/W, hidden] on rank r, for
  // t = r·T/W + t': acc = +0; for s = 0..W-1: part = +0; for k = 0..K-1, j = scatter_index[t][k]:
  // if b_s <= j < b_s + M_s, part <- part + w[t][k]·Y_s(j) (product rounded, then added); then
  // acc <- acc + part. output[t'] = acc rounded once. Bitwise reproducible.
  void forward(const void* input, int64_t num_tokens, const int64_t* splits,
               const int32_t* scatter_index, const void* weight, const float* routing_weights,
               void* output);

  // Benchmark paths. gemm-only (local, not collective): the GEMMs and topk sums into this rank's
  // partials, nothing sent. comm-only (collective): the reduce-scatter of whatever partials the
  // last call left.
  void forward_gemm_only(const void* input, int64_t num_tokens, const int64_t* splits,
                         const int32_t* scatter_index, const void* weight,
                         const float* routing_weights);
  void forward_comm_only(int64_t num_tokens, const int64_t* splits, const int32_t* scatter_index,
                         const float* routing_weights, void* output);

  const MoeTpOptions& options() const;

 private:
  std::unique_ptr<detail::GroupedGemmGatherRsImpl> impl_;
};

}  // namespace fluxcpp
