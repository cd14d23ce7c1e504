// The C ABI of the fused GEMM ops (ag_gemm, gemm_rs, a2a_gemm, Ulysses) and packed weights: thin
// wrappers over the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/a2a_gemm.hpp"
#include "ops/a2a_transpose_gemm.hpp"
#include "ops/ag_gemm.hpp"
#include "ops/core/parallel_gemm.hpp"
#include "ops/gemm_a2a_transpose.hpp"
#include "ops/gemm_rs.hpp"

// Handles hold the implementations directly, so the C layer can pass a rank-local argument
// error into the collective constructors (every rank then fails alike instead of hanging).
struct fluxcpp_ag_gemm_s {
  std::unique_ptr<fluxcpp::detail::AgGemmImpl> impl;
};
struct fluxcpp_gemm_rs_s {
  std::unique_ptr<fluxcpp::detail::GemmRsImpl> impl;
};
struct fluxcpp_a2a_gemm_s {
  std::unique_ptr<fluxcpp::detail::A2aGemmImpl> impl;
};
struct fluxcpp_gemm_a2a_transpose_s {
  std::unique_ptr<fluxcpp::detail::GemmA2aTransposeImpl> impl;
};
struct fluxcpp_a2a_transpose_gemm_s {
  std::unique_ptr<fluxcpp::detail::A2aTransposeGemmImpl> impl;
};
struct fluxcpp_packed_weight_s {
  std::unique_ptr<fluxcpp::kernels::PackedWeight> impl;
};

using namespace fluxcpp::capi;

extern "C" {

fluxcpp_status_t fluxcpp_ag_gemm_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n, int64_t k,
                                        fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
                                        int transpose_weight, fluxcpp_ag_gemm_t* op) {
  return create_op<fluxcpp_ag_gemm_s, fluxcpp::detail::AgGemmImpl>(
      "fluxcpp_ag_gemm_create", ctx,
      gemm_options<fluxcpp::AgGemmOptions>(max_m, n, k, input_dtype, output_dtype,
                                           transpose_weight),
      op);
}

fluxcpp_status_t fluxcpp_ag_gemm_forward(fluxcpp_ag_gemm_t op, const void* input, int64_t m,
                                         const void* weight, const void* bias, void* output,
                                         void* gathered_input) {
  if (op == nullptr) return null_arg("fluxcpp_ag_gemm_forward", "op");
  return guarded([&] { op->impl->forward(input, m, weight, bias, output, gathered_input); });
}

fluxcpp_status_t fluxcpp_ag_gemm_input_buffer(fluxcpp_ag_gemm_t op, void** buffer) {
  if (op == nullptr) return null_arg("fluxcpp_ag_gemm_input_buffer", "op");
  if (buffer == nullptr) return null_arg("fluxcpp_ag_gemm_input_buffer", "buffer");
  *buffer = nullptr;
  return guarded([&] { *buffer = op->impl->input_buffer(); });
}

fluxcpp_status_t fluxcpp_ag_gemm_destroy(fluxcpp_ag_gemm_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_gemm_rs_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n, int64_t k,
                                        fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
                                        int transpose_weight, fluxcpp_gemm_rs_t* op) {
  return create_op<fluxcpp_gemm_rs_s, fluxcpp::detail::GemmRsImpl>(
      "fluxcpp_gemm_rs_create", ctx,
      gemm_options<fluxcpp::GemmRsOptions>(max_m, n, k, input_dtype, output_dtype,
                                           transpose_weight),
      op);
}

fluxcpp_status_t fluxcpp_gemm_rs_forward(fluxcpp_gemm_rs_t op, const void* input, int64_t m,
                                         const void* weight, const void* bias, void* output) {
  if (op == nullptr) return null_arg("fluxcpp_gemm_rs_forward", "op");
  return guarded([&] { op->impl->forward(input, m, weight, bias, output); });
}

fluxcpp_status_t fluxcpp_gemm_rs_destroy(fluxcpp_gemm_rs_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_a2a_gemm_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n, int64_t k,
                                         fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
                                         int transpose_weight, fluxcpp_a2a_gemm_t* op) {
  return create_op<fluxcpp_a2a_gemm_s, fluxcpp::detail::A2aGemmImpl>(
      "fluxcpp_a2a_gemm_create", ctx,
      gemm_options<fluxcpp::A2aGemmOptions>(max_m, n, k, input_dtype, output_dtype,
                                            transpose_weight),
      op);
}

fluxcpp_status_t fluxcpp_a2a_gemm_forward(fluxcpp_a2a_gemm_t op, const void* input, int64_t m,
                                          const void* weight, const void* bias, void* output,
                                          void* a2a_output) {
  if (op == nullptr) return null_arg("fluxcpp_a2a_gemm_forward", "op");
  return guarded([&] { op->impl->forward(input, m, weight, bias, output, a2a_output); });
}

fluxcpp_status_t fluxcpp_a2a_gemm_input_buffer(fluxcpp_a2a_gemm_t op, void** buffer) {
  if (op == nullptr) return null_arg("fluxcpp_a2a_gemm_input_buffer", "op");
  if (buffer == nullptr) return null_arg("fluxcpp_a2a_gemm_input_buffer", "buffer");
  *buffer = nullptr;
  return guarded([&] { *buffer = op->impl->input_buffer(); });
}

fluxcpp_status_t fluxcpp_a2a_gemm_destroy(fluxcpp_a2a_gemm_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_gemm_a2a_transpose_create(fluxcpp_context_t ctx, int64_t max_bs,
                                                   int64_t max_seq, int64_t hidden, int64_t nheads,
                                                   int64_t head_dim, fluxcpp_dtype_t input_dtype,
                                                   fluxcpp_dtype_t output_dtype,
                                                   fluxcpp_gemm_a2a_transpose_t* op) {
  fluxcpp::GemmA2aTransposeOptions o;
  o.max_bs = max_bs;
  o.max_seq = max_seq;
  o.hidden = hidden;
  o.nheads = nheads;
  o.head_dim = head_dim;
  o.input_dtype = to_dtype(input_dtype);
  o.output_dtype = to_dtype(output_dtype);
  return create_op<fluxcpp_gemm_a2a_transpose_s, fluxcpp::detail::GemmA2aTransposeImpl>(
      "fluxcpp_gemm_a2a_transpose_create", ctx, o, op);
}

fluxcpp_status_t fluxcpp_gemm_a2a_transpose_forward(fluxcpp_gemm_a2a_transpose_t op,
                                                    const void* input, int64_t bs, int64_t seq,
                                                    const void* weight, const void* bias,
                                                    void* output) {
  if (op == nullptr) return null_arg("fluxcpp_gemm_a2a_transpose_forward", "op");
  return guarded([&] { op->impl->forward(input, bs, seq, weight, bias, output); });
}

fluxcpp_status_t fluxcpp_gemm_a2a_transpose_destroy(fluxcpp_gemm_a2a_transpose_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_a2a_transpose_gemm_create(fluxcpp_context_t ctx, int64_t max_bs,
                                                   int64_t max_seq, int64_t nheads,
                                                   int64_t head_dim, int64_t n,
                                                   fluxcpp_dtype_t input_dtype,
                                                   fluxcpp_dtype_t output_dtype,
                                                   fluxcpp_a2a_transpose_gemm_t* op) {
  fluxcpp::A2aTransposeGemmOptions o;
  o.max_bs = max_bs;
  o.max_seq = max_seq;
  o.nheads = nheads;
  o.head_dim = head_dim;
  o.n = n;
  o.input_dtype = to_dtype(input_dtype);
  o.output_dtype = to_dtype(output_dtype);
  return create_op<fluxcpp_a2a_transpose_gemm_s, fluxcpp::detail::A2aTransposeGemmImpl>(
      "fluxcpp_a2a_transpose_gemm_create", ctx, o, op);
}

fluxcpp_status_t fluxcpp_a2a_transpose_gemm_forward(fluxcpp_a2a_transpose_gemm_t op,
                                                    const void* input, int64_t bs, int64_t seq,
                                                    const void* weight, const void* bias,
                                                    void* output, void* a2a_output) {
  if (op == nullptr) return null_arg("fluxcpp_a2a_transpose_gemm_forward", "op");
  return guarded([&] { op->impl->forward(input, bs, seq, weight, bias, output, a2a_output); });
}

fluxcpp_status_t fluxcpp_a2a_transpose_gemm_destroy(fluxcpp_a2a_transpose_gemm_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

/* ---- packed weights ---- */

fluxcpp_status_t fluxcpp_packed_weight_create(fluxcpp_context_t ctx, fluxcpp_dtype_t dtype,
                                              const void* weight, int64_t n, int64_t k,
                                              int transpose_weight,
                                              fluxcpp_packed_weight_t* packed) {
  if (packed == nullptr) return null_arg("fluxcpp_packed_weight_create", "packed");
  *packed = nullptr;
  if (ctx == nullptr) return null_arg("fluxcpp_packed_weight_create", "ctx");
  return guarded([&] {
    auto h = std::make_unique<fluxcpp_packed_weight_s>();
    h->impl = std::make_unique<fluxcpp::kernels::PackedWeight>(
        to_dtype(dtype), weight, n, k, transpose_weight != 0, 0,
        fluxcpp::ops::column_slabs(ctx->impl->num_compute_workers(), 0, n));
    *packed = h.release();
  });
}

fluxcpp_status_t fluxcpp_packed_weight_update(fluxcpp_packed_weight_t packed, const void* weight) {
  if (packed == nullptr) return null_arg("fluxcpp_packed_weight_update", "packed");
  return guarded([&] { packed->impl->update(weight); });
}

fluxcpp_status_t fluxcpp_packed_weight_destroy(fluxcpp_packed_weight_t packed) {
  delete packed;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_ag_gemm_forward_packed(fluxcpp_ag_gemm_t op, const void* input, int64_t m,
                                                fluxcpp_packed_weight_t weight, const void* bias,
                                                void* output, void* gathered_input) {
  if (op == nullptr) return null_arg("fluxcpp_ag_gemm_forward_packed", "op");
  if (weight == nullptr) {  // still take part, so every rank fails alike
    return guarded([&] { op->impl->forward(input, m, nullptr, bias, output, gathered_input); });
  }
  return guarded([&] { op->impl->forward(input, m, *weight->impl, bias, output, gathered_input); });
}

fluxcpp_status_t fluxcpp_gemm_rs_forward_packed(fluxcpp_gemm_rs_t op, const void* input, int64_t m,
                                                fluxcpp_packed_weight_t weight, const void* bias,
                                                void* output) {
  if (op == nullptr) return null_arg("fluxcpp_gemm_rs_forward_packed", "op");
  if (weight == nullptr)
    return guarded([&] { op->impl->forward(input, m, nullptr, bias, output); });
  return guarded([&] { op->impl->forward(input, m, *weight->impl, bias, output); });
}

}  // extern "C"
