// The C ABI of the tensor-parallel MoE ops (ag_scatter_grouped_gemm, grouped_gemm_gather_rs):
// thin wrappers over the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/ag_scatter_grouped_gemm.hpp"
#include "ops/grouped_gemm_gather_rs.hpp"

using namespace fluxcpp::capi;

FLUXCPP_CAPI_HANDLE(ag_scatter_grouped_gemm, fluxcpp::detail::AgScatterGroupedGemmImpl)
FLUXCPP_CAPI_HANDLE(grouped_gemm_gather_rs, fluxcpp::detail::GroupedGemmGatherRsImpl)

namespace {

// Both ops take the same create arguments, in MoeTpOptions' order.
template <typename H>
fluxcpp_status_t create_moe_tp(const char* fn, fluxcpp_context_t ctx, int64_t max_tokens,
                               int64_t hidden, int64_t ffn_shard, int64_t topk, int64_t num_experts,
                               int64_t ep_size, const fluxcpp_dtype_t& input_dtype,
                               const fluxcpp_dtype_t& output_dtype, int transpose_weight, H** op) {
  const auto in = to_dtype(input_dtype), out = to_dtype(output_dtype);
  const fluxcpp::MoeTpOptions o{
      max_tokens, hidden, ffn_shard, topk, num_experts, ep_size, in, out, transpose_weight != 0};
  return create_op(fn, ctx, o, op);
}

}  // namespace

// The create of both MoE tensor-parallel ops: the same C signature, one options struct.
#define FLUXCPP_MOE_TP_CREATE(name)                                                                \
  fluxcpp_status_t fluxcpp_##name##_create(                                                        \
      fluxcpp_context_t ctx, int64_t max_tokens, int64_t hidden, int64_t ffn_shard, int64_t topk,  \
      int64_t num_experts, int64_t ep_size, fluxcpp_dtype_t input_dtype,                           \
      fluxcpp_dtype_t output_dtype, int transpose_weight, fluxcpp_##name##_t* op) {                \
    return create_moe_tp(__func__, ctx, max_tokens, hidden, ffn_shard, topk, num_experts, ep_size, \
                         input_dtype, output_dtype, transpose_weight, op);                         \
  }

extern "C" {

FLUXCPP_MOE_TP_CREATE(ag_scatter_grouped_gemm)

fluxcpp_status_t fluxcpp_ag_scatter_grouped_gemm_forward(fluxcpp_ag_scatter_grouped_gemm_t op,
                                                         const void* input, int64_t num_tokens,
                                                         const int64_t* splits,
                                                         const int32_t* scatter_index,
                                                         const void* weight, const float* scale,
                                                         void* output, void* gathered_input) {
  return call_op(__func__, op, [&](auto& impl) {
    impl.forward(input, num_tokens, splits, scatter_index, weight, scale, output, gathered_input);
  });
}

FLUXCPP_MOE_TP_CREATE(grouped_gemm_gather_rs)

fluxcpp_status_t fluxcpp_grouped_gemm_gather_rs_forward(
    fluxcpp_grouped_gemm_gather_rs_t op, const void* input, int64_t num_tokens,
    const int64_t* splits, const int32_t* scatter_index, const void* weight,
    const float* routing_weights, void* output) {
  return call_op(__func__, op, [&](auto& impl) {
    impl.forward(input, num_tokens, splits, scatter_index, weight, routing_weights, output);
  });
}

}  // extern "C"
