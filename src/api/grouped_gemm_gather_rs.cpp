// GroupedGemmGatherRs, the public class: a facade over src/ops/grouped_gemm_gather_rs.cpp.
#include "ops/grouped_gemm_gather_rs.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(GroupedGemmGatherRs, MoeTpOptions, "grouped_gemm_gather_rs");

void GroupedGemmGatherRs::forward(const void* input, int64_t num_tokens, const int64_t* splits,
                                  const int32_t* scatter_index, const void* weight,
                                  const float* routing_weights, void* output) {
  ops::checked(impl_, "grouped_gemm_gather_rs")
      .forward(input, num_tokens, splits, scatter_index, weight, routing_weights, output);
}
void GroupedGemmGatherRs::forward_gemm_only(const void* input, int64_t num_tokens,
                                            const int64_t* splits, const int32_t* scatter_index,
                                            const void* weight, const float* routing_weights) {
  ops::checked(impl_, "grouped_gemm_gather_rs")
      .forward_gemm_only(input, num_tokens, splits, scatter_index, weight, routing_weights);
}
void GroupedGemmGatherRs::forward_comm_only(int64_t num_tokens, const int64_t* splits,
                                            const int32_t* scatter_index,
                                            const float* routing_weights, void* output) {
  ops::checked(impl_, "grouped_gemm_gather_rs")
      .forward_comm_only(num_tokens, splits, scatter_index, routing_weights, output);
}

}  // namespace fluxcpp
