// Blocked GEMM driver over OpenBLAS. Knows memory only, never ranks or threads of its own:
// every function computes on the calling thread, so several workers may call it concurrently
// on disjoint outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "fluxcpp/types.hpp"
#include "kernels/blas_threads.hpp"  // BLAS calls here run under a BlasSingleThreadScope

namespace fluxcpp::kernels {

// The B operand ("weight") prepared once per forward and shared read-only by every tile:
// f32/f64 weights are viewed in place, bf16 weights are converted to f32 once.
// Logical shape: weight is [n, k] (C = A·Bᵀ) or, when `transposed`, [k, n] (C = A·B).
class GemmWeight {
 public:
  GemmWeight() = default;
  // dtype is the input dtype (f32, f64 or bf16); ld is the leading dimension in elements
  // (0: contiguous, i.e. k when not transposed, n when transposed).
  void prepare(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
               int64_t ld = 0);

  DType input_dtype() const { return input_dtype_; }
  DType compute_dtype() const {
    return input_dtype_ == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  }
  const void* data() const { return data_; }  // in compute_dtype
  int64_t ld() const { return ld_; }
  bool transposed() const { return transposed_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }

 private:
  DType input_dtype_ = DType::kFloat32;
  const void* data_ = nullptr;
  int64_t ld_ = 0, n_ = 0, k_ = 0;
  bool transposed_ = false;
  std::vector<float> converted_;  // bf16 weights widened to f32
};

// Where a tile's result goes.
struct GemmOut {
  void* c = nullptr;  // element (0, n0) of the tile is at c; row stride ldc elements
  int64_t ldc = 0;
  DType dtype = DType::kFloat32;  // f32, f64 or bf16 (bf16 only with bf16 input)
  const void* bias = nullptr;     // [n] in `dtype`, indexed by absolute column; may be null
  bool accumulate = false;        // C += result (f32/f64 outputs only); otherwise C = result
  // Multiplies the product (not the bias) in the accumulation type, before the one rounding to
  // `dtype`: BLAS's alpha. 1 leaves the product as it is.
  double scale = 1.0;
};

// C[0:rows, n0:n1] = scale · A[0:rows, 0:k] · op(B)[:, n0:n1] (+ bias[n0:n1]).
// A is in `a_dtype` (must equal w.input_dtype()) with leading dimension lda (elements).
// bf16 A is widened to f32 in thread-local scratch; bf16 output is computed in f32 and rounded
// once (round to nearest even). f32 inputs accumulate in f32, f64 in f64. rows == 0 or n0 == n1
// is a no-op. `out.c` points at column n0 of row 0 of the tile.
void gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
               int64_t n1, const GemmOut& out);

// Same as gemm_tile over all n columns, walking rows in blocks of `block_rows` (0: whole).
void gemm_rows(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, const GemmOut& out,
               int64_t block_rows = 0);

}  // namespace fluxcpp::kernels
