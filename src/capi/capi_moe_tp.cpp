// The C ABI of the tensor-parallel MoE ops (ag_scatter_grouped_gemm, grouped_gemm_gather_rs):
// thin wrappers over the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/ag_scatter_grouped_gemm.hpp"
#include "ops/grouped_gemm_gather_rs.hpp"

struct fluxcpp_ag_scatter_grouped_gemm_s {
  std::unique_ptr<fluxcpp::detail::AgScatterGroupedGemmImpl> impl;
};
struct fluxcpp_grouped_gemm_gather_rs_s {
  std::unique_ptr<fluxcpp::detail::GroupedGemmGatherRsImpl> impl;
};

using namespace fluxcpp::capi;

namespace {

fluxcpp::MoeTpOptions moe_tp_options(int64_t max_tokens, int64_t hidden, int64_t ffn_shard,
                                     int64_t topk, int64_t num_experts, int64_t ep_size,
                                     const fluxcpp_dtype_t& input_dtype,
                                     const fluxcpp_dtype_t& output_dtype, int transpose_weight) {
  fluxcpp::MoeTpOptions o;
  o.max_tokens = max_tokens;
  o.hidden = hidden;
  o.ffn_shard = ffn_shard;
  o.topk = topk;
  o.num_experts = num_experts;
  o.ep_size = ep_size;
  o.input_dtype = to_dtype(input_dtype);
  o.output_dtype = to_dtype(output_dtype);
  o.transpose_weight = transpose_weight != 0;
  return o;
}

}  // namespace

extern "C" {

fluxcpp_status_t fluxcpp_ag_scatter_grouped_gemm_create(
    fluxcpp_context_t ctx, int64_t max_tokens, int64_t hidden, int64_t ffn_shard, int64_t topk,
    int64_t num_experts, int64_t ep_size, fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
    int transpose_weight, fluxcpp_ag_scatter_grouped_gemm_t* op) {
  return create_op<fluxcpp_ag_scatter_grouped_gemm_s, fluxcpp::detail::AgScatterGroupedGemmImpl>(
      "fluxcpp_ag_scatter_grouped_gemm_create", ctx,
      moe_tp_options(max_tokens, hidden, ffn_shard, topk, num_experts, ep_size, input_dtype,
                     output_dtype, transpose_weight),
      op);
}

fluxcpp_status_t fluxcpp_ag_scatter_grouped_gemm_forward(fluxcpp_ag_scatter_grouped_gemm_t op,
                                                         const void* input, int64_t num_tokens,
                                                         const int64_t* splits,
                                                         const int32_t* scatter_index,
                                                         const void* weight, const float* scale,
                                                         void* output, void* gathered_input) {
  if (op == nullptr) return null_arg("fluxcpp_ag_scatter_grouped_gemm_forward", "op");
  return guarded([&] {
    op->impl->forward(input, num_tokens, splits, scatter_index, weight, scale, output,
                      gathered_input);
  });
}

fluxcpp_status_t fluxcpp_ag_scatter_grouped_gemm_destroy(fluxcpp_ag_scatter_grouped_gemm_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_grouped_gemm_gather_rs_create(
    fluxcpp_context_t ctx, int64_t max_tokens, int64_t hidden, int64_t ffn_shard, int64_t topk,
    int64_t num_experts, int64_t ep_size, fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
    int transpose_weight, fluxcpp_grouped_gemm_gather_rs_t* op) {
  return create_op<fluxcpp_grouped_gemm_gather_rs_s, fluxcpp::detail::GroupedGemmGatherRsImpl>(
      "fluxcpp_grouped_gemm_gather_rs_create", ctx,
      moe_tp_options(max_tokens, hidden, ffn_shard, topk, num_experts, ep_size, input_dtype,
                     output_dtype, transpose_weight),
      op);
}

fluxcpp_status_t fluxcpp_grouped_gemm_gather_rs_forward(
    fluxcpp_grouped_gemm_gather_rs_t op, const void* input, int64_t num_tokens,
    const int64_t* splits, const int32_t* scatter_index, const void* weight,
    const float* routing_weights, void* output) {
  if (op == nullptr) return null_arg("fluxcpp_grouped_gemm_gather_rs_forward", "op");
  return guarded([&] {
    op->impl->forward(input, num_tokens, splits, scatter_index, weight, routing_weights, output);
  });
}

fluxcpp_status_t fluxcpp_grouped_gemm_gather_rs_destroy(fluxcpp_grouped_gemm_gather_rs_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

}  // extern "C"
