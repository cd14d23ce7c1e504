// The C ABI of the expert-parallel MoE collectives (moe_dispatch, moe_combine): thin wrappers over
// the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/moe_combine.hpp"
#include "ops/moe_dispatch.hpp"

using namespace fluxcpp::capi;

FLUXCPP_CAPI_HANDLE(moe_dispatch, fluxcpp::detail::MoeDispatchImpl)
FLUXCPP_CAPI_HANDLE(moe_combine, fluxcpp::detail::MoeCombineImpl)

extern "C" {

fluxcpp_status_t fluxcpp_moe_dispatch_create(fluxcpp_context_t ctx, int64_t max_tokens,
                                             int64_t hidden, int64_t topk, int64_t num_experts,
                                             int64_t max_recv_rows, fluxcpp_dtype_t dtype,
                                             fluxcpp_moe_dispatch_t* op) {
  const fluxcpp::MoeDispatchOptions o{max_tokens,  hidden,        topk,
                                      num_experts, max_recv_rows, to_dtype(dtype)};
  return create_op(__func__, ctx, o, op);
}

fluxcpp_status_t fluxcpp_moe_dispatch_forward(fluxcpp_moe_dispatch_t op, const void* input,
                                              int64_t num_tokens, const int32_t* topk_ids,
                                              const float* topk_weights, void* recv,
                                              float* recv_weights, int32_t* recv_src,
                                              int64_t* recv_expert_counts, int64_t* num_recv_rows) {
  // A NULL num_recv_rows fails the call on every rank (through the handshake).
  return call_op(__func__, op, [&](auto& impl) {
    int64_t rows = 0;
    fluxcpp::MoeDispatchOutput out{recv, recv_weights, recv_src, recv_expert_counts, &rows};
    fluxcpp::MoeDispatchInput in{input, num_tokens, topk_ids, topk_weights};
    try {
      impl.forward(in, out, num_recv_rows == nullptr ? "num_recv_rows is NULL" : "");
    } catch (...) {
      if (num_recv_rows != nullptr) *num_recv_rows = rows;
      throw;
    }
    *num_recv_rows = rows;
  });
}

fluxcpp_status_t fluxcpp_moe_combine_create(fluxcpp_context_t ctx, int64_t max_tokens,
                                            int64_t hidden, int64_t topk, int64_t num_experts,
                                            int64_t max_recv_rows, fluxcpp_dtype_t input_dtype,
                                            fluxcpp_dtype_t output_dtype,
                                            fluxcpp_moe_combine_t* op) {
  const auto in = to_dtype(input_dtype), out = to_dtype(output_dtype);
  const fluxcpp::MoeCombineOptions o{max_tokens, hidden, topk, num_experts, max_recv_rows, in, out};
  return create_op(__func__, ctx, o, op);
}

fluxcpp_status_t fluxcpp_moe_combine_forward(fluxcpp_moe_combine_t op, const void* input,
                                             int64_t num_rows, int64_t num_tokens,
                                             const int32_t* topk_ids, const float* topk_weights,
                                             void* output) {
  return call_op(__func__, op, [&](auto& impl) {
    impl.forward({input, num_rows, num_tokens, topk_ids, topk_weights}, output);
  });
}

}  // extern "C"
