// The C ABI of the plain collectives (all_gather, reduce_scatter, all_to_all_single): thin wrappers
// over the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/all_gather.hpp"
#include "ops/all_to_all_single.hpp"
#include "ops/reduce_scatter.hpp"

// Handles hold the implementations directly, so the C layer can pass a rank-local argument
// error into the collective constructors (every rank then fails alike instead of hanging).
struct fluxcpp_all_gather_s {
  std::unique_ptr<fluxcpp::detail::AllGatherImpl> impl;
};
struct fluxcpp_reduce_scatter_s {
  std::unique_ptr<fluxcpp::detail::ReduceScatterImpl> impl;
};
struct fluxcpp_all_to_all_single_s {
  std::unique_ptr<fluxcpp::detail::AllToAllSingleImpl> impl;
};

using namespace fluxcpp::capi;

extern "C" {

fluxcpp_status_t fluxcpp_all_gather_create(fluxcpp_context_t ctx, int64_t max_m, int64_t k,
                                           fluxcpp_dtype_t dtype, fluxcpp_all_gather_t* op) {
  return create_op<fluxcpp_all_gather_s, fluxcpp::detail::AllGatherImpl>(
      "fluxcpp_all_gather_create", ctx, fluxcpp::AllGatherOptions{max_m, k, to_dtype(dtype)}, op);
}

fluxcpp_status_t fluxcpp_all_gather_forward(fluxcpp_all_gather_t op, const void* input, int64_t m,
                                            void* output) {
  if (op == nullptr) return null_arg("fluxcpp_all_gather_forward", "op");
  return guarded([&] { op->impl->forward(input, m, output); });
}

fluxcpp_status_t fluxcpp_all_gather_input_buffer(fluxcpp_all_gather_t op, void** buffer) {
  if (op == nullptr) return null_arg("fluxcpp_all_gather_input_buffer", "op");
  if (buffer == nullptr) return null_arg("fluxcpp_all_gather_input_buffer", "buffer");
  *buffer = nullptr;
  return guarded([&] { *buffer = op->impl->input_buffer(); });
}

fluxcpp_status_t fluxcpp_all_gather_destroy(fluxcpp_all_gather_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_reduce_scatter_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n,
                                               fluxcpp_dtype_t dtype,
                                               fluxcpp_reduce_scatter_t* op) {
  return create_op<fluxcpp_reduce_scatter_s, fluxcpp::detail::ReduceScatterImpl>(
      "fluxcpp_reduce_scatter_create", ctx,
      fluxcpp::ReduceScatterOptions{max_m, n, to_dtype(dtype)}, op);
}

fluxcpp_status_t fluxcpp_reduce_scatter_forward(fluxcpp_reduce_scatter_t op, const void* input,
                                                int64_t m, void* output) {
  if (op == nullptr) return null_arg("fluxcpp_reduce_scatter_forward", "op");
  return guarded([&] { op->impl->forward(input, m, output); });
}

fluxcpp_status_t fluxcpp_reduce_scatter_destroy(fluxcpp_reduce_scatter_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

fluxcpp_status_t fluxcpp_all_to_all_single_create(fluxcpp_context_t ctx, int64_t max_rows,
                                                  int64_t n, fluxcpp_dtype_t dtype,
                                                  fluxcpp_all_to_all_single_t* op) {
  return create_op<fluxcpp_all_to_all_single_s, fluxcpp::detail::AllToAllSingleImpl>(
      "fluxcpp_all_to_all_single_create", ctx,
      fluxcpp::AllToAllSingleOptions{max_rows, n, to_dtype(dtype)}, op);
}

fluxcpp_status_t fluxcpp_all_to_all_single_forward(fluxcpp_all_to_all_single_t op,
                                                   const void* input, const int64_t* input_splits,
                                                   void* output, const int64_t* output_splits) {
  if (op == nullptr) return null_arg("fluxcpp_all_to_all_single_forward", "op");
  return guarded([&] { op->impl->forward(input, input_splits, output, output_splits); });
}

fluxcpp_status_t fluxcpp_all_to_all_single_input_buffer(fluxcpp_all_to_all_single_t op,
                                                        void** buffer) {
  if (op == nullptr) return null_arg("fluxcpp_all_to_all_single_input_buffer", "op");
  if (buffer == nullptr) return null_arg("fluxcpp_all_to_all_single_input_buffer", "buffer");
  *buffer = nullptr;
  return guarded([&] { *buffer = op->impl->input_buffer(); });
}

fluxcpp_status_t fluxcpp_all_to_all_single_destroy(fluxcpp_all_to_all_single_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

}  // extern "C"
