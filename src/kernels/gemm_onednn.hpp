// The oneDNN backend of the GEMM engine: f32 and bf16 tiles as one matmul primitive each, made
// once per thread and tile shape (a small per-thread cache) and run on one OpenMP thread. Called
// by gemm_tile after it has checked the arguments (k > 0, rows > 0, n0 < n1).
#pragma once

#include <cstdint>

#include "kernels/gemm.hpp"

namespace fluxcpp::kernels {

void onednn_gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
                      int64_t n1, const GemmOut& out);

// Primitives in the calling thread's cache (tests, diagnostics).
std::size_t onednn_cached_primitives();

}  // namespace fluxcpp::kernels
