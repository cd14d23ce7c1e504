// oneDNN handles shared by the GEMM engine's files: the CPU engine, a stream per thread, dtype
// mapping and the descriptor of a weight as it lies in memory. Private to src/kernels.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>

#include "fluxcpp/types.hpp"

namespace fluxcpp::kernels {

dnnl::engine& dnnl_cpu_engine();
dnnl::stream& dnnl_thread_stream();  // one per thread: executions on it are synchronous (CPU)
dnnl::memory::data_type dnnl_dtype(DType d);

// op(B)[:, 0:cols] as the [k, cols] matrix oneDNN's matmul takes, for a weight [n, k] (rows of
// length k, leading dimension ld) or, when transposed, [k, n].
dnnl::memory::desc plain_weight_desc(DType d, int64_t k, int64_t cols, int64_t ld, bool transposed);
dnnl::memory::desc plain_weight_desc(dnnl::memory::data_type dt, int64_t k, int64_t cols,
                                     int64_t ld, bool transposed);

// Runs `fn` and turns a dnnl::error into a fluxcpp Error naming `what` (INTERNAL: oneDNN refused
// a descriptor the engine built, or SYSTEM for out of memory).
[[noreturn]] void raise_dnnl(const dnnl::error& e, const char* what);

}  // namespace fluxcpp::kernels
