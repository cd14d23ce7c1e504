// The C ABI of the local MoE building blocks (moe_layout, grouped_gemm): thin wrappers over the
// kernel and the op (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "fluxcpp/moe_layout.hpp"
#include "ops/grouped_gemm.hpp"

struct fluxcpp_grouped_gemm_s {
  std::unique_ptr<fluxcpp::detail::GroupedGemmImpl> impl;
};

using namespace fluxcpp::capi;

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
  fluxcpp::GroupedGemmOptions o;
  o.num_groups = num_groups;
  o.max_m = max_m;
  o.n = n;
  o.k = k;
  o.input_dtype = to_dtype(input_dtype);
  o.output_dtype = to_dtype(output_dtype);
  o.transpose_weight = transpose_weight != 0;
  return create_op<fluxcpp_grouped_gemm_s, fluxcpp::detail::GroupedGemmImpl>(
      "fluxcpp_grouped_gemm_create", ctx, o, op);
}

fluxcpp_status_t fluxcpp_grouped_gemm_forward(fluxcpp_grouped_gemm_t op, const void* input,
                                              const int64_t* splits, const void* weight,
                                              const float* scale, void* output) {
  if (op == nullptr) return null_arg("fluxcpp_grouped_gemm_forward", "op");
  return guarded([&] { op->impl->forward(input, splits, weight, scale, output); });
}

fluxcpp_status_t fluxcpp_grouped_gemm_destroy(fluxcpp_grouped_gemm_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

}  // extern "C"
