// The OpenBLAS backend of the GEMM engine: f64, and f32/bf16 on request (bf16 widened to f32).
// Called by gemm_tile after it has checked the arguments; runs under a BlasSingleThreadScope
// (kernels/blas_threads.hpp) held by the op.
#pragma once

#include <cstdint>

#include "kernels/gemm.hpp"

namespace fluxcpp::kernels {

// Fails with INVALID_ARGUMENT when a dimension exceeds OpenBLAS's integer range.
void blas_check_dims(int64_t rows, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

void blas_gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
                    int64_t n1, const GemmOut& out);

}  // namespace fluxcpp::kernels
