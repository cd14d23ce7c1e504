// The per-group reference of the grouped-GEMM tests (tests/ops/grouped_gemm_test.cpp): split
// patterns, exact and random data, per-group plain loops in double with a tolerance, the result
// rounded once, and one checked forward.
//
// Header-only; builds on test_data.hpp and gemm_reference.hpp (Problem, gemm_tolerance).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {

enum class SplitKind { kBalanced, kSkewed, kEmptyGroups, kOneGroup, kNone };

inline const char* split_kind_name(SplitKind s) {
  switch (s) {
    case SplitKind::kBalanced: return "balanced";
    case SplitKind::kSkewed: return "skewed";
    case SplitKind::kEmptyGroups: return "empty_groups";
    case SplitKind::kOneGroup: return "one_group";
    case SplitKind::kNone: return "m0";
  }
  return "?";
}

// About `rows` rows over G groups. skewed: the middle group takes half of them; empty groups:
// the first, the last and every third group get none; one group: the last group takes all.
inline std::vector<int64_t> make_splits(SplitKind kind, int64_t G, int64_t rows, uint64_t seed) {
  std::vector<int64_t> s(static_cast<std::size_t>(G), 0);
  uint64_t x = seed;
  switch (kind) {
    case SplitKind::kBalanced:
      for (int64_t g = 0; g < G; ++g) s[g] = rows / G + static_cast<int64_t>(splitmix(x) % 3);
      break;
    case SplitKind::kSkewed:
      for (int64_t g = 0; g < G; ++g) s[g] = static_cast<int64_t>(splitmix(x) % (rows / G + 1));
      s[G / 2] = rows / 2;
      break;
    case SplitKind::kEmptyGroups:
      for (int64_t g = 0; g < G; ++g)
        s[g] =
            (g == 0 || g == G - 1 || g % 3 == 0) ? 0 : 1 + static_cast<int64_t>(splitmix(x) % 40);
      break;
    case SplitKind::kOneGroup: s[G - 1] = rows; break;
    case SplitKind::kNone: break;
  }
  return s;
}

inline int64_t total_rows(const std::vector<int64_t>& s) {
  int64_t m = 0;
  for (int64_t v : s) m += v;
  return m;
}

// Multiples of 1/8 in [-1, 1]: exact in bf16, and every sum of products below is exact in f32.
inline Bytes exact_tensor(DType t, std::size_t count, uint64_t seed) {
  Bytes b(count * dtype_size(t));
  uint64_t x = seed;
  for (std::size_t i = 0; i < count; ++i) {
    const double v = static_cast<double>(static_cast<int64_t>(splitmix(x) % 17) - 8) / 8.0;
    switch (t) {
      case DType::kFloat32: {
        const auto f = static_cast<float>(v);
        std::memcpy(b.data() + 4 * i, &f, 4);
        break;
      }
      case DType::kFloat64: std::memcpy(b.data() + 8 * i, &v, 8); break;
      case DType::kBFloat16: {
        const uint16_t h = float_to_bf16(static_cast<float>(v));
        std::memcpy(b.data() + 2 * i, &h, 2);
        break;
      }
    }
  }
  return b;
}

// The tensors of one forward. scale empty: NULL.
struct GroupedData {
  std::vector<int64_t> splits;
  Bytes input, weight;
  std::vector<float> scale;
};

// Per-group plain loops in double: value = s_g · Σ_c a[i][c]·W_g[j][c] and a tolerance from
// gemm_tolerance with magnitude |s_g|·Σ|a||w| (exact data needs none: it is compared bitwise).
inline Reference grouped_reference(const Problem& p, const GroupedData& d) {
  const int64_t n = p.n, k = p.k, m = total_rows(d.splits);
  Reference ref;
  ref.value.assign(static_cast<std::size_t>(m * n), 0.0);
  ref.tol.assign(ref.value.size(), 0.0);
  int64_t row = 0;
  for (std::size_t g = 0; g < d.splits.size(); ++g) {
    const double s = d.scale.empty() ? 1.0 : d.scale[g];
    const std::size_t w0 = g * static_cast<std::size_t>(n * k);
    for (int64_t i = row; i < row + d.splits[g]; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, mag = 0;
        for (int64_t c = 0; c < k; ++c) {
          const double a = load(d.input.data(), p.in, static_cast<std::size_t>(i * k + c));
          const std::size_t wi =
              w0 + static_cast<std::size_t>(p.transpose_weight ? c * n + j : j * k + c);
          const double w = load(d.weight.data(), p.in, wi);
          acc += a * w;
          mag += std::fabs(a * w);
        }
        const std::size_t idx = static_cast<std::size_t>(i * n + j);
        ref.value[idx] = s * acc;
        ref.tol[idx] = gemm_tolerance(p.in, p.out, k, std::fabs(s) * mag, s * acc);
      }
    row += d.splits[g];
  }
  return ref;
}

// The reference rounded once to the output dtype (exact data: the value is exact in f32).
inline Bytes rounded(const Reference& ref, DType out) {
  Bytes b(ref.value.size() * dtype_size(out));
  for (std::size_t i = 0; i < ref.value.size(); ++i) {
    const double v = ref.value[i];
    if (out == DType::kFloat64) {
      std::memcpy(b.data() + 8 * i, &v, 8);
    } else if (out == DType::kFloat32) {
      const auto f = static_cast<float>(v);
      std::memcpy(b.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = float_to_bf16(static_cast<float>(v));
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

inline GroupedGemmOptions grouped_options(const Problem& p, int64_t groups, int64_t max_m) {
  GroupedGemmOptions o = gemm_op_options<GroupedGemmOptions>(p, max_m);
  o.num_groups = groups;
  return o;
}

inline const float* scale_or_null(const GroupedData& d) {
  return d.scale.empty() ? nullptr : d.scale.data();
}

// One forward checked against the reference (bitwise for exact data), and that nothing is
// written beyond m rows.
inline void check_grouped_forward(GroupedGemm& op, const Problem& p, const GroupedData& d,
                                  bool exact, const std::string& what) {
  const int64_t m = total_rows(d.splits);
  const std::size_t count = static_cast<std::size_t>(m * p.n), esz = dtype_size(p.out);
  const Reference ref = grouped_reference(p, d);
  Bytes out = poisoned_output(p.out, count);
  try {
    op.forward(d.input.data(), d.splits.data(), d.weight.data(), scale_or_null(d), out.data());
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": threw: " << e.what();
    return;
  }
  if (exact)
    expect_same_bits(rounded(ref, p.out), out, p.out, p.n, what);
  else
    expect_close(ref, out, p.out, m, p.n, what);
  expect_untouched(out, count * esz, what);
}

inline GroupedData make_grouped_data(const Problem& p, SplitKind kind, int64_t groups, bool exact,
                                     int scale_kind, uint64_t seed) {
  GroupedData d;
  d.splits = make_splits(kind, groups, 150, seed);
  const int64_t m = total_rows(d.splits);
  const auto in_count = static_cast<std::size_t>(m * p.k);
  const auto w_count = static_cast<std::size_t>(groups * p.n * p.k);
  d.input =
      exact ? exact_tensor(p.in, in_count, seed + 1) : random_tensor(p.in, in_count, seed + 1);
  d.weight = exact ? exact_tensor(p.in, w_count, seed + 2) : random_tensor(p.in, w_count, seed + 2);
  // scale_kind 0: NULL; 1: powers of two (exact); 2: arbitrary values in [0.5, 2).
  uint64_t x = seed + 3;
  for (int64_t g = 0; scale_kind != 0 && g < groups; ++g) {
    const uint64_t r = splitmix(x);
    d.scale.push_back(scale_kind == 1 ? std::ldexp(1.0f, static_cast<int>(r % 5) - 2)
                                      : 0.5f + static_cast<float>(r % 1000) / 666.0f);
  }
  return d;
}

}  // namespace fluxcpp::test
