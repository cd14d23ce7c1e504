// The unfused GEMM reference shared by the fused-GEMM op tests (tests/ops: ag_gemm, a2a_gemm,
// gemm_rs, ulysses): one plain cblas GEMM (+ bias) on one BLAS thread, with a per-element
// tolerance, and the problem description and test shapes those tests are parametrised over.
//
// Header-only; builds on test_data.hpp (Bytes, Reference, load, widen_*).
#pragma once

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {

// The reference GEMMs run on one BLAS thread (ranks are oversubscribed on the CI box); the
// previous setting is restored afterwards.
class OneBlasThread {
 public:
  OneBlasThread() : saved_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~OneBlasThread() { openblas_set_num_threads(saved_); }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int saved_;
};

// One GEMM of an op: input dtype, output dtype, n, k (for gemm_rs: this rank's slice of the
// reduction dimension) and the weight layout ([n, k], or [k, n] when transposed).
struct Problem {
  DType in = DType::kFloat32;
  DType out = DType::kFloat32;
  int64_t n = 0, k = 0;
  bool transpose_weight = false;
};

inline std::string describe(const Problem& p) {
  return std::string(dtype_name(p.in)) + "->" + dtype_name(p.out) + " n=" + std::to_string(p.n) +
         " k=" + std::to_string(p.k) + (p.transpose_weight ? " weight[k,n]" : " weight[n,k]");
}

// Tolerance of one output element: eps * (terms + 2) * magnitude + tiny, eps = 2^-20 for f32
// accumulation (f32 and bf16 inputs), 2^-48 for f64; terms is the length of the sum (k, or k*W
// summed over W ranks) and magnitude bounds Σ |a_il||b_jl| + |bias_j|. A bf16 output adds its
// one rounding: 2^-8 * (|value| + tol) (half an ulp, relative).
inline double gemm_tolerance(DType in, DType out, int64_t terms, double magnitude, double value) {
  const double eps = std::ldexp(1.0, in == DType::kFloat64 ? -48 : -20);
  const double tiny = std::ldexp(1.0, -100);
  double t = eps * static_cast<double>(terms + 2) * magnitude + tiny;
  if (out == DType::kBFloat16) t += std::ldexp(std::fabs(value) + t, -8);
  return t;
}

// a · op(weight), [m, n], in T (double: cblas_dgemm; float: cblas_sgemm) on one BLAS thread; a
// [m, k] and weight ([n, k], or [k, n] when p.transpose_weight) are widened from p.in to T.
template <typename T>
std::vector<T> blas_gemm(const Problem& p, int64_t m, const Bytes& a_in, const Bytes& weight) {
  const int64_t n = p.n, k = p.k;
  std::vector<T> a, w, c(static_cast<std::size_t>(m * n));
  if constexpr (std::is_same_v<T, double>)
    a = widen_f64(a_in, p.in, m * k), w = widen_f64(weight, p.in, n * k);
  else
    a = widen_f32(a_in, p.in, m * k), w = widen_f32(weight, p.in, n * k);
  const CBLAS_TRANSPOSE tb = p.transpose_weight ? CblasNoTrans : CblasTrans;
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  const auto ldb = static_cast<blasint>(p.transpose_weight ? n : k);
  OneBlasThread one;
  if constexpr (std::is_same_v<T, double>)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, 1.0, a.data(), K, w.data(), ldb, 0.0,
                c.data(), N);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, 1.0f, a.data(), K, w.data(), ldb, 0.0f,
                c.data(), N);
  return c;
}

// a: [m, k] in p.in; weight [n, k] or [k, n] (p.transpose_weight) in p.in; bias [n] in p.out or
// null: a · op(weight) + bias, in f64 for f64 inputs and f32 otherwise.
//
// Tolerance of element (i, j): gemm_tolerance with terms k and the magnitude S = Σ_l |a_il||b_jl|
// + |bias_j| bounded by Cauchy-Schwarz (‖a_i‖·‖b_j‖ + |bias_j|).
inline Reference reference(const Problem& p, int64_t m, const Bytes& a_in, const Bytes& weight,
                           const Bytes* bias) {
  const int64_t n = p.n, k = p.k;
  const std::size_t mn = static_cast<std::size_t>(m * n);
  Reference ref{std::vector<double>(mn, 0.0), std::vector<double>(mn, 0.0)};
  if (m == 0) return ref;
  std::vector<double> b(static_cast<std::size_t>(n), 0.0);
  if (bias != nullptr)
    for (int64_t j = 0; j < n; ++j) b[j] = load(bias->data(), p.out, j);
  if (p.in == DType::kFloat64) {
    const std::vector<double> c = blas_gemm<double>(p, m, a_in, weight);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) ref.value[i * n + j] = c[i * n + j] + b[j];
  } else {
    const std::vector<float> c = blas_gemm<float>(p, m, a_in, weight);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        ref.value[i * n + j] = static_cast<double>(c[i * n + j] + static_cast<float>(b[j]));
  }
  // Row norms of A and of B's logical rows (columns of op(B)).
  std::vector<double> na(static_cast<std::size_t>(m), 0.0), nb(static_cast<std::size_t>(n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    double s = 0;
    for (int64_t l = 0; l < k; ++l) {
      double x = load(a_in.data(), p.in, i * k + l);
      s += x * x;
    }
    na[i] = std::sqrt(s);
  }
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t l = 0; l < k; ++l) {
      double x = load(weight.data(), p.in, p.transpose_weight ? l * n + j : j * k + l);
      s += x * x;
    }
    nb[j] = std::sqrt(s);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const std::size_t idx = static_cast<std::size_t>(i * n + j);
      ref.tol[idx] = gemm_tolerance(p.in, p.out, k, na[i] * nb[j] * 1.0000001 + std::fabs(b[j]),
                                    ref.value[idx]);
    }
  return ref;
}

// The options of a fused GEMM op (AgGemmOptions, GemmRsOptions, A2aGemmOptions,
// GroupedGemmOptions) for problem p with room for max_m rows; the op's other options keep their
// defaults.
template <typename Options>
Options gemm_op_options(const Problem& p, int64_t max_m) {
  Options o;
  o.max_m = max_m;
  o.n = p.n;
  o.k = p.k;
  o.input_dtype = p.in;
  o.output_dtype = p.out;
  o.transpose_weight = p.transpose_weight;
  return o;
}

// ---- test shapes -----------------------------------------------------------------------------

// One parametrised correctness case: the dtype pair, the rows (per rank or per block, as the op
// counts them), n and k.
struct GemmShape {
  DType in, out;
  int64_t rows, n, k;
};

inline std::string shape_name(const GemmShape& s) {
  return std::string(dtype_name(s.in)) + "_" + dtype_name(s.out) + "_rows" +
         std::to_string(s.rows) + "_n" + std::to_string(s.n) + "_k" + std::to_string(s.k);
}

inline void PrintTo(const GemmShape& s, std::ostream* os) {
  *os << shape_name(s);
}

// The test name suffix of a GemmShape case (INSTANTIATE_TEST_SUITE_P's name generator).
inline std::string gemm_shape_test_name(const ::testing::TestParamInfo<GemmShape>& i) {
  return shape_name(i.param);
}

// The (input, output) dtype pairs the fused GEMM ops support.
inline const std::pair<DType, DType> kPairs[] = {{DType::kFloat32, DType::kFloat32},
                                                 {DType::kFloat64, DType::kFloat64},
                                                 {DType::kBFloat16, DType::kBFloat16},
                                                 {DType::kBFloat16, DType::kFloat32}};

// The test name suffix of a kPairs case, "<in>_<out>" (INSTANTIATE_TEST_SUITE_P's name generator).
inline std::string pair_test_name(const ::testing::TestParamInfo<std::pair<DType, DType>>& i) {
  return std::string(dtype_name(i.param.first)) + "_" + dtype_name(i.param.second);
}

// For every pair: rows in {0, 1, 3} x n in {1, 3, 127} x k in {1, 3, 127}, then one big shape.
inline std::vector<GemmShape> small_shapes(int64_t big_rows, int64_t big_n, int64_t big_k) {
  std::vector<GemmShape> v;
  for (auto [in, out] : kPairs) {
    for (int64_t rows : {0, 1, 3})
      for (int64_t n : {1, 3, 127})
        for (int64_t k : {1, 3, 127}) v.push_back({in, out, rows, n, k});
    v.push_back({in, out, big_rows, big_n, big_k});
  }
  return v;
}

}  // namespace fluxcpp::test
