// GroupedGemm (one GEMM per group of consecutive rows, local to the rank) against per-group plain
// loops in double. Exact data (multiples of 1/8, power-of-two scales: every f32 sum is exact) is
// compared bit for bit with the reference rounded once to the output dtype; random data within a
// tolerance scaled with k. Every rank runs its own local problems (run at W = 1 and 2).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "grouped_gemm_reference.hpp"
#include "mpi_test.hpp"
#include "ops/grouped_gemm.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

struct Shape {
  int64_t groups, n, k;
};

class GroupedGemmTest : public MpiTest,
                        public ::testing::WithParamInterface<std::pair<DType, DType>> {};

// Every split pattern, both weight layouts, NULL / power-of-two / arbitrary scales, on exact and
// random data, with one and three compute threads; shapes whose n gives one slab per thread,
// fewer slabs than threads (the rows split too), and a single slab.
TEST_P(GroupedGemmTest, MatchesPerGroupLoops) {
  const auto [in, out] = GetParam();
  const Shape shapes[] = {{8, 200, 40}, {5, 40, 100}, {3, 130, 7}};
  const SplitKind kinds[] = {SplitKind::kBalanced, SplitKind::kSkewed, SplitKind::kEmptyGroups,
                             SplitKind::kOneGroup, SplitKind::kNone};
  uint64_t seed = seed_of(world_rank(), 0, 0);
  for (int threads : {1, 3}) {
    Context ctx(MPI_COMM_WORLD, threaded_options(threads));
    for (const Shape& sh : shapes)
      for (bool trans : {false, true}) {
        const Problem p{in, out, sh.n, sh.k, trans};
        GroupedGemm op(ctx, grouped_options(p, sh.groups, 400));
        for (SplitKind kind : kinds)
          for (int variant = 0; variant < 3; ++variant) {
            const bool exact = variant < 2;  // 0: exact, NULL scale; 1: exact, 2^i scales
            const int scale_kind = variant;  // 2: random data, arbitrary scales
            const GroupedData d =
                make_grouped_data(p, kind, sh.groups, exact, scale_kind, seed += 10);
            const std::string what =
                describe(p) + " G=" + std::to_string(sh.groups) + " " + split_kind_name(kind) +
                " m=" + std::to_string(total_rows(d.splits)) + (exact ? " exact" : " random") +
                (scale_kind == 0   ? " scale=NULL"
                 : scale_kind == 1 ? " scale=2^i"
                                   : " scale=any") +
                " threads=" + std::to_string(threads);
            check_grouped_forward(op, p, d, exact, what);
            if (HasFailure()) return;
          }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, GroupedGemmTest, ::testing::ValuesIn(kPairs), pair_test_name);

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
  GroupedGemmOptions o = grouped_options(p, 6, 4096);
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
  const GroupedData d =
      make_grouped_data(p, SplitKind::kSkewed, 6, /*exact=*/true, 1, seed_of(world_rank(), 1, 0));
  const int64_t m = total_rows(d.splits);
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
  check_grouped_forward(op, p, d, /*exact=*/true, "forward after errors");
}

class GroupedGemmRuntime : public MpiTest {};

// The caller's OpenBLAS thread count survives a forward, and the op keeps working (on the
// calling thread) after its context was closed.
TEST_F(GroupedGemmRuntime, RestoresBlasThreadsAndOutlivesContext) {
  Context ctx(MPI_COMM_WORLD, threaded_options(2));
  const Problem p{DType::kBFloat16, DType::kFloat32, 160, 24, true};
  GroupedGemm op(ctx, grouped_options(p, 4, 300));
  EXPECT_EQ(op.options().num_groups, 4);
  EXPECT_EQ(op.options().max_m, 300);
  const GroupedData d =
      make_grouped_data(p, SplitKind::kBalanced, 4, /*exact=*/true, 1, seed_of(world_rank(), 2, 0));
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(2);
  check_grouped_forward(op, p, d, true, "with 2 OpenBLAS threads set");
  EXPECT_EQ(openblas_get_num_threads(), 2) << "rank " << world_rank();
  openblas_set_num_threads(saved);
  ctx.close();
  check_grouped_forward(op, p, d, true, "after the context was closed");
  expect_error([&] { GroupedGemm late(ctx, grouped_options(p, 4, 300)); }, Errc::kInvalidUsage,
               {"grouped_gemm", "closed"}, "create on a closed context");
}

// An op is used by one thread at a time: a thread entering a forward while another runs one gets
// kInvalidUsage and the running forward goes on. Two threads call forward back to back until one
// of them has been turned away; every call that was let in must still be right.
TEST_F(GroupedGemmRuntime, SecondThreadGetsInvalidUsage) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const Problem p{DType::kFloat32, DType::kFloat32, 256, 256, false};
  const int64_t G = 4;
  GroupedGemm op(ctx, grouped_options(p, G, 600));
  GroupedData d =
      make_grouped_data(p, SplitKind::kBalanced, G, /*exact=*/true, 0, seed_of(world_rank(), 3, 0));
  d.splits.assign(G, 128);
  d.input = exact_tensor(p.in, static_cast<std::size_t>(512 * p.k), seed_of(world_rank(), 3, 1));
  const Bytes want = [&] {
    Bytes out = poisoned_output(p.out, static_cast<std::size_t>(512 * p.n));
    op.forward(d.input.data(), d.splits.data(), d.weight.data(), nullptr, out.data());
    return out;
  }();
  std::atomic<int> turned_away{0}, wrong{0}, other{0};
  auto hammer = [&] {
    Bytes out = poisoned_output(p.out, static_cast<std::size_t>(512 * p.n));
    for (int i = 0; i < 400 && turned_away.load() == 0; ++i) {
      try {
        op.forward(d.input.data(), d.splits.data(), d.weight.data(), nullptr, out.data());
        if (out != want) ++wrong;
      } catch (const Error& e) {
        const bool usage = e.code() == Errc::kInvalidUsage &&
                           std::string(e.what()).find("grouped_gemm") != std::string::npos;
        ++(usage ? turned_away : other);
      }
    }
  };
  std::thread second(hammer);
  hammer();
  second.join();
  EXPECT_GE(turned_away.load(), 1) << "rank " << world_rank() << ": no call was turned away";
  EXPECT_EQ(wrong.load(), 0) << "rank " << world_rank();
  EXPECT_EQ(other.load(), 0) << "rank " << world_rank();
}

}  // namespace
}  // namespace fluxcpp::test
