// Unit tests of the GEMM driver (kernels/gemm.hpp) against naive reference loops: both engines
// and packed weights over a sweep of shapes, tiles and leading dimensions, scale, bias and
// accumulate, argument checks, concurrent callers, the caller's OpenMP and BLAS settings, and
// call-to-call reproducibility. Single process, no MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fluxcpp/error.hpp"
#include "fluxcpp/types.hpp"
#include "kernel_test_data.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_onednn.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "kernels/omp_threads.hpp"

namespace fluxcpp::kernels {
namespace {

using test::bits_of;
using test::Buffer;
using test::Rng;

struct GemmCase {
  DType in = DType::kFloat32;
  DType out = DType::kFloat32;
  int64_t rows = 1, n = 1, k = 1;
  int64_t n0 = 0, n1 = -1;  // n1 < 0: n
  bool transposed = false;
  bool bias = false;
  bool accumulate = false;
  int64_t lda_pad = 0, ldb_pad = 0, ldc_pad = 0;
  int64_t block_rows = -1;  // >= 0: run gemm_rows (whole width) instead of gemm_tile
  double scale = 1.0;       // GemmOut::scale: multiplies the product, not the bias
  GemmEngine engine = GemmEngine::kAuto;
  bool packed = false;  // through a PackedWeight (oneDNN's layout)
  uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream os;
    os << dtype_name(in) << "->" << dtype_name(out) << " rows=" << rows << " n=" << n << " k=" << k
       << " tile=[" << n0 << "," << (n1 < 0 ? n : n1) << ")" << (transposed ? " B[k,n]" : " B[n,k]")
       << (bias ? " +bias" : "") << (accumulate ? " accumulate" : "") << " pads(a,b,c)=" << lda_pad
       << "," << ldb_pad << "," << ldc_pad << " block_rows=" << block_rows << " scale=" << scale
       << " engine=" << gemm_engine_name(engine) << (packed ? " packed" : "");
    return os.str();
  }
};

// Per-element error bound: |fl(x) - x| <= c·(k+2)·u·Σ|terms| with slack c = 4 (so 2^-22 for
// f32, 2^-50 for f64); bf16 output adds the final rounding, 2^-8 relative.
double gemm_tolerance(DType in, DType out, int64_t k, double abs_sum, double ref) {
  const double u4 = in == DType::kFloat64 ? 0x1p-50 : 0x1p-22;
  double tol = u4 * static_cast<double>(k + 2) * abs_sum;
  if (out == DType::kBFloat16) tol = tol * (1 + 0x1p-8) + 0x1p-8 * std::fabs(ref);
  return tol;
}

::testing::AssertionResult run_gemm_case(const GemmCase& tc) {
  const int64_t n1 = tc.n1 < 0 ? tc.n : tc.n1;
  const int64_t cols = n1 - tc.n0;
  const int64_t lda = tc.k + tc.lda_pad;
  const int64_t ldb = (tc.transposed ? tc.n : tc.k) + tc.ldb_pad;
  const int64_t ldc = cols + tc.ldc_pad;
  Rng rng(tc.seed);

  Buffer a(tc.in, tc.rows * lda);
  a.fill_random(rng);
  Buffer b(tc.in, (tc.transposed ? tc.k : tc.n) * ldb);
  b.fill_random(rng);
  Buffer bias(tc.out, tc.n);
  bias.fill_random(rng);
  Buffer c(tc.out, tc.rows * ldc);
  // Non-accumulating calls must overwrite every element: start from NaN so a missed one shows.
  if (tc.accumulate) {
    c.fill_random(rng);
  } else {
    c.fill_nan();
  }
  // Padding columns hold a recognisable value and must come back untouched.
  for (int64_t i = 0; i < tc.rows; ++i) {
    for (int64_t j = cols; j < ldc; ++j) c.set(i * ldc + j, 12345.0);
  }
  const Buffer c0 = c;

  // The reference reads doubles laid out as a[i][p] and bt[j][p] so its inner loop is plain.
  std::vector<double> a_ref(tc.rows * tc.k), bt_ref(tc.n * tc.k);
  for (int64_t i = 0; i < tc.rows; ++i) {
    for (int64_t p = 0; p < tc.k; ++p) a_ref[i * tc.k + p] = a.get(i * lda + p);
  }
  for (int64_t j = 0; j < tc.n; ++j) {
    for (int64_t p = 0; p < tc.k; ++p) {
      bt_ref[j * tc.k + p] = tc.transposed ? b.get(p * ldb + j) : b.get(j * ldb + p);
    }
  }

  GemmWeight w;
  std::unique_ptr<PackedWeight> packed;
  if (tc.packed) {
    packed = std::make_unique<PackedWeight>(tc.in, b.data(), tc.n, tc.k, tc.transposed,
                                            tc.ldb_pad == 0 ? 0 : ldb);
    w.prepare(*packed);
  } else {
    w.prepare(tc.in, b.data(), tc.n, tc.k, tc.transposed, tc.ldb_pad == 0 ? 0 : ldb, tc.engine);
  }
  GemmOut out;
  out.c = c.data();
  out.ldc = ldc;
  out.dtype = tc.out;
  out.bias = tc.bias ? bias.data() : nullptr;
  out.accumulate = tc.accumulate;
  out.scale = tc.scale;
  if (tc.block_rows >= 0) {
    gemm_rows(w, a.data(), lda, tc.rows, out, tc.block_rows);
  } else {
    gemm_tile(w, a.data(), lda, tc.rows, tc.n0, n1, out);
  }

  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < tc.rows; ++i) {
    for (int64_t jj = 0; jj < ldc; ++jj) {
      const int64_t idx = i * ldc + jj;
      if (jj >= cols) {
        if (!c.same_bits(c0, idx) && bad++ == 0) {
          first << "padding C(" << i << "," << jj << ") [index " << idx
                << "] overwritten: expected " << c0.get(idx) << " got " << c.get(idx);
        }
        continue;
      }
      const int64_t j = tc.n0 + jj;
      // Four partial sums: in double the order is irrelevant at these tolerances, and it keeps
      // the reference from dominating the test time.
      const double* ar = a_ref.data() + i * tc.k;
      const double* br = bt_ref.data() + j * tc.k;
      double part[4] = {0, 0, 0, 0}, abs_part[4] = {0, 0, 0, 0};
      for (int64_t p = 0; p < tc.k; ++p) {
        const double t = ar[p] * br[p];
        part[p % 4] += t;
        abs_part[p % 4] += std::fabs(t);
      }
      double ref = tc.scale * ((part[0] + part[1]) + (part[2] + part[3]));
      double abs_sum =
          std::fabs(tc.scale) * ((abs_part[0] + abs_part[1]) + (abs_part[2] + abs_part[3]));
      if (tc.bias) {
        ref += bias.get(j);
        abs_sum += std::fabs(bias.get(j));
      }
      if (tc.accumulate) {
        ref += c0.get(idx);
        abs_sum += std::fabs(c0.get(idx));
      }
      const double got = c.get(idx);
      const double tol = gemm_tolerance(tc.in, tc.out, tc.k, abs_sum, ref);
      if (!(std::fabs(got - ref) <= tol) && bad++ == 0) {
        first.precision(17);
        first << "C(" << i << "," << j << ") [index " << idx << "]: expected " << ref << " got "
              << got << " (tolerance " << tol << ")";
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << tc.describe() << ": " << bad << " mismatches; first: " << first.str();
}

struct SweepConfig {
  DType in, out;
  bool transposed, bias, accumulate;
  GemmEngine engine = GemmEngine::kAuto;
  bool packed = false;
};

std::string sweep_name(const ::testing::TestParamInfo<SweepConfig>& info) {
  const SweepConfig& s = info.param;
  std::string name = std::string(dtype_name(s.in)) + "_" + dtype_name(s.out);
  name += s.transposed ? "_BT" : "_BN";
  if (s.bias) name += "_bias";
  if (s.accumulate) name += "_acc";
  if (s.engine == GemmEngine::kOpenBlas) name += "_openblas";
  if (s.packed) name += "_packed";
  return name;
}

std::vector<SweepConfig> sweep_configs() {
  const std::pair<DType, DType> pairs[] = {{DType::kFloat32, DType::kFloat32},
                                           {DType::kFloat64, DType::kFloat64},
                                           {DType::kBFloat16, DType::kBFloat16},
                                           {DType::kBFloat16, DType::kFloat32}};
  std::vector<SweepConfig> v;
  for (const auto& [in, out] : pairs) {
    for (bool transposed : {false, true}) {
      for (bool bias : {false, true}) {
        for (bool acc : {false, true}) {
          if (acc && out == DType::kBFloat16) continue;
          v.push_back({in, out, transposed, bias, acc});
          if (in == DType::kFloat64) continue;  // OpenBLAS only
          v.push_back({in, out, transposed, bias, acc, GemmEngine::kOpenBlas});
          v.push_back({in, out, transposed, bias, acc, GemmEngine::kOneDnn, /*packed=*/true});
        }
      }
    }
  }
  return v;
}

// A rows x n x k case of configuration s (dtypes, weight layout, bias, accumulate, engine).
GemmCase sweep_case(const SweepConfig& s, int64_t rows, int64_t n, int64_t k) {
  GemmCase tc;
  tc.in = s.in;
  tc.out = s.out;
  tc.transposed = s.transposed;
  tc.bias = s.bias;
  tc.accumulate = s.accumulate;
  tc.engine = s.engine;
  tc.packed = s.packed;
  tc.rows = rows;
  tc.n = n;
  tc.k = k;
  return tc;
}

class GemmSweep : public ::testing::TestWithParam<SweepConfig> {};

// Every (rows, n, k) in {1,3,17,127}^3: full width through gemm_rows with an odd block, and an
// interior tile with n0 > 0 and padded leading dimensions through gemm_tile.
TEST_P(GemmSweep, SmallShapes) {
  const SweepConfig& s = GetParam();
  const int64_t sizes[] = {1, 3, 17, 127};
  uint64_t seed = 100;
  for (int64_t rows : sizes) {
    for (int64_t n : sizes) {
      for (int64_t k : sizes) {
        GemmCase tc = sweep_case(s, rows, n, k);
        tc.seed = ++seed;
        tc.block_rows = 5;
        EXPECT_TRUE(run_gemm_case(tc));

        if (n < 3) continue;
        tc.block_rows = -1;
        tc.n0 = n / 3;
        tc.n1 = n - n / 4;
        tc.lda_pad = 3;
        tc.ldb_pad = 2;
        tc.ldc_pad = 5;
        tc.seed = ++seed;
        EXPECT_TRUE(run_gemm_case(tc));

        // A scale that is not a power of two, on the same padded tile.
        tc.scale = -0.7;
        tc.seed = ++seed;
        EXPECT_TRUE(run_gemm_case(tc));
        tc.scale = 1.0;
      }
    }
  }
}

// One shape large enough for OpenBLAS's blocked paths (K > its k-block, several M blocks).
TEST_P(GemmSweep, LargeShape) {
  const SweepConfig& s = GetParam();
  GemmCase tc = sweep_case(s, 256, 300, 1000);
  tc.lda_pad = 8;
  tc.ldc_pad = 4;
  tc.block_rows = 100;  // not a divisor of rows
  EXPECT_TRUE(run_gemm_case(tc));

  tc.block_rows = -1;
  tc.n0 = 37;
  tc.n1 = 251;
  tc.ldb_pad = 16;
  tc.seed = 7;
  EXPECT_TRUE(run_gemm_case(tc));

  tc.scale = 1.3;
  tc.seed = 8;
  EXPECT_TRUE(run_gemm_case(tc));

  // Column tiles starting on 64 (a packed weight packs them anew, as the slabs of workers).
  tc.scale = 1.0;
  tc.n0 = 64;
  tc.n1 = 192;
  tc.seed = 9;
  EXPECT_TRUE(run_gemm_case(tc));
  tc.n1 = 300;  // to the end: the layout's padded last block
  tc.seed = 10;
  EXPECT_TRUE(run_gemm_case(tc));
}

// A power-of-two scale on exactly representable products is exact: bitwise equal to the
// unscaled result times the scale (bias added unscaled).
TEST(Gemm, ScaleIsExactForPowersOfTwo) {
  const int64_t rows = 5, n = 7, k = 9;
  std::vector<float> a(rows * k), b(n * k), bias(n), c1(rows * n), c2(rows * n);
  for (int64_t i = 0; i < rows * k; ++i) a[i] = static_cast<float>(i % 7 - 3) / 8.0f;
  for (int64_t i = 0; i < n * k; ++i) b[i] = static_cast<float>(i % 5 - 2) / 4.0f;
  for (int64_t j = 0; j < n; ++j) bias[j] = static_cast<float>(j) - 3.0f;
  GemmWeight w;
  w.prepare(DType::kFloat32, b.data(), n, k, false);
  GemmOut out;
  out.c = c1.data();
  out.ldc = n;
  gemm_tile(w, a.data(), k, rows, 0, n, out);
  out.c = c2.data();
  out.scale = 0.25;
  out.bias = bias.data();
  gemm_tile(w, a.data(), k, rows, 0, n, out);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j)
      EXPECT_EQ(bits_of(c2[i * n + j]), bits_of(0.25f * c1[i * n + j] + bias[j]))
          << "C(" << i << "," << j << ")";
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmSweep, ::testing::ValuesIn(sweep_configs()), sweep_name);

// k == 0: the product is empty, so C = bias (or 0), or C += bias when accumulating.
TEST(Gemm, EmptyK) {
  for (const SweepConfig& s : sweep_configs()) {
    GemmCase tc = sweep_case(s, 4, 6, 0);
    // Through the default engine, unpacked (a packed weight refuses k = 0).
    tc.engine = GemmEngine::kAuto;
    tc.packed = false;
    tc.n0 = 1;
    tc.n1 = 5;
    tc.ldc_pad = 2;
    EXPECT_TRUE(run_gemm_case(tc));
  }
}

TEST(Gemm, EmptyTileIsNoOp) {
  std::vector<float> b(6 * 4, 1.0f), a(3 * 4, 1.0f), c(3 * 6, -7.0f);
  GemmWeight w;
  w.prepare(DType::kFloat32, b.data(), 6, 4, false);
  GemmOut out;
  out.c = c.data();
  out.ldc = 6;
  gemm_tile(w, a.data(), 4, 0, 0, 6, out);
  gemm_tile(w, a.data(), 4, 3, 2, 2, out);
  gemm_rows(w, a.data(), 4, 0, out, 2);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], -7.0f) << "index " << i;
}

TEST(Gemm, WeightPrepare) {
  std::vector<uint16_t> b16(5 * 9);
  for (size_t i = 0; i < b16.size(); ++i) b16[i] = f32_to_bf16(0.25f * float(i) - 3.0f);
  GemmWeight w;
  // bf16 [n=5, k=7] stored with ld 9: oneDNN reads it in place.
  w.prepare(DType::kBFloat16, b16.data(), 5, 7, false, 9);
  EXPECT_EQ(w.input_dtype(), DType::kBFloat16);
  EXPECT_EQ(w.engine(), GemmEngine::kOneDnn);
  EXPECT_EQ(w.data(), b16.data());
  EXPECT_EQ(w.ld(), 9);
  // The OpenBLAS engine widens it to a contiguous f32 copy.
  w.prepare(DType::kBFloat16, b16.data(), 5, 7, false, 9, GemmEngine::kOpenBlas);
  EXPECT_EQ(w.engine(), GemmEngine::kOpenBlas);
  const float* f = w.widened();
  for (int r = 0; r < 5; ++r) {
    for (int p = 0; p < 7; ++p) {
      ASSERT_EQ(f[r * 7 + p], bf16_to_f32(b16[r * 9 + p])) << "row " << r << " col " << p;
    }
  }
  // f32 is viewed in place.
  std::vector<float> b32(5 * 9);
  w.prepare(DType::kFloat32, b32.data(), 9, 5, true);
  EXPECT_EQ(w.data(), b32.data());
  EXPECT_EQ(w.ld(), 9);
  EXPECT_TRUE(w.transposed());
  std::vector<double> b64(4);
  w.prepare(DType::kFloat64, b64.data(), 2, 2, false);
  EXPECT_EQ(w.engine(), GemmEngine::kOpenBlas);
  EXPECT_EQ(w.data(), b64.data());
}

void expect_invalid(const std::function<void()>& fn, const char* what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << what << ": " << e.what();
  }
}

// One gemm_tile on a 2 x 2 x 2 problem, weight [n, k] of dtype `in`, output of dtype `out`; lda
// and the tile's end n1 as given.
void tiny_gemm(DType in, DType out, bool accumulate, int64_t lda = 2, int64_t n1 = 2) {
  Buffer b(in, 4), a(in, 4), c(out, 4);
  GemmWeight w;
  w.prepare(in, b.data(), 2, 2, false);
  const GemmOut o{c.data(), 2, out, nullptr, accumulate};
  gemm_tile(w, a.data(), lda, 2, 0, n1, o);
}

TEST(Gemm, RejectsBadArguments) {
  // Each call builds its own small problem; only the noted argument is wrong.
  constexpr DType f32 = DType::kFloat32, f64 = DType::kFloat64, bf16 = DType::kBFloat16;
  expect_invalid([] { tiny_gemm(bf16, bf16, /*accumulate=*/true); }, "bf16 output with accumulate");
  expect_invalid([] { tiny_gemm(f32, f64, false); }, "f32 -> f64");
  expect_invalid([] { tiny_gemm(f32, bf16, false); }, "f32 -> bf16");
  expect_invalid([] { tiny_gemm(f64, f32, false); }, "f64 -> f32");
  expect_invalid([] { tiny_gemm(bf16, f64, false); }, "bf16 -> f64");
  expect_invalid([] { tiny_gemm(f32, f32, false, 2, /*n1=*/3); }, "n1 > n");
  expect_invalid([] { tiny_gemm(f32, f32, false, /*lda=*/1); }, "lda < k");
  std::vector<float> b32(4);
  std::vector<double> b64(4);
  expect_invalid([&] { GemmWeight().prepare(f32, b32.data(), 2, 2, false, 1); }, "ld < k");
  expect_invalid([&] { GemmWeight().prepare(static_cast<DType>(7), b32.data(), 2, 2, false); },
                 "bad dtype");
  expect_invalid(
      [&] { GemmWeight().prepare(f64, b64.data(), 2, 2, false, 0, GemmEngine::kOneDnn); },
      "f64 on oneDNN");
  expect_invalid([&] { PackedWeight p(f64, b64.data(), 2, 2, false); }, "packed f64");
  expect_invalid([&] { PackedWeight p(f32, b32.data(), 2, 0, false); }, "packed k = 0");
}

// Workers share one prepared weight and call gemm_tile concurrently on disjoint row blocks; the
// bf16 path exercises the thread-local scratch.
TEST(Gemm, ConcurrentCallersShareWeight) {
  const int previous = blas_set_threads(1);
  const int64_t rows = 96, n = 70, k = 130;
  Rng rng(99);
  Buffer a(DType::kBFloat16, rows * k), b(DType::kBFloat16, n * k), bias(DType::kBFloat16, n);
  a.fill_random(rng);
  b.fill_random(rng);
  bias.fill_random(rng);
  Buffer c(DType::kBFloat16, rows * n);
  GemmWeight w;
  w.prepare(DType::kBFloat16, b.data(), n, k, false);
  std::vector<std::thread> threads;
  const int64_t per = rows / 4;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // Several calls of different sizes so the scratch grows while neighbours run.
      for (int64_t r = t * per; r < (t + 1) * per; r += 5) {
        const int64_t nr = std::min<int64_t>(5 + t, (t + 1) * per - r);
        GemmOut out{static_cast<uint16_t*>(c.data()) + r * n, n, DType::kBFloat16, bias.data(),
                    false};
        gemm_tile(w, static_cast<const uint16_t*>(a.data()) + r * k, k, nr, 0, n, out);
      }
    });
  }
  for (auto& th : threads) th.join();
  blas_set_threads(previous);

  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = bias.get(j), abs_sum = std::fabs(bias.get(j));
      for (int64_t p = 0; p < k; ++p) {
        ref += a.get(i * k + p) * b.get(j * k + p);
        abs_sum += std::fabs(a.get(i * k + p) * b.get(j * k + p));
      }
      const double tol = gemm_tolerance(DType::kBFloat16, DType::kBFloat16, k, abs_sum, ref);
      ASSERT_LE(std::fabs(c.get(i * n + j) - ref), tol)
          << "C(" << i << "," << j << "): expected " << ref << " got " << c.get(i * n + j);
    }
  }
}

// The engine runs on one OpenMP thread and gives the caller's setting back: a PyTorch process
// that set torch.set_num_threads(3) sees 3 afterwards, on this thread and on others.
TEST(Gemm, LeavesTheCallersOpenMpSettingAlone) {
  const int before = omp_max_threads();
  std::vector<float> a(64 * 96, 0.5f), b(80 * 96, 0.25f), c(64 * 80);
  std::vector<uint16_t> a16(64 * 96, f32_to_bf16(0.5f)), b16(80 * 96, f32_to_bf16(0.25f));
  for (int threads : {3, 1, 5}) {
    OmpThreadsScope caller(threads);  // what the caller set
    GemmWeight w;
    w.prepare(DType::kFloat32, b.data(), 80, 96, false);
    gemm_rows(w, a.data(), 96, 64, GemmOut{c.data(), 80, DType::kFloat32, nullptr, false});
    EXPECT_EQ(omp_max_threads(), threads) << "after an f32 GEMM";
    w.prepare(DType::kBFloat16, b16.data(), 80, 96, false);
    gemm_rows(w, a16.data(), 96, 64, GemmOut{c.data(), 80, DType::kFloat32, nullptr, false});
    EXPECT_EQ(omp_max_threads(), threads) << "after a bf16 GEMM";
    PackedWeight packed(DType::kFloat32, b.data(), 80, 96, false);
    w.prepare(packed);
    gemm_rows(w, a.data(), 96, 64, GemmOut{c.data(), 80, DType::kFloat32, nullptr, false});
    EXPECT_EQ(omp_max_threads(), threads) << "after packing and a packed GEMM";
    for (float v : c) ASSERT_EQ(v, 96 * 0.125f);
  }
  EXPECT_EQ(omp_max_threads(), before);
}

// The same call gives the same bits every time (the ops' call-to-call guarantees rest on it),
// and a primitive is made once per thread and shape, not per call.
TEST(Gemm, RepeatedCallsAreBitwiseEqualAndCached) {
  const int64_t rows = 48, n = 200, k = 333;
  Rng rng(5);
  for (DType in : {DType::kFloat32, DType::kBFloat16}) {
    Buffer a(in, rows * k), b(in, n * k), c1(in, rows * n), c2(in, rows * n);
    a.fill_random(rng);
    b.fill_random(rng);
    GemmWeight w;
    w.prepare(in, b.data(), n, k, false);
    const GemmOut o1{c1.data(), n, in, nullptr, false}, o2{c2.data(), n, in, nullptr, false};
    gemm_tile(w, a.data(), k, rows, 0, n, o1);
    const std::size_t cached = onednn_cached_primitives();
    for (int rep = 0; rep < 5; ++rep) {
      gemm_tile(w, a.data(), k, rows, 0, n, o2);
      for (int64_t i = 0; i < rows * n; ++i) ASSERT_TRUE(c1.same_bits(c2, i)) << "index " << i;
    }
    EXPECT_EQ(onednn_cached_primitives(), cached) << dtype_name(in);
  }
}

// A packed weight is a snapshot: writes to the source after packing are not seen until update().
TEST(Gemm, PackedWeightIsASnapshotUntilUpdated) {
  const int64_t rows = 3, n = 130, k = 40;
  std::vector<float> a(rows * k, 1.0f), b(n * k, 0.5f), c(rows * n);
  PackedWeight packed(DType::kFloat32, b.data(), n, k, false);
  EXPECT_GE(packed.bytes(), static_cast<std::size_t>(n * k * 4));
  GemmWeight w;
  w.prepare(packed);
  const GemmOut out{c.data(), n, DType::kFloat32, nullptr, false};
  std::fill(b.begin(), b.end(), 2.0f);
  gemm_rows(w, a.data(), k, rows, out);
  for (float v : c) ASSERT_EQ(v, 0.5f * k);
  packed.update(b.data());
  gemm_rows(w, a.data(), k, rows, out);
  for (float v : c) ASSERT_EQ(v, 2.0f * k);
}

}  // namespace
}  // namespace fluxcpp::kernels
