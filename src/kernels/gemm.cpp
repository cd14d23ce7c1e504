#include "kernels/gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "error_util.hpp"
#include "fluxcpp/error.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm_blas.hpp"
#include "kernels/gemm_onednn.hpp"
#include "kernels/gemm_packed_weight.hpp"

namespace fluxcpp::kernels {
namespace {

bool dtype_pair_ok(DType in, DType out) {
  switch (in) {
    case DType::kFloat32: return out == DType::kFloat32;
    case DType::kFloat64: return out == DType::kFloat64;
    case DType::kBFloat16: return out == DType::kBFloat16 || out == DType::kFloat32;
  }
  return false;
}

// C = bias (or 0) in every row, or C += bias: the whole result when k == 0.
template <class T>
void bias_only(T* c, int64_t ldc, int64_t rows, int64_t cols, const T* bias, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) {
      const T b = bias != nullptr ? bias[j] : T(0);
      row[j] = accumulate ? row[j] + b : b;
    }
  }
}

void empty_product(const GemmOut& out, int64_t rows, int64_t n0, int64_t cols) {
  switch (out.dtype) {
    case DType::kFloat32: {
      const auto* b = static_cast<const float*>(out.bias);
      bias_only(static_cast<float*>(out.c), out.ldc, rows, cols, b ? b + n0 : nullptr,
                out.accumulate);
      return;
    }
    case DType::kFloat64: {
      const auto* b = static_cast<const double*>(out.bias);
      bias_only(static_cast<double*>(out.c), out.ldc, rows, cols, b ? b + n0 : nullptr,
                out.accumulate);
      return;
    }
    case DType::kBFloat16: {  // accumulate is refused for bf16 output
      const auto* b = static_cast<const uint16_t*>(out.bias);
      auto* c = static_cast<uint16_t*>(out.c);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) c[r * out.ldc + j] = b != nullptr ? b[n0 + j] : 0;
      return;
    }
  }
}

}  // namespace

const char* gemm_engine_name(GemmEngine e) {
  switch (e) {
    case GemmEngine::kAuto: return "auto";
    case GemmEngine::kOneDnn: return "onednn";
    case GemmEngine::kOpenBlas: return "openblas";
  }
  return "?";
}

void GemmWeight::prepare(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
                         int64_t ld, GemmEngine engine) {
  FLUXCPP_CHECK_ARG(
      dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16,
      "GemmWeight::prepare: unsupported dtype {}", static_cast<int>(dtype));
  FLUXCPP_CHECK_ARG(n >= 0 && k >= 0, "GemmWeight::prepare: negative shape n={} k={}", n, k);
  // Rows of the stored matrix have `width` elements: [n, k] or, transposed, [k, n].
  const int64_t width = transposed ? n : k;
  const int64_t height = transposed ? k : n;
  if (ld == 0) ld = width;
  FLUXCPP_CHECK_ARG(ld >= width, "GemmWeight::prepare: ld={} < row width {}", ld, width);
  FLUXCPP_CHECK_ARG(weight != nullptr || n == 0 || k == 0, "GemmWeight::prepare: weight is null");
  if (engine == GemmEngine::kAuto)
    engine = dtype == DType::kFloat64 ? GemmEngine::kOpenBlas : GemmEngine::kOneDnn;
  FLUXCPP_CHECK_ARG(engine == GemmEngine::kOpenBlas || dtype != DType::kFloat64,
                    "GemmWeight::prepare: the oneDNN engine has no f64 GEMM");

  input_dtype_ = dtype;
  engine_ = engine;
  data_ = weight;
  packed_ = nullptr;
  n_ = n;
  k_ = k;
  ld_ = ld;
  transposed_ = transposed;
  widened_.clear();
  if (dtype != DType::kBFloat16 || engine != GemmEngine::kOpenBlas) return;
  // OpenBLAS has no bf16 GEMM: the weight is widened once per prepare.
  resize_or_raise(widened_, static_cast<size_t>(height * width), "gemm",
                  "the f32 copy of the bf16 weight");
  const auto* src = static_cast<const uint16_t*>(weight);
  if (width > 0)
    for (int64_t r = 0; r < height; ++r)
      bf16_to_f32(src + r * ld, widened_.data() + r * width, width);
}

void GemmWeight::prepare(const PackedWeight& packed) {
  input_dtype_ = packed.dtype();
  engine_ = GemmEngine::kOneDnn;
  data_ = nullptr;
  packed_ = &packed;
  n_ = packed.n();
  k_ = packed.k();
  ld_ = 0;
  transposed_ = packed.transposed();
  widened_.clear();
}

void gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
               int64_t n1, const GemmOut& out) {
  const DType in = w.input_dtype();
  FLUXCPP_CHECK_ARG(dtype_pair_ok(in, out.dtype), "gemm: unsupported dtype pair {} -> {}",
                    dtype_name(in), dtype_name(out.dtype));
  FLUXCPP_CHECK_ARG(!(out.accumulate && out.dtype == DType::kBFloat16),
                    "gemm: accumulate is not supported for bf16 output");
  FLUXCPP_CHECK_ARG(rows >= 0 && n0 >= 0 && n1 >= n0 && n1 <= w.n(),
                    "gemm: bad tile rows={} columns [{}, {}) of n={}", rows, n0, n1, w.n());
  if (rows == 0 || n0 == n1) return;
  const int64_t k = w.k();
  const int64_t cols = n1 - n0;
  FLUXCPP_CHECK_ARG(lda >= k, "gemm: lda={} < k={}", lda, k);
  FLUXCPP_CHECK_ARG(out.ldc >= cols, "gemm: ldc={} < tile width {}", out.ldc, cols);
  FLUXCPP_CHECK_ARG(out.c != nullptr, "gemm: output is null");
  FLUXCPP_CHECK_ARG(a != nullptr || k == 0, "gemm: A is null");
  if (k == 0) {
    empty_product(out, rows, n0, cols);
    return;
  }
  if (w.engine() == GemmEngine::kOpenBlas) {
    blas_gemm_tile(w, a, lda, rows, n0, n1, out);
  } else {
    onednn_gemm_tile(w, a, lda, rows, n0, n1, out);
  }
}

void gemm_rows(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, const GemmOut& out,
               int64_t block_rows) {
  FLUXCPP_CHECK_ARG(rows >= 0, "gemm: negative rows {}", rows);
  FLUXCPP_CHECK_ARG(block_rows >= 0, "gemm: negative block_rows {}", block_rows);
  if (block_rows == 0 || block_rows > rows) block_rows = rows;
  if (rows == 0) {
    gemm_tile(w, a, lda, 0, 0, w.n(), out);  // validates arguments, computes nothing
    return;
  }
  const size_t a_elem = dtype_size(w.input_dtype());
  const size_t c_elem = dtype_size(out.dtype);
  for (int64_t r = 0; r < rows; r += block_rows) {
    const int64_t nr = std::min(block_rows, rows - r);
    GemmOut block = out;
    block.c = static_cast<char*>(out.c) + static_cast<size_t>(r * out.ldc) * c_elem;
    const void* a_block = a == nullptr
                              ? nullptr
                              : static_cast<const char*>(a) + static_cast<size_t>(r * lda) * a_elem;
    gemm_tile(w, a_block, lda, nr, 0, w.n(), block);
  }
}

}  // namespace fluxcpp::kernels
