// inplace_cast with a context: the calling thread and the context's compute workers (1 to 4
// threads) split the work; every pair at FLUX's odd sizes and small ones, bit for bit against the
// reference of tests/support/cast_reference.hpp. Each rank converts its own buffer (the op is
// local), with different data per rank.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cast_reference.hpp"
#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

class InplaceCastThreads : public MpiTest {};

// Each input and its reference are made once and converted by every context.
TEST_F(InplaceCastThreads, EveryPairBitForBitWithOneToFourThreads) {
  std::vector<Context> contexts;
  for (int threads = 1; threads <= 4; ++threads)
    contexts.emplace_back(MPI_COMM_WORLD, threaded_options(threads));
  std::vector<int64_t> sizes = cast_small_sizes();
  for (int64_t n : {100000, 262147}) sizes.push_back(n);  // just above the threading threshold
  for (int64_t n : cast_odd_sizes()) sizes.push_back(n);
  for (CastPair p : cast_pairs())
    for (int64_t count : sizes) {
      const Bytes input = cast_input(p.from, count, 0xca57u + 131u * world_rank());
      const Bytes expected = cast_expected(input, p.from, p.to, count);
      const std::size_t footprint =
          static_cast<std::size_t>(count) * std::max(dtype_size(p.from), dtype_size(p.to));
      Bytes b(footprint + 64);
      for (std::size_t t = 0; t < contexts.size(); ++t) {
        std::fill(std::copy(input.begin(), input.end(), b.begin()), b.end(), 0xA5);
        inplace_cast(&contexts[t], b.data(), count, p.from, p.to);
        std::string report;
        const int64_t bad =
            cast_mismatches(b.data(), expected, input, p.from, p.to, count, &report);
        EXPECT_EQ(bad, 0) << pair_name(p) << " count=" << count << " threads=" << t + 1 << ": "
                          << bad << " wrong elements\n"
                          << report;
        EXPECT_TRUE(std::all_of(b.begin() + static_cast<std::ptrdiff_t>(footprint), b.end(),
                                [](unsigned char x) { return x == 0xA5; }))
            << pair_name(p) << " count=" << count << ": wrote past the buffer";
      }
    }
  for (Context& c : contexts) c.close();
}

class InplaceCastContext : public MpiTest {};

TEST_F(InplaceCastContext, ArgumentErrorsAndClosedContext) {
  Context ctx(MPI_COMM_WORLD, test_options());
  float buf[4] = {1, 2, 3, 4};
  expect_error([&] { inplace_cast(&ctx, buf, 4, DType::kBFloat16, DType::kFloat64); },
               Errc::kInvalidArgument, {"from=bf16 to=f64"}, "bf16->f64");
  ctx.close();
  expect_error([&] { inplace_cast(&ctx, buf, 4, DType::kFloat32, DType::kBFloat16); },
               Errc::kInvalidUsage, {"closed"}, "a closed context");
  const float want[4] = {1, 2, 3, 4};
  EXPECT_EQ(std::memcmp(buf, want, sizeof buf), 0) << "a rejected call wrote to the buffer";
}

}  // namespace
}  // namespace fluxcpp::test
