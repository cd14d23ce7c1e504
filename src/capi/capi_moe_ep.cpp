// The C ABI of the expert-parallel MoE collectives (moe_dispatch, moe_combine): thin wrappers over
// the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/moe_combine.hpp"
#include "ops/moe_dispatch.hpp"

struct fluxcpp_moe_dispatch_s {
  std::unique_ptr<fluxcpp::detail::MoeDispatchImpl> impl;
};
struct fluxcpp_moe_combine_s {
  std::unique_ptr<fluxcpp::detail::MoeCombineImpl> impl;
};

using namespace fluxcpp::capi;

extern "C" {

fluxcpp_status_t fluxcpp_moe_dispatch_create(fluxcpp_context_t ctx, int64_t max_tokens,
                                             int64_t hidden, int64_t topk, int64_t num_experts,
                                             int64_t max_recv_rows, fluxcpp_dtype_t dtype,
                                             fluxcpp_moe_dispatch_t* op) {
  fluxcpp::MoeDispatchOptions o;
  o.max_tokens = max_tokens;
  o.hidden = hidden;
  o.topk = topk;
  o.num_experts = num_experts;
  o.max_recv_rows = max_recv_rows;
  o.dtype = to_dtype(dtype);
  return create_op<fluxcpp_moe_dispatch_s, fluxcpp::detail::MoeDispatchImpl>(
      "fluxcpp_moe_dispatch_create", ctx, o, op);
}

fluxcpp_status_t fluxcpp_moe_dispatch_forward(fluxcpp_moe_dispatch_t op, const void* input,
                                              int64_t num_tokens, const int32_t* topk_ids,
                                              const float* topk_weights, void* recv,
                                              float* recv_weights, int32_t* recv_src,
                                              int64_t* recv_expert_counts, int64_t* num_recv_rows) {
  if (op == nullptr) return null_arg("fluxcpp_moe_dispatch_forward", "op");
  // A NULL num_recv_rows fails the call on every rank (through the handshake).
  return guarded([&] {
    int64_t rows = 0;
    fluxcpp::MoeDispatchOutput out{recv, recv_weights, recv_src, recv_expert_counts, &rows};
    fluxcpp::MoeDispatchInput in{input, num_tokens, topk_ids, topk_weights};
    try {
      op->impl->forward(in, out, num_recv_rows == nullptr ? "num_recv_rows is NULL" : "");
    } catch (...) {
      if (num_recv_rows != nullptr) *num_recv_rows = rows;
      throw;
    }
    *num_recv_rows = rows;
  });
}

fluxcpp_status_t fluxcpp_moe_dispatch_destroy(fluxcpp_moe_dispatch_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_moe_combine_create(fluxcpp_context_t ctx, int64_t max_tokens,
                                            int64_t hidden, int64_t topk, int64_t num_experts,
                                            int64_t max_recv_rows, fluxcpp_dtype_t input_dtype,
                                            fluxcpp_dtype_t output_dtype,
                                            fluxcpp_moe_combine_t* op) {
  fluxcpp::MoeCombineOptions o;
  o.max_tokens = max_tokens;
  o.hidden = hidden;
  o.topk = topk;
  o.num_experts = num_experts;
  o.max_recv_rows = max_recv_rows;
  o.input_dtype = to_dtype(input_dtype);
  o.output_dtype = to_dtype(output_dtype);
  return create_op<fluxcpp_moe_combine_s, fluxcpp::detail::MoeCombineImpl>(
      "fluxcpp_moe_combine_create", ctx, o, op);
}

fluxcpp_status_t fluxcpp_moe_combine_forward(fluxcpp_moe_combine_t op, const void* input,
                                             int64_t num_rows, int64_t num_tokens,
                                             const int32_t* topk_ids, const float* topk_weights,
                                             void* output) {
  if (op == nullptr) return null_arg("fluxcpp_moe_combine_forward", "op");
  return guarded([&] {
    op->impl->forward({input, num_rows, num_tokens, topk_ids, topk_weights}, output);
  });
}

fluxcpp_status_t fluxcpp_moe_combine_destroy(fluxcpp_moe_combine_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

}  // extern "C"
