// The C ABI: thin wrappers that catch every exception and map it to a status code.
#include "fluxcpp/fluxcpp.h"

#include <cstring>
#include <new>
#include <string>

#include "comm/context_impl.hpp"
#include "fluxcpp/fluxcpp.hpp"
#include "ops/a2a_gemm.hpp"
#include "ops/ag_gemm.hpp"
#include "ops/all_gather.hpp"
#include "ops/all_to_all_single.hpp"
#include "ops/gemm_rs.hpp"
#include "ops/reduce_scatter.hpp"
#include "ops/ulysses.hpp"

// Handles hold the implementations directly, so the C layer can pass a rank-local argument
// error into the collective constructors (every rank then fails alike instead of hanging).
struct fluxcpp_context_s {
  std::shared_ptr<fluxcpp::detail::ContextImpl> impl;
};
struct fluxcpp_all_gather_s {
  std::unique_ptr<fluxcpp::detail::AllGatherImpl> impl;
};
struct fluxcpp_reduce_scatter_s {
  std::unique_ptr<fluxcpp::detail::ReduceScatterImpl> impl;
};
struct fluxcpp_gemm_rs_s {
  std::unique_ptr<fluxcpp::detail::GemmRsImpl> impl;
};
struct fluxcpp_ag_gemm_s {
  std::unique_ptr<fluxcpp::detail::AgGemmImpl> impl;
};
struct fluxcpp_all_to_all_single_s {
  std::unique_ptr<fluxcpp::detail::AllToAllSingleImpl> impl;
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

namespace {

thread_local std::string g_last_error;

fluxcpp_status_t fail(fluxcpp_status_t s, std::string msg) {
  g_last_error = std::move(msg);
  return s;
}

template <typename F>
fluxcpp_status_t guarded(F&& f) noexcept {
  try {
    f();
    return FLUXCPP_SUCCESS;
  } catch (const fluxcpp::Error& e) {
    return fail(static_cast<fluxcpp_status_t>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(FLUXCPP_ERROR_SYSTEM, "out of memory");
  } catch (const std::exception& e) {
    return fail(FLUXCPP_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(FLUXCPP_ERROR_INTERNAL, "unknown exception");
  }
}

fluxcpp_status_t null_arg(const char* fn, const char* arg) {
  return fail(FLUXCPP_ERROR_INVALID_ARGUMENT, std::string(fn) + ": " + arg + " is NULL");
}

// Out-of-range values pass through; the op's collective check names them and the rank.
fluxcpp::DType to_dtype(const fluxcpp_dtype_t& d) {
  // A C caller may pass any int; reading it as the C++ enum type would be undefined behaviour
  // for values outside the enumerators, so read the bytes.
  static_assert(sizeof(fluxcpp_dtype_t) == sizeof(int), "C enums are int-sized");
  int raw;
  std::memcpy(&raw, &d, sizeof raw);
  return static_cast<fluxcpp::DType>(raw);
}

// Every op's create: the out-pointer is cleared first; a NULL out-pointer still takes part in the
// collective construction (which then fails on every rank); a NULL context cannot.
template <typename Handle, typename Impl, typename Options>
fluxcpp_status_t create_op(const char* fn, fluxcpp_context_t ctx, const Options& options,
                           Handle** op) {
  if (op != nullptr) *op = nullptr;
  if (ctx == nullptr) return null_arg(fn, "ctx");
  return guarded([&] {
    auto impl = std::make_unique<Impl>(ctx->impl, options,
                                       op == nullptr ? "the op out-pointer is NULL" : "");
    *op = new Handle{std::move(impl)};
  });
}

// The fused GEMM ops share their create arguments.
template <typename Options>
Options gemm_options(int64_t max_m, int64_t n, int64_t k, const fluxcpp_dtype_t& input_dtype,
                     const fluxcpp_dtype_t& output_dtype, int transpose_weight) {
  Options o;
  o.max_m = max_m;
  o.n = n;
  o.k = k;
  o.input_dtype = to_dtype(input_dtype);
  o.output_dtype = to_dtype(output_dtype);
  o.transpose_weight = transpose_weight != 0;
  return o;
}

}  // namespace

extern "C" {

const char* fluxcpp_status_string(fluxcpp_status_t status) {
  switch (status) {
    case FLUXCPP_SUCCESS: return "success";
    case FLUXCPP_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case FLUXCPP_ERROR_INVALID_USAGE: return "invalid usage";
    case FLUXCPP_ERROR_SYSTEM: return "system error";
    case FLUXCPP_ERROR_MPI: return "MPI error";
    case FLUXCPP_ERROR_TIMEOUT: return "timeout";
    case FLUXCPP_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* fluxcpp_last_error(void) {
  return g_last_error.c_str();
}

int fluxcpp_version(void) {
  return fluxcpp::version();
}

fluxcpp_status_t fluxcpp_context_create(MPI_Comm comm, const fluxcpp_context_config_t* config,
                                        fluxcpp_context_t* ctx) {
  if (ctx != nullptr) *ctx = nullptr;
  return guarded([&] {
    fluxcpp::ContextOptions o;
    // Rank-local problems still go through the collective constructor, which then fails on
    // every rank with this message instead of leaving the other ranks waiting.
    std::string local_error = ctx == nullptr ? "context: the ctx out-pointer is NULL" : "";
    if (config != nullptr) {
      // A caller built against an older, shorter struct passes a smaller size: read only what
      // it has.
      const size_t n = config->struct_size;
      if (n < offsetof(fluxcpp_context_config_t, ranks_per_node) + sizeof(int)) {
        local_error = "context: config->struct_size=" + std::to_string(n) +
                      " is too small (initialise it with FLUXCPP_CONTEXT_CONFIG_INIT)";
      } else {
        o.ranks_per_node = config->ranks_per_node;
        if (n >= offsetof(fluxcpp_context_config_t, timeout_s) + sizeof(double))
          o.timeout_s = config->timeout_s;
        if (n >= offsetof(fluxcpp_context_config_t, compute_threads) + sizeof(int))
          o.compute_threads = config->compute_threads;
        if (n >= offsetof(fluxcpp_context_config_t, comm_threads) + sizeof(int))
          o.comm_threads = config->comm_threads;
      }
    }
    auto impl = std::make_shared<fluxcpp::detail::ContextImpl>(comm, o, local_error);
    *ctx = new fluxcpp_context_s{std::move(impl)};
  });
}

fluxcpp_status_t fluxcpp_context_destroy(fluxcpp_context_t ctx) {
  if (ctx == nullptr) return FLUXCPP_SUCCESS;
  fluxcpp_status_t s = guarded([&] { ctx->impl->close(); });
  delete ctx;
  return s;
}

fluxcpp_status_t fluxcpp_context_info(fluxcpp_context_t ctx, int* rank, int* world_size,
                                      int* node_rank, int* node_size) {
  if (ctx == nullptr) return null_arg("fluxcpp_context_info", "ctx");
  const auto& c = *ctx->impl;
  if (rank != nullptr) *rank = c.world_rank();
  if (world_size != nullptr) *world_size = c.world_size();
  if (node_rank != nullptr) *node_rank = c.node_rank();
  if (node_size != nullptr) *node_size = c.node_size();
  return FLUXCPP_SUCCESS;
}

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

fluxcpp_status_t fluxcpp_all_gather_destroy(fluxcpp_all_gather_t op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

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

fluxcpp_status_t fluxcpp_ag_gemm_destroy(fluxcpp_ag_gemm_t op) {
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

fluxcpp_status_t fluxcpp_all_to_all_single_destroy(fluxcpp_all_to_all_single_t op) {
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

}  // extern "C"
