// The C ABI of the local MoE building blocks (moe_layout, grouped_gemm): thin wrappers over the
// kernel and the op (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "fluxcpp/moe_layout.hpp"
#include "ops/grouped_gemm.hpp"

using namespace fluxcpp::capi;

FLUXCPP_CAPI_HANDLE(grouped_gemm, fluxcpp::detail::GroupedGemmImpl)

extern "C" {

fluxcpp_status_t fluxcpp_moe_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t topk,
                                    int64_t num_experts, int64_t num_ranks, int64_t* expert_counts,
                                    int64_t* rank_rows, int64_t* rank_tokens,
                                    int32_t* scatter_index, int32_t* gather_index,
                                    int32_t* topk_index) {
  return guarded([&] {
    fluxcpp::moe_layout(
        topk_ids, num_tokens, topk, num_experts, num_ranks,
        {expert_counts, rank_rows, rank_tokens, scatter_index, gather_index, topk_index});
  });
}

fluxcpp_status_t fluxcpp_grouped_gemm_create(fluxcpp_context_t ctx, int64_t num_groups,
                                             int64_t max_m, int64_t n, int64_t k,
                                             fluxcpp_dtype_t input_dtype,
                                             fluxcpp_dtype_t output_dtype, int transpose_weight,
                                             fluxcpp_grouped_gemm_t* op) {
  auto o = gemm_options<fluxcpp::GroupedGemmOptions>(max_m, n, k, input_dtype, output_dtype,
                                                     transpose_weight);
  o.num_groups = num_groups;
  return create_op(__func__, ctx, o, op);
}

fluxcpp_status_t fluxcpp_grouped_gemm_forward(fluxcpp_grouped_gemm_t op, const void* input,
                                              const int64_t* splits, const void* weight,
                                              const float* scale, void* output) {
  return call_op(__func__, op,
                 [&](auto& impl) { impl.forward(input, splits, weight, scale, output); });
}

}  // extern "C"
