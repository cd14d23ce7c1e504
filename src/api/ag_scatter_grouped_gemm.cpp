// AgScatterGroupedGemm, the public class: a facade over src/ops/ag_scatter_grouped_gemm.cpp.
#include "ops/ag_scatter_grouped_gemm.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(AgScatterGroupedGemm, MoeTpOptions, "ag_scatter_grouped_gemm");

void AgScatterGroupedGemm::forward(const void* input, int64_t num_tokens, const int64_t* splits,
                                   const int32_t* scatter_index, const void* weight,
                                   const float* scale, void* output, void* gathered_input) {
  ops::checked(impl_, "ag_scatter_grouped_gemm")
      .forward(input, num_tokens, splits, scatter_index, weight, scale, output, gathered_input);
}
void AgScatterGroupedGemm::forward_gemm_only(const void* input, int64_t num_tokens,
                                             const int64_t* splits, const int32_t* scatter_index,
                                             const void* weight, const float* scale, void* output) {
  ops::checked(impl_, "ag_scatter_grouped_gemm")
      .forward_gemm_only(input, num_tokens, splits, scatter_index, weight, scale, output);
}
void AgScatterGroupedGemm::forward_comm_only(const void* input, int64_t num_tokens,
                                             const int64_t* splits, const int32_t* scatter_index,
                                             void* gathered_input) {
  ops::checked(impl_, "ag_scatter_grouped_gemm")
      .forward_comm_only(input, num_tokens, splits, scatter_index, gathered_input);
}

}  // namespace fluxcpp
