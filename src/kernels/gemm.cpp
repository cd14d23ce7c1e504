#include "kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "error_util.hpp"
#include "fluxcpp/error.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::kernels {
namespace {

[[noreturn]] void invalid(const std::string& msg) {
  throw Error(Errc::kInvalidArgument, msg);
}

// Per-thread scratch for widened bf16 A rows and for the f32 result of a bf16-output tile.
// Grown on demand and never shrunk, so a tile loop allocates only on its first call.
thread_local std::vector<float> t_a_scratch;
thread_local std::vector<float> t_c_scratch;

float* scratch(std::vector<float>& buf, int64_t count) {
  if (static_cast<int64_t>(buf.size()) < count)
    resize_or_raise(buf, static_cast<size_t>(count), "gemm", "the f32 scratch of a bf16 tile");
  return buf.data();
}

void check_blas_dim(int64_t v, const char* what) {
  if (v > std::numeric_limits<blasint>::max()) {
    invalid(std::string("gemm: ") + what + " = " + std::to_string(v) +
            " exceeds the BLAS integer range");
  }
}

void blas_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void blas_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// Writes bias[0:cols] (or zeros) into every row of c.
template <class T>
void seed_rows(T* c, int64_t ldc, int64_t rows, int64_t cols, const T* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = c + r * ldc;
    if (bias != nullptr) {
      std::copy(bias, bias + cols, row);
    } else {
      std::fill(row, row + cols, T(0));
    }
  }
}

template <class T>
void add_rows(T* c, int64_t ldc, int64_t rows, int64_t cols, const T* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
  }
}

// c[0:rows, 0:cols] (=|+=) scale · a · op(B)[:, n0:n0+cols] + bias, everything already in T.
// `bias` is offset to column n0. Bias goes in before the product: seeding C and running BLAS
// with beta = 1 costs the same as the zeroing pass BLAS does itself for beta = 0, whereas adding
// the bias afterwards would be an extra pass over C.
template <class T>
void tile_compute(const GemmWeight& w, const T* a, int64_t lda, int64_t rows, int64_t n0,
                  int64_t cols, T* c, int64_t ldc, const T* bias, bool accumulate, T scale) {
  const int64_t k = w.k();
  if (accumulate) {
    if (bias != nullptr) add_rows(c, ldc, rows, cols, bias);
  } else if (bias != nullptr || k == 0) {
    seed_rows(c, ldc, rows, cols, bias);
  }
  if (k == 0) return;
  const T beta = (accumulate || bias != nullptr) ? T(1) : T(0);
  const T* b = static_cast<const T*>(w.data());
  // Not transposed: B is [n, k], columns n0.. of op(B) are rows n0.. of B.
  const T* b_tile = w.transposed() ? b + n0 : b + n0 * w.ld();
  blas_gemm(!w.transposed(), rows, cols, k, scale, a, lda, b_tile, w.ld(), beta, c, ldc);
}

bool dtype_pair_ok(DType in, DType out) {
  switch (in) {
    case DType::kFloat32: return out == DType::kFloat32;
    case DType::kFloat64: return out == DType::kFloat64;
    case DType::kBFloat16: return out == DType::kBFloat16 || out == DType::kFloat32;
  }
  return false;
}

}  // namespace

void GemmWeight::prepare(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
                         int64_t ld) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && dtype != DType::kBFloat16) {
    invalid("GemmWeight::prepare: unsupported dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (n < 0 || k < 0) {
    invalid("GemmWeight::prepare: negative shape n=" + std::to_string(n) +
            " k=" + std::to_string(k));
  }
  // Rows of the stored matrix have `width` elements: [n, k] or, transposed, [k, n].
  const int64_t width = transposed ? n : k;
  const int64_t height = transposed ? k : n;
  if (ld == 0) ld = width;
  if (ld < width) {
    invalid("GemmWeight::prepare: ld=" + std::to_string(ld) + " < row width " +
            std::to_string(width));
  }
  if (weight == nullptr && n > 0 && k > 0) invalid("GemmWeight::prepare: weight is null");
  check_blas_dim(n, "n");
  check_blas_dim(k, "k");
  check_blas_dim(ld, "ld");

  input_dtype_ = dtype;
  n_ = n;
  k_ = k;
  transposed_ = transposed;
  if (dtype != DType::kBFloat16) {
    data_ = weight;
    ld_ = ld;
    return;
  }
  // Converted once per forward; every tile then runs plain sgemm on it.
  resize_or_raise(converted_, static_cast<size_t>(height * width), "gemm",
                  "the f32 copy of the bf16 weight");
  const auto* src = static_cast<const uint16_t*>(weight);
  if (width > 0) {  // an empty matrix may come with a null pointer
    for (int64_t r = 0; r < height; ++r) {
      bf16_to_f32(src + r * ld, converted_.data() + r * width, width);
    }
  }
  data_ = converted_.data();
  ld_ = width;
}

void gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
               int64_t n1, const GemmOut& out) {
  const DType in = w.input_dtype();
  if (!dtype_pair_ok(in, out.dtype)) {
    invalid(std::string("gemm: unsupported dtype pair ") + dtype_name(in) + " -> " +
            dtype_name(out.dtype));
  }
  if (out.accumulate && out.dtype == DType::kBFloat16) {
    invalid("gemm: accumulate is not supported for bf16 output");
  }
  if (rows < 0 || n0 < 0 || n1 < n0 || n1 > w.n()) {
    invalid("gemm: bad tile rows=" + std::to_string(rows) + " columns [" + std::to_string(n0) +
            ", " + std::to_string(n1) + ") of n=" + std::to_string(w.n()));
  }
  if (rows == 0 || n0 == n1) return;
  const int64_t k = w.k();
  const int64_t cols = n1 - n0;
  if (lda < k) invalid("gemm: lda=" + std::to_string(lda) + " < k=" + std::to_string(k));
  if (out.ldc < cols) {
    invalid("gemm: ldc=" + std::to_string(out.ldc) + " < tile width " + std::to_string(cols));
  }
  if (out.c == nullptr) invalid("gemm: output is null");
  if (a == nullptr && k > 0) invalid("gemm: A is null");
  check_blas_dim(rows, "rows");
  check_blas_dim(lda, "lda");
  check_blas_dim(out.ldc, "ldc");

  if (in == DType::kFloat64) {
    const auto* bias = static_cast<const double*>(out.bias);
    tile_compute(w, static_cast<const double*>(a), lda, rows, n0, cols, static_cast<double*>(out.c),
                 out.ldc, bias ? bias + n0 : nullptr, out.accumulate, out.scale);
    return;
  }

  // An f32 scale for f32 accumulation (exact for the f32 scales of the ops).
  const auto scale32 = static_cast<float>(out.scale);
  const float* a32 = static_cast<const float*>(a);
  int64_t lda32 = lda;
  if (in == DType::kBFloat16 && k > 0) {
    float* wide = scratch(t_a_scratch, rows * k);
    const auto* a16 = static_cast<const uint16_t*>(a);
    for (int64_t r = 0; r < rows; ++r) bf16_to_f32(a16 + r * lda, wide + r * k, k);
    a32 = wide;
    lda32 = k;
  }

  if (out.dtype == DType::kFloat32) {
    const auto* bias = static_cast<const float*>(out.bias);
    tile_compute(w, a32, lda32, rows, n0, cols, static_cast<float*>(out.c), out.ldc,
                 bias ? bias + n0 : nullptr, out.accumulate, scale32);
    return;
  }

  // bf16 output: f32 result in scratch (bias widened into it first), rounded once into C.
  float* c32 = scratch(t_c_scratch, rows * cols);
  const auto* bias16 = static_cast<const uint16_t*>(out.bias);
  if (bias16 != nullptr) {
    for (int64_t r = 0; r < rows; ++r) bf16_to_f32(bias16 + n0, c32 + r * cols, cols);
  }
  // A widened bias is already the seed, so the product is accumulated onto it.
  tile_compute(w, a32, lda32, rows, n0, cols, c32, cols, static_cast<const float*>(nullptr),
               /*accumulate=*/bias16 != nullptr, scale32);
  auto* c16 = static_cast<uint16_t*>(out.c);
  for (int64_t r = 0; r < rows; ++r) f32_to_bf16(c32 + r * cols, c16 + r * out.ldc, cols);
}

void gemm_rows(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, const GemmOut& out,
               int64_t block_rows) {
  if (rows < 0) invalid("gemm: negative rows " + std::to_string(rows));
  if (block_rows < 0) invalid("gemm: negative block_rows " + std::to_string(block_rows));
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
