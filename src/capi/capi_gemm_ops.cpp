// The C ABI of the fused GEMM ops (ag_gemm, gemm_rs, gemm_ar, a2a_gemm, Ulysses) and packed
// weights: thin wrappers over the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/a2a_gemm.hpp"
#include "ops/a2a_transpose_gemm.hpp"
#include "ops/ag_gemm.hpp"
#include "ops/core/tiled_gemm.hpp"
#include "ops/gemm_a2a_transpose.hpp"
#include "ops/gemm_ar.hpp"
#include "ops/gemm_rs.hpp"

using namespace fluxcpp::capi;

FLUXCPP_CAPI_HANDLE(ag_gemm, fluxcpp::detail::AgGemmImpl)
FLUXCPP_CAPI_HANDLE(gemm_rs, fluxcpp::detail::GemmRsImpl)
FLUXCPP_CAPI_HANDLE(gemm_ar, fluxcpp::detail::GemmArImpl)
FLUXCPP_CAPI_HANDLE(a2a_gemm, fluxcpp::detail::A2aGemmImpl)
FLUXCPP_CAPI_HANDLE(gemm_a2a_transpose, fluxcpp::detail::GemmA2aTransposeImpl)
FLUXCPP_CAPI_HANDLE(a2a_transpose_gemm, fluxcpp::detail::A2aTransposeGemmImpl)
FLUXCPP_CAPI_HANDLE(packed_weight, fluxcpp::kernels::PackedWeight)

namespace {

// The forward of ag_gemm and gemm_rs with a packed weight. A NULL one still takes part (as a NULL
// weight), so every rank fails alike.
template <typename H, typename... Rest>
fluxcpp_status_t forward_packed(const char* fn, H* op, const void* input, int64_t m,
                                fluxcpp_packed_weight_t weight, Rest... rest) {
  return call_op(fn, op, [&](auto& impl) {
    if (weight == nullptr) return impl.forward(input, m, nullptr, rest...);
    impl.forward(input, m, *weight->impl, rest...);
  });
}

}  // namespace

// The create of an op whose options are a GEMM's (gemm_options): ag_gemm, gemm_rs, gemm_ar and
// a2a_gemm share the C signature (ctx, max_m, n, k, input_dtype, output_dtype, transpose_weight).
#define FLUXCPP_GEMM_OP_CREATE(name, Options)                                                     \
  fluxcpp_status_t fluxcpp_##name##_create(                                                       \
      fluxcpp_context_t ctx, int64_t max_m, int64_t n, int64_t k, fluxcpp_dtype_t input_dtype,    \
      fluxcpp_dtype_t output_dtype, int transpose_weight, fluxcpp_##name##_t* op) {               \
    auto o =                                                                                      \
        gemm_options<fluxcpp::Options>(max_m, n, k, input_dtype, output_dtype, transpose_weight); \
    return create_op(__func__, ctx, o, op);                                                       \
  }

// The forward of a row-parallel op (gemm_rs, gemm_ar): (input, m, weight, bias, output).
#define FLUXCPP_ROW_PARALLEL_FORWARD(name)                                                        \
  fluxcpp_status_t fluxcpp_##name##_forward(fluxcpp_##name##_t op, const void* input, int64_t m,  \
                                            const void* weight, const void* bias, void* output) { \
    return call_op(__func__, op,                                                                  \
                   [&](auto& impl) { impl.forward(input, m, weight, bias, output); });            \
  }

// The forward of a GEMM op with zero-copy input and a second, optional output (ag_gemm's
// gathered_input, a2a_gemm's a2a_output), and its input_buffer.
#define FLUXCPP_ZERO_COPY_GEMM_FORWARD(name, extra)                                              \
  fluxcpp_status_t fluxcpp_##name##_forward(fluxcpp_##name##_t op, const void* input, int64_t m, \
                                            const void* weight, const void* bias, void* output,  \
                                            void* extra) {                                       \
    return call_op(__func__, op,                                                                 \
                   [&](auto& impl) { impl.forward(input, m, weight, bias, output, extra); });    \
  }                                                                                              \
  fluxcpp_status_t fluxcpp_##name##_input_buffer(fluxcpp_##name##_t op, void** buffer) {         \
    return input_buffer(__func__, op, buffer);                                                   \
  }

// The create of a Ulysses op: five sizes and two dtypes, passed to its options in the order of
// their fields (GemmA2aTransposeOptions: max_bs, max_seq, hidden, nheads, head_dim;
// A2aTransposeGemmOptions: max_bs, max_seq, nheads, head_dim, n), as fluxcpp.h declares them.
#define FLUXCPP_ULYSSES_CREATE(name, Options)                                                    \
  fluxcpp_status_t fluxcpp_##name##_create(                                                      \
      fluxcpp_context_t ctx, int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4,         \
      fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype, fluxcpp_##name##_t* op) {       \
    const fluxcpp::Options o{s0, s1, s2, s3, s4, to_dtype(input_dtype), to_dtype(output_dtype)}; \
    return create_op(__func__, ctx, o, op);                                                      \
  }

extern "C" {

FLUXCPP_GEMM_OP_CREATE(ag_gemm, AgGemmOptions)

FLUXCPP_ZERO_COPY_GEMM_FORWARD(ag_gemm, gathered_input)

FLUXCPP_GEMM_OP_CREATE(gemm_rs, GemmRsOptions)

FLUXCPP_ROW_PARALLEL_FORWARD(gemm_rs)

FLUXCPP_GEMM_OP_CREATE(gemm_ar, GemmArOptions)

FLUXCPP_ROW_PARALLEL_FORWARD(gemm_ar)

fluxcpp_status_t fluxcpp_gemm_ar_forward_packed(fluxcpp_gemm_ar_t op, const void* input, int64_t m,
                                                fluxcpp_packed_weight_t weight, const void* bias,
                                                void* output) {
  return forward_packed(__func__, op, input, m, weight, bias, output);
}

FLUXCPP_GEMM_OP_CREATE(a2a_gemm, A2aGemmOptions)

FLUXCPP_ZERO_COPY_GEMM_FORWARD(a2a_gemm, a2a_output)

FLUXCPP_ULYSSES_CREATE(gemm_a2a_transpose, GemmA2aTransposeOptions)

fluxcpp_status_t fluxcpp_gemm_a2a_transpose_forward(fluxcpp_gemm_a2a_transpose_t op,
                                                    const void* input, int64_t bs, int64_t seq,
                                                    const void* weight, const void* bias,
                                                    void* output) {
  return call_op(__func__, op,
                 [&](auto& impl) { impl.forward(input, bs, seq, weight, bias, output); });
}

FLUXCPP_ULYSSES_CREATE(a2a_transpose_gemm, A2aTransposeGemmOptions)

fluxcpp_status_t fluxcpp_a2a_transpose_gemm_forward(fluxcpp_a2a_transpose_gemm_t op,
                                                    const void* input, int64_t bs, int64_t seq,
                                                    const void* weight, const void* bias,
                                                    void* output, void* a2a_output) {
  return call_op(__func__, op, [&](auto& impl) {
    impl.forward(input, bs, seq, weight, bias, output, a2a_output);
  });
}

/* ---- packed weights ---- */

fluxcpp_status_t fluxcpp_packed_weight_create(fluxcpp_context_t ctx, fluxcpp_dtype_t dtype,
                                              const void* weight, int64_t n, int64_t k,
                                              int transpose_weight,
                                              fluxcpp_packed_weight_t* packed) {
  if (packed == nullptr) return null_arg(__func__, "packed");
  *packed = nullptr;
  if (ctx == nullptr) return null_arg(__func__, "ctx");
  return guarded([&] {
    auto h = std::make_unique<fluxcpp_packed_weight_s>();
    h->impl = std::make_unique<fluxcpp::kernels::PackedWeight>(
        to_dtype(dtype), weight, n, k, transpose_weight != 0, 0,
        fluxcpp::ops::column_slabs(ctx->impl->runtime().num_compute_workers(), 0, n));
    *packed = h.release();
  });
}

fluxcpp_status_t fluxcpp_packed_weight_update(fluxcpp_packed_weight_t packed, const void* weight) {
  return call_op(
      __func__, packed, [&](auto& impl) { impl.update(weight); }, "packed");
}

fluxcpp_status_t fluxcpp_ag_gemm_forward_packed(fluxcpp_ag_gemm_t op, const void* input, int64_t m,
                                                fluxcpp_packed_weight_t weight, const void* bias,
                                                void* output, void* gathered_input) {
  return forward_packed(__func__, op, input, m, weight, bias, output, gathered_input);
}

fluxcpp_status_t fluxcpp_gemm_rs_forward_packed(fluxcpp_gemm_rs_t op, const void* input, int64_t m,
                                                fluxcpp_packed_weight_t weight, const void* bias,
                                                void* output) {
  return forward_packed(__func__, op, input, m, weight, bias, output);
}

}  // extern "C"
