// The C ABI of the plain collectives (all_gather, all_reduce, reduce_scatter, all_to_all_single):
// thin wrappers over the ops (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/all_gather.hpp"
#include "ops/all_reduce.hpp"
#include "ops/all_to_all_single.hpp"
#include "ops/reduce_scatter.hpp"

using namespace fluxcpp::capi;

FLUXCPP_CAPI_HANDLE(all_gather, fluxcpp::detail::AllGatherImpl)
FLUXCPP_CAPI_HANDLE(all_reduce, fluxcpp::detail::AllReduceImpl)
FLUXCPP_CAPI_HANDLE(reduce_scatter, fluxcpp::detail::ReduceScatterImpl)
FLUXCPP_CAPI_HANDLE(all_to_all_single, fluxcpp::detail::AllToAllSingleImpl)

extern "C" {

fluxcpp_status_t fluxcpp_all_gather_create(fluxcpp_context_t ctx, int64_t max_m, int64_t k,
                                           fluxcpp_dtype_t dtype, fluxcpp_all_gather_t* op) {
  return create_op(__func__, ctx, fluxcpp::AllGatherOptions{max_m, k, to_dtype(dtype)}, op);
}

fluxcpp_status_t fluxcpp_all_gather_forward(fluxcpp_all_gather_t op, const void* input, int64_t m,
                                            void* output) {
  return call_op(__func__, op, [&](auto& impl) { impl.forward(input, m, output); });
}

fluxcpp_status_t fluxcpp_all_gather_input_buffer(fluxcpp_all_gather_t op, void** buffer) {
  return input_buffer(__func__, op, buffer);
}

fluxcpp_status_t fluxcpp_reduce_scatter_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n,
                                               fluxcpp_dtype_t dtype,
                                               fluxcpp_reduce_scatter_t* op) {
  return create_op(__func__, ctx, fluxcpp::ReduceScatterOptions{max_m, n, to_dtype(dtype)}, op);
}

fluxcpp_status_t fluxcpp_reduce_scatter_forward(fluxcpp_reduce_scatter_t op, const void* input,
                                                int64_t m, void* output) {
  return call_op(__func__, op, [&](auto& impl) { impl.forward(input, m, output); });
}

fluxcpp_status_t fluxcpp_all_reduce_create(fluxcpp_context_t ctx, int64_t max_count,
                                           fluxcpp_dtype_t dtype, fluxcpp_all_reduce_t* op) {
  return create_op(__func__, ctx, fluxcpp::AllReduceOptions{max_count, to_dtype(dtype)}, op);
}

fluxcpp_status_t fluxcpp_all_reduce_forward(fluxcpp_all_reduce_t op, const void* input,
                                            int64_t count, void* output) {
  return call_op(__func__, op, [&](auto& impl) { impl.forward(input, count, output); });
}

fluxcpp_status_t fluxcpp_all_reduce_input_buffer(fluxcpp_all_reduce_t op, void** buffer) {
  return input_buffer(__func__, op, buffer);
}

fluxcpp_status_t fluxcpp_all_to_all_single_create(fluxcpp_context_t ctx, int64_t max_rows,
                                                  int64_t n, fluxcpp_dtype_t dtype,
                                                  fluxcpp_all_to_all_single_t* op) {
  return create_op(__func__, ctx, fluxcpp::AllToAllSingleOptions{max_rows, n, to_dtype(dtype)}, op);
}

fluxcpp_status_t fluxcpp_all_to_all_single_forward(fluxcpp_all_to_all_single_t op,
                                                   const void* input, const int64_t* input_splits,
                                                   void* output, const int64_t* output_splits) {
  return call_op(__func__, op,
                 [&](auto& impl) { impl.forward(input, input_splits, output, output_splits); });
}

fluxcpp_status_t fluxcpp_all_to_all_single_input_buffer(fluxcpp_all_to_all_single_t op,
                                                        void** buffer) {
  return input_buffer(__func__, op, buffer);
}

}  // extern "C"
