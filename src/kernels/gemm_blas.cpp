#include "kernels/gemm_blas.hpp"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "error_util.hpp"
#include "fluxcpp/error.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::kernels {
namespace {

// Per-thread scratch for widened bf16 A rows and for the f32 result of a bf16-output tile.
// Grown on demand and never shrunk, so a tile loop allocates only on its first call.
thread_local std::vector<float> t_a_scratch;
thread_local std::vector<float> t_c_scratch;

float* scratch(std::vector<float>& buf, int64_t count) {
  if (static_cast<int64_t>(buf.size()) < count)
    resize_or_raise(buf, static_cast<size_t>(count), "gemm", "the f32 scratch of a bf16 tile");
  return buf.data();
}

// C = alpha * A * op(B) + beta * C, row major, through cblas_sgemm or cblas_dgemm (`gemm`).
template <class T, class Gemm>
void blas_call(Gemm gemm, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
               int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  gemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
       static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
       static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void blas_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  blas_call(cblas_sgemm, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas_call(cblas_dgemm, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
// with beta = 1 costs the same as the zeroing pass BLAS does itself for beta = 0.
template <class T>
void tile_compute(const T* b, int64_t ldb, bool transposed, int64_t k, const T* a, int64_t lda,
                  int64_t rows, int64_t n0, int64_t cols, T* c, int64_t ldc, const T* bias,
                  bool accumulate, T scale) {
  if (accumulate) {
    if (bias != nullptr) add_rows(c, ldc, rows, cols, bias);
  } else if (bias != nullptr || k == 0) {
    seed_rows(c, ldc, rows, cols, bias);
  }
  if (k == 0) return;
  const T beta = (accumulate || bias != nullptr) ? T(1) : T(0);
  // Not transposed: B is [n, k], columns n0.. of op(B) are rows n0.. of B.
  const T* b_tile = transposed ? b + n0 : b + n0 * ldb;
  blas_gemm(!transposed, rows, cols, k, scale, a, lda, b_tile, ldb, beta, c, ldc);
}

}  // namespace

void blas_check_dims(int64_t rows, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  const int64_t dims[] = {rows, n, k, lda, ldb, ldc};
  const char* names[] = {"rows", "n", "k", "lda", "ld", "ldc"};
  for (int i = 0; i < 6; ++i) {
    FLUXCPP_CHECK_ARG(dims[i] <= std::numeric_limits<blasint>::max(),
                      "gemm: {} = {} exceeds the BLAS integer range", names[i], dims[i]);
  }
}

void blas_gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
                    int64_t n1, const GemmOut& out) {
  const DType in = w.input_dtype();
  const int64_t k = w.k();
  const int64_t cols = n1 - n0;
  blas_check_dims(rows, w.n(), k, lda, w.ld(), out.ldc);

  if (in == DType::kFloat64) {
    const auto* bias = static_cast<const double*>(out.bias);
    tile_compute(static_cast<const double*>(w.data()), w.ld(), w.transposed(), k,
                 static_cast<const double*>(a), lda, rows, n0, cols, static_cast<double*>(out.c),
                 out.ldc, bias ? bias + n0 : nullptr, out.accumulate, out.scale);
    return;
  }

  // An f32 scale for f32 accumulation (exact for the f32 scales of the ops).
  const auto scale32 = static_cast<float>(out.scale);
  const float* b32 = static_cast<const float*>(w.data());
  int64_t ldb = w.ld();
  const float* a32 = static_cast<const float*>(a);
  int64_t lda32 = lda;
  if (in == DType::kBFloat16) {
    b32 = w.widened();
    ldb = w.transposed() ? w.n() : k;
    if (k > 0) {
      float* wide = scratch(t_a_scratch, rows * k);
      const auto* a16 = static_cast<const uint16_t*>(a);
      for (int64_t r = 0; r < rows; ++r) bf16_to_f32(a16 + r * lda, wide + r * k, k);
      a32 = wide;
      lda32 = k;
    }
  }

  if (out.dtype == DType::kFloat32) {
    const auto* bias = static_cast<const float*>(out.bias);
    tile_compute(b32, ldb, w.transposed(), k, a32, lda32, rows, n0, cols,
                 static_cast<float*>(out.c), out.ldc, bias ? bias + n0 : nullptr, out.accumulate,
                 scale32);
    return;
  }

  // bf16 output: f32 result in scratch (bias widened into it first), rounded once into C.
  float* c32 = scratch(t_c_scratch, rows * cols);
  const auto* bias16 = static_cast<const uint16_t*>(out.bias);
  if (bias16 != nullptr) {
    for (int64_t r = 0; r < rows; ++r) bf16_to_f32(bias16 + n0, c32 + r * cols, cols);
  }
  // A widened bias is already the seed, so the product is accumulated onto it.
  tile_compute(b32, ldb, w.transposed(), k, a32, lda32, rows, n0, cols, c32, cols,
               static_cast<const float*>(nullptr), /*accumulate=*/bias16 != nullptr, scale32);
  auto* c16 = static_cast<uint16_t*>(out.c);
  for (int64_t r = 0; r < rows; ++r) f32_to_bf16(c32 + r * cols, c16 + r * out.ldc, cols);
}

}  // namespace fluxcpp::kernels
