// GroupedGemm (one GEMM per group of consecutive rows, local to the rank) against per-group plain
// loops in double. Exact data (multiples of 1/8, power-of-two scales: every f32 sum is exact) is
// compared bit for bit with the reference rounded once to the output dtype; random data within a
// tolerance scaled with k. Every rank runs its own local problems (run at W = 1 and 2).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "ops/grouped_gemm.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

struct Shape {
  int64_t groups, n, k;
};

enum class Splits { kBalanced, kSkewed, kEmptyGroups, kOneGroup, kNone };

const char* splits_name(Splits s) {
  switch (s) {
    case Splits::kBalanced: return "balanced";
    case Splits::kSkewed: return "skewed";
    case Splits::kEmptyGroups: return "empty_groups";
    case Splits::kOneGroup: return "one_group";
    case Splits::kNone: return "m0";
  }
  return "?";
}

// About `rows` rows over G groups. skewed: the middle group takes half of them; empty groups:
// the first, the last and every third group get none; one group: the last group takes all.
std::vector<int64_t> make_splits(Splits kind, int64_t G, int64_t rows, uint64_t seed) {
  std::vector<int64_t> s(static_cast<std::size_t>(G), 0);
  uint64_t x = seed;
  switch (kind) {
    case Splits::kBalanced:
      for (int64_t g = 0; g < G; ++g) s[g] = rows / G + static_cast<int64_t>(splitmix(x) % 3);
      break;
    case Splits::kSkewed:
      for (int64_t g = 0; g < G; ++g) s[g] = static_cast<int64_t>(splitmix(x) % (rows / G + 1));
      s[G / 2] = rows / 2;
      break;
    case Splits::kEmptyGroups:
      for (int64_t g = 0; g < G; ++g)
        s[g] =
            (g == 0 || g == G - 1 || g % 3 == 0) ? 0 : 1 + static_cast<int64_t>(splitmix(x) % 40);
      break;
    case Splits::kOneGroup: s[G - 1] = rows; break;
    case Splits::kNone: break;
  }
  return s;
}

int64_t total(const std::vector<int64_t>& s) {
  int64_t m = 0;
  for (int64_t v : s) m += v;
  return m;
}

// Multiples of 1/8 in [-1, 1]: exact in bf16, and every sum of products below is exact in f32.
Bytes exact_tensor(DType t, std::size_t count, uint64_t seed) {
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
struct Data {
  std::vector<int64_t> splits;
  Bytes input, weight;
  std::vector<float> scale;
};

// Per-group plain loops in double: value = s_g · Σ_c a[i][c]·W_g[j][c] and a tolerance from
// gemm_tolerance with magnitude |s_g|·Σ|a||w| (exact data needs none: it is compared bitwise).
Reference grouped_reference(const Problem& p, const Data& d) {
  const int64_t n = p.n, k = p.k, m = total(d.splits);
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
Bytes rounded(const Reference& ref, DType out) {
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

GroupedGemmOptions options_for(const Problem& p, int64_t groups, int64_t max_m) {
  GroupedGemmOptions o;
  o.num_groups = groups;
  o.max_m = max_m;
  o.n = p.n;
  o.k = p.k;
  o.input_dtype = p.in;
  o.output_dtype = p.out;
  o.transpose_weight = p.transpose_weight;
  return o;
}

const float* scale_or_null(const Data& d) {
  return d.scale.empty() ? nullptr : d.scale.data();
}

// One forward checked against the reference (bitwise for exact data), and that nothing is
// written beyond m rows.
void check_forward(GroupedGemm& op, const Problem& p, const Data& d, bool exact,
                   const std::string& what) {
  const int64_t m = total(d.splits);
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

Data make_data(const Problem& p, Splits kind, int64_t groups, bool exact, int scale_kind,
               uint64_t seed) {
  Data d;
  d.splits = make_splits(kind, groups, 150, seed);
  const int64_t m = total(d.splits);
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

class GroupedGemmTest : public MpiTest,
                        public ::testing::WithParamInterface<std::pair<DType, DType>> {};

// Every split pattern, both weight layouts, NULL / power-of-two / arbitrary scales, on exact and
// random data, with one and three compute threads; shapes whose n gives one slab per thread,
// fewer slabs than threads (the rows split too), and a single slab.
TEST_P(GroupedGemmTest, MatchesPerGroupLoops) {
  const auto [in, out] = GetParam();
  const Shape shapes[] = {{8, 200, 40}, {5, 40, 100}, {3, 130, 7}};
  const Splits kinds[] = {Splits::kBalanced, Splits::kSkewed, Splits::kEmptyGroups,
                          Splits::kOneGroup, Splits::kNone};
  uint64_t seed = seed_of(world_rank(), 0, 0);
  for (int threads : {1, 3}) {
    ContextOptions co = test_options();
    co.compute_threads = threads;
    Context ctx(MPI_COMM_WORLD, co);
    for (const Shape& sh : shapes)
      for (bool trans : {false, true}) {
        const Problem p{in, out, sh.n, sh.k, trans};
        GroupedGemm op(ctx, options_for(p, sh.groups, 400));
        for (Splits kind : kinds)
          for (int variant = 0; variant < 3; ++variant) {
            const bool exact = variant < 2;  // 0: exact, NULL scale; 1: exact, 2^i scales
            const int scale_kind = variant;  // 2: random data, arbitrary scales
            const Data d = make_data(p, kind, sh.groups, exact, scale_kind, seed += 10);
            const std::string what = describe(p) + " G=" + std::to_string(sh.groups) + " " +
                                     splits_name(kind) + " m=" + std::to_string(total(d.splits)) +
                                     (exact ? " exact" : " random") +
                                     (scale_kind == 0   ? " scale=NULL"
                                      : scale_kind == 1 ? " scale=2^i"
                                                        : " scale=any") +
                                     " threads=" + std::to_string(threads);
            check_forward(op, p, d, exact, what);
            if (HasFailure()) return;
          }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, GroupedGemmTest, ::testing::ValuesIn(kPairs),
                         [](const ::testing::TestParamInfo<std::pair<DType, DType>>& i) {
                           return std::string(dtype_name(i.param.first)) + "_" +
                                  dtype_name(i.param.second);
                         });

// The schedule covers every (row, column) of the output exactly once, uses at most the threads
// it is given, and cuts columns at multiples of 16.
TEST(GroupedGemmPlan, CoversEveryElementOnce) {
  for (int64_t m : {1, 2, 5, 100})
    for (int64_t n : {1, 16, 63, 64, 100, 128, 200, 1000})
      for (int threads : {1, 2, 3, 4, 8}) {
        const auto parts = detail::GroupedGemmImpl::plan(m, n, threads);
        const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                 " threads=" + std::to_string(threads);
        EXPECT_GE(parts.size(), 1u) << what;
        EXPECT_LE(parts.size(), static_cast<std::size_t>(threads)) << what;
        std::vector<int> seen(static_cast<std::size_t>(m * n), 0);
        for (const auto& q : parts) {
          EXPECT_TRUE(q.col0 % 16 == 0 && (q.col1 % 16 == 0 || q.col1 == n)) << what;
          for (int64_t i = q.row0; i < q.row1; ++i)
            for (int64_t j = q.col0; j < q.col1; ++j) ++seen[static_cast<std::size_t>(i * n + j)];
        }
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), m * n) << what;
      }
  EXPECT_TRUE(detail::GroupedGemmImpl::plan(0, 100, 4).empty());
}

class GroupedGemmErrors : public MpiTest {};

// Invalid create and forward arguments raise kInvalidArgument naming grouped_gemm, the argument
// and the values; a failed forward writes nothing and the op stays usable.
TEST_F(GroupedGemmErrors, BadArgumentsLeaveOpUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const Problem p{DType::kFloat32, DType::kFloat32, 24, 8, false};
  auto create = [&](GroupedGemmOptions o) { return [&ctx, o] { GroupedGemm op(ctx, o); }; };
  GroupedGemmOptions o = options_for(p, 6, 4096);
  GroupedGemmOptions bad = o;
  bad.output_dtype = DType::kBFloat16;
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "(f32, bf16)"}, "f32->bf16");
  bad = o;
  bad.input_dtype = DType::kBFloat16;
  bad.output_dtype = DType::kFloat64;
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "(bf16, f64)"}, "bf16->f64");
  bad = o;
  bad.input_dtype = static_cast<DType>(7);
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "invalid"}, "dtype 7");
  bad = o;
  bad.num_groups = 0;
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "num_groups=0"}, "G = 0");
  bad = o;
  bad.n = 0;
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "n=0"}, "n = 0");
  bad = o;
  bad.k = -3;
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "k=-3"}, "k < 0");
  bad = o;
  bad.max_m = -1;
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "max_m=-1"}, "max_m < 0");
  bad = o;
  bad.num_groups = int64_t{1} << 40;
  bad.n = bad.k = 1 << 20;
  expect_error(create(bad), Errc::kInvalidArgument, {"grouped_gemm", "too large"}, "huge");

  GroupedGemm op(ctx, o);
  const Data d = make_data(p, Splits::kSkewed, 6, /*exact=*/true, 1, seed_of(world_rank(), 1, 0));
  const int64_t m = total(d.splits);
  const std::size_t count = static_cast<std::size_t>(m * p.n);
  Bytes out = poisoned_output(p.out, count);
  auto fwd = [&](const void* in, const int64_t* splits, const void* w, void* o2) {
    return [&op, in, splits, w, o2, &d] { op.forward(in, splits, w, scale_or_null(d), o2); };
  };
  std::vector<int64_t> neg = d.splits;
  neg[3] = -2;
  expect_error(fwd(d.input.data(), neg.data(), d.weight.data(), out.data()), Errc::kInvalidArgument,
               {"grouped_gemm: splits[3]=-2 must be >= 0"}, "negative");
  std::vector<int64_t> many = {1000, 1000, 1000, 1000, 1000, 0};
  expect_error(fwd(d.input.data(), many.data(), d.weight.data(), out.data()),
               Errc::kInvalidArgument,
               {"grouped_gemm", "the splits add up to 5000 rows, more than max_m=4096"}, "> max_m");
  std::vector<int64_t> huge(6, std::numeric_limits<int64_t>::max());
  expect_error(fwd(d.input.data(), huge.data(), d.weight.data(), out.data()),
               Errc::kInvalidArgument, {"grouped_gemm", "more than max_m=4096"}, "overflowing sum");
  expect_error(fwd(d.input.data(), nullptr, d.weight.data(), out.data()), Errc::kInvalidArgument,
               {"grouped_gemm", "splits is NULL"}, "NULL splits");
  const std::string with_m = "NULL with m=" + std::to_string(m);
  expect_error(fwd(nullptr, d.splits.data(), d.weight.data(), out.data()), Errc::kInvalidArgument,
               {"grouped_gemm", "input is " + with_m}, "NULL input");
  expect_error(fwd(d.input.data(), d.splits.data(), nullptr, out.data()), Errc::kInvalidArgument,
               {"grouped_gemm", "weight is " + with_m}, "NULL weight");
  expect_error(fwd(d.input.data(), d.splits.data(), d.weight.data(), nullptr),
               Errc::kInvalidArgument, {"grouped_gemm", "output is " + with_m}, "NULL output");
  expect_untouched(out, 0, "failed forwards");

  // m == 0 reads only splits.
  const std::vector<int64_t> zeros(6, 0);
  EXPECT_NO_THROW(op.forward(nullptr, zeros.data(), nullptr, nullptr, nullptr));
  // Still usable.
  check_forward(op, p, d, /*exact=*/true, "forward after errors");
}

class GroupedGemmRuntime : public MpiTest {};

// The caller's OpenBLAS thread count survives a forward, and the op keeps working (on the
// calling thread) after its context was closed.
TEST_F(GroupedGemmRuntime, RestoresBlasThreadsAndOutlivesContext) {
  ContextOptions co = test_options();
  co.compute_threads = 2;
  Context ctx(MPI_COMM_WORLD, co);
  const Problem p{DType::kBFloat16, DType::kFloat32, 160, 24, true};
  GroupedGemm op(ctx, options_for(p, 4, 300));
  EXPECT_EQ(op.options().num_groups, 4);
  EXPECT_EQ(op.options().max_m, 300);
  const Data d = make_data(p, Splits::kBalanced, 4, /*exact=*/true, 1, seed_of(world_rank(), 2, 0));
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(2);
  check_forward(op, p, d, true, "with 2 OpenBLAS threads set");
  EXPECT_EQ(openblas_get_num_threads(), 2) << "rank " << world_rank();
  openblas_set_num_threads(saved);
  ctx.close();
  check_forward(op, p, d, true, "after the context was closed");
  expect_error([&] { GroupedGemm late(ctx, options_for(p, 4, 300)); }, Errc::kInvalidUsage,
               {"grouped_gemm", "closed"}, "create on a closed context");
}

}  // namespace
}  // namespace fluxcpp::test
