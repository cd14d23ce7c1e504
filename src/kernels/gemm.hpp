// The GEMM engine. Knows memory only, never ranks or threads of its own: every function computes
// on the calling thread (one OpenMP thread, one OpenBLAS thread), so several workers may call it
// concurrently on disjoint outputs.
//
// Backends (docs/design.md, "The GEMM engine"):
//   oneDNN matmul — f32 and bf16 (bf16 products with f32 accumulation on the CPU's bf16 dot
//     products), on the weight as it lies in memory or on a PackedWeight; bias, scale and
//     accumulation onto C are folded into the primitive (post-ops), never loops over C.
//   OpenBLAS — f64 (oneDNN has no f64 matmul), and on request f32/bf16 (bf16 widened to f32) as
//     the old engine, for comparisons.
#pragma once

#include <cstdint>
#include <vector>

#include "fluxcpp/types.hpp"

namespace fluxcpp::kernels {

enum class GemmEngine {
  kAuto,      // oneDNN for f32 and bf16, OpenBLAS for f64
  kOneDnn,    // f32 and bf16 only
  kOpenBlas,  // any dtype (bf16 widened to f32 once per prepare)
};
const char* gemm_engine_name(GemmEngine e);

class PackedWeight;

// The B operand ("weight") of a forward, shared read-only by every tile.
// Logical shape: weight is [n, k] (C = A·Bᵀ) or, when `transposed`, [k, n] (C = A·B).
class GemmWeight {
 public:
  GemmWeight() = default;
  // dtype is the input dtype (f32, f64 or bf16); ld is the leading dimension in elements
  // (0: contiguous, i.e. k when not transposed, n when transposed). Viewed in place: nothing is
  // copied (except bf16 on the OpenBLAS engine, widened to f32 here).
  void prepare(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
               int64_t ld = 0, GemmEngine engine = GemmEngine::kAuto);
  // Computes on a weight packed in oneDNN's layout (the PackedWeight must outlive the forward).
  void prepare(const PackedWeight& packed);

  DType input_dtype() const { return input_dtype_; }
  GemmEngine engine() const { return engine_; }             // resolved: kOneDnn or kOpenBlas
  const void* data() const { return data_; }                // as given, in input_dtype()
  const float* widened() const { return widened_.data(); }  // OpenBLAS bf16 only
  const PackedWeight* packed() const { return packed_; }
  int64_t ld() const { return ld_; }
  bool transposed() const { return transposed_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }

 private:
  DType input_dtype_ = DType::kFloat32;
  GemmEngine engine_ = GemmEngine::kOneDnn;
  const void* data_ = nullptr;
  const PackedWeight* packed_ = nullptr;
  int64_t ld_ = 0, n_ = 0, k_ = 0;
  bool transposed_ = false;
  std::vector<float> widened_;  // bf16 widened to f32 for the OpenBLAS engine (ld = width)
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

// C[0:rows, n0:n1] = scale · A[0:rows, 0:k] · op(B)[:, n0:n1] (+ bias[n0:n1]) (+ C if
// accumulate). A is in `a_dtype` (must equal w.input_dtype()) with leading dimension lda
// (elements). bf16 output is computed in f32 and rounded once (round to nearest even). f32 and
// bf16 inputs accumulate in f32, f64 in f64. rows == 0 or n0 == n1 is a no-op. `out.c` points at
// column n0 of row 0 of the tile. The result of a row depends on the shape of the call, not on
// the other rows: the same (rows, n0, n1) gives the same bits every time.
void gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
               int64_t n1, const GemmOut& out);

// Same as gemm_tile over all n columns, walking rows in blocks of `block_rows` (0: whole).
void gemm_rows(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, const GemmOut& out,
               int64_t block_rows = 0);

}  // namespace fluxcpp::kernels
