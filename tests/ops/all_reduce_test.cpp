// AllReduce against references computed here: closed-form sums of small integers (exact in any
// order), and the documented fixed order (within each host by local rank, then the hosts' sums
// by host index, accumulated in f32 / f64 and rounded once) replayed on the inputs gathered with
// MPI_Allgather, bit for bit, on every rank; MPI_Allreduce (order unspecified) as a sanity check
// within a tolerance. Counts straddle the one-shot / two-shot boundary and the chunking.
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

void store(unsigned char* p, DType t, std::size_t i, double v) {
  if (t == DType::kFloat64) {
    std::memcpy(p + 8 * i, &v, 8);
  } else if (t == DType::kFloat32) {
    const float f = static_cast<float>(v);
    std::memcpy(p + 4 * i, &f, 4);
  } else {
    const uint16_t b = float_to_bf16(static_cast<float>(v));
    std::memcpy(p + 2 * i, &b, 2);
  }
}

// Small integers in [-8, 8]: exact in every dtype, and so are their sums over <= 32 ranks.
int64_t pattern(int s, int64_t i, int call) {
  return (s * 7 + i * 3 + call * 5) % 17 - 8;
}

Bytes pattern_input(DType t, int64_t count, int r, int call) {
  Bytes b(static_cast<std::size_t>(count) * dtype_size(t));
  for (int64_t i = 0; i < count; ++i)
    store(b.data(), t, static_cast<std::size_t>(i), static_cast<double>(pattern(r, i, call)));
  return b;
}

Bytes pattern_sum(DType t, int64_t count, int W, int call) {
  Bytes b(static_cast<std::size_t>(count) * dtype_size(t));
  for (int64_t i = 0; i < count; ++i) {
    int64_t sum = 0;
    for (int s = 0; s < W; ++s) sum += pattern(s, i, call);
    store(b.data(), t, static_cast<std::size_t>(i), static_cast<double>(sum));
  }
  return b;
}

// Random values with full mantissas and exponents spread over 2^0..2^-15 (bf16: 2^-1..2^-40), so
// that the summation order shows in the rounding.
Bytes random_spread(DType t, int64_t count, uint64_t seed) {
  Bytes b = random_tensor(t, static_cast<std::size_t>(count), seed);
  uint64_t s = seed ^ 0x5eed;
  for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
    const uint64_t r = splitmix(s);
    if (t == DType::kBFloat16) {
      const uint16_t v = random_bf16(r, 40);
      std::memcpy(b.data() + 2 * i, &v, 2);
    } else {
      store(b.data(), t, i, std::ldexp(load(b.data(), t, i), -static_cast<int>(r & 15u)));
    }
  }
  return b;
}

// hosts[h] = the world ranks of host h by local rank, as the context reports them.
std::vector<std::vector<int>> gather_hosts(const Context& ctx) {
  const int W = ctx.world_size();
  int mine[2] = {ctx.host_id(), ctx.host_rank()};
  std::vector<int> all(2 * static_cast<std::size_t>(W));
  MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, MPI_COMM_WORLD);
  std::vector<std::vector<int>> hosts(static_cast<std::size_t>(ctx.num_hosts()),
                                      std::vector<int>(static_cast<std::size_t>(ctx.host_size())));
  for (int s = 0; s < W; ++s) hosts.at(all[2 * s]).at(all[2 * s + 1]) = s;
  return hosts;
}

// The documented order on every rank's input (inputs: W blocks of count elements).
Bytes ordered_reference(DType t, const Bytes& inputs, int64_t count,
                        const std::vector<std::vector<int>>& hosts) {
  const std::size_t esz = dtype_size(t), n = static_cast<std::size_t>(count);
  Bytes out(n * esz);
  for (std::size_t i = 0; i < n; ++i) {
    auto x = [&](int s) {
      return load(inputs.data() + static_cast<std::size_t>(s) * n * esz, t, i);
    };
    if (t == DType::kFloat64) {
      double total = 0.0;
      for (std::size_t h = 0; h < hosts.size(); ++h) {
        double hs = x(hosts[h][0]);
        for (std::size_t q = 1; q < hosts[h].size(); ++q) hs += x(hosts[h][q]);
        total = h == 0 ? hs : total + hs;
      }
      store(out.data(), t, i, total);
    } else {
      float total = 0.0f;
      for (std::size_t h = 0; h < hosts.size(); ++h) {
        float hs = static_cast<float>(x(hosts[h][0]));
        for (std::size_t q = 1; q < hosts[h].size(); ++q) hs += static_cast<float>(x(hosts[h][q]));
        total = h == 0 ? hs : total + hs;
      }
      store(out.data(), t, i, total);  // exact for f32; the one RNE rounding for bf16
    }
  }
  return out;
}

// Sanity against MPI_Allreduce (any order): |got - mpi| <= W * eps * Σ|x| (+ bf16's rounding).
void expect_close_to_mpi(DType t, const Bytes& in, const Bytes& inputs, int64_t count,
                         const Bytes& got, const std::string& what) {
  const int W = world_size();
  const std::size_t n = static_cast<std::size_t>(count), esz = dtype_size(t);
  std::vector<double> send = widen_f64(in, t, n), mpi(n);
  MPI_Allreduce(send.data(), mpi.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double eps = std::ldexp(1.0, t == DType::kFloat64 ? -51 : -22);
  int bad = 0;
  for (std::size_t i = 0; i < n && bad < 4; ++i) {
    double sum_abs = 0.0;
    for (int s = 0; s < W; ++s)
      sum_abs += std::fabs(load(inputs.data() + static_cast<std::size_t>(s) * n * esz, t, i));
    double tol = W * eps * sum_abs + 1e-300;
    if (t == DType::kBFloat16) tol += std::ldexp(std::fabs(mpi[i]) + tol, -8);
    const double g = load(got.data(), t, i);
    if (std::fabs(g - mpi[i]) <= tol) continue;
    ++bad;
    ADD_FAILURE() << what << ": rank " << world_rank() << " element " << i << ": MPI gives "
                  << mpi[i] << " ± " << tol << ", got " << g;
  }
}

struct Case {
  DType dtype;
  int64_t count;
};

std::string case_name(const Case& c) {
  return std::string(dtype_name(c.dtype)) + "_count" + std::to_string(c.count);
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << case_name(c);
}

// One forward of `in` (count elements) into a poisoned buffer, or in place; checked bit for bit
// against `want`, against rank 0's result, and nothing written past count. Collective.
Bytes run_checked(AllReduce& op, DType t, const Bytes& in, int64_t count, bool in_place,
                  const Bytes& want, const std::string& what) {
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(t);
  Bytes out = poisoned_output(t, static_cast<std::size_t>(count));
  if (in_place) std::memcpy(out.data(), in.data(), bytes);
  expect_no_throw([&] { op.forward(in_place ? out.data() : in.data(), count, out.data()); }, what);
  expect_same_bits(want, out, t, 1, what, "element");
  expect_untouched(out, bytes, what);
  expect_same_on_every_rank(out, bytes, what);
  return out;
}

class AllReduceTest : public MpiTest, public ::testing::WithParamInterface<Case> {};

// One op; for each call, an integer pattern (closed form) or random data (the ordered reference
// and MPI), out of place and in place.
TEST_P(AllReduceTest, ExactPatternsAndOrderedReference) {
  const Case c = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const auto hosts = gather_hosts(ctx);
  AllReduce op(ctx, {c.count, c.dtype});
  EXPECT_EQ(op.options().max_count, c.count);
  for (int call = 0; call < 4; ++call) {
    const bool in_place = call >= 2;
    const std::string what = case_name(c) + " W=" + std::to_string(W) + " call " +
                             std::to_string(call) + (in_place ? " in place" : "");
    const Bytes pin = pattern_input(c.dtype, c.count, r, call);
    run_checked(op, c.dtype, pin, c.count, in_place, pattern_sum(c.dtype, c.count, W, call),
                what + " pattern");
    const Bytes in = random_spread(c.dtype, c.count, seed_of(r, call, 3));
    const Bytes inputs = mpi_allgather(in, c.count, dtype_size(c.dtype));
    const Bytes out =
        run_checked(op, c.dtype, in, c.count, in_place,
                    ordered_reference(c.dtype, inputs, c.count, hosts), what + " random");
    expect_close_to_mpi(c.dtype, in, inputs, c.count, out, what + " random");
    if (any_rank(HasFailure())) break;  // uniform
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16})
    for (int64_t n : {1, 7, 64, 129, 1001, 16385, 65536, 65537, 300000}) v.push_back({d, n});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Counts, AllReduceTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return case_name(i.param);
                         });

class AllReduceCalls : public MpiTest {};

// Changing counts on one op (both algorithms, every chunking), zero-copy input among them.
TEST_F(AllReduceCalls, ChangingCountsAndZeroCopy) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const auto hosts = gather_hosts(ctx);
  const DType t = DType::kBFloat16;
  const int64_t max = 200000;
  AllReduce op(ctx, {max, t});
  const int64_t counts[] = {max, 3, 70001, 0, 1, 40000, 65, max, 16, 129};
  for (int call = 0; call < 20; ++call) {
    const int64_t count = counts[call % 10];
    const std::string what = "call " + std::to_string(call) + " count " + std::to_string(count);
    const Bytes in = random_spread(t, count, seed_of(r, call, 5));
    const Bytes want = ordered_reference(t, mpi_allgather(in, count, 2), count, hosts);
    if (call % 3 == 1) {  // zero-copy input
      void* slot = op.input_buffer();
      if (count > 0) std::memcpy(slot, in.data(), in.size());
      Bytes out = poisoned_output(t, static_cast<std::size_t>(count));
      expect_no_throw([&] { op.forward(slot, count, out.data()); }, what + " zero-copy");
      expect_same_bits(want, out, t, 1, what + " zero-copy", "element");
      expect_untouched(out, in.size(), what + " zero-copy");
    } else {
      run_checked(op, t, in, count, call % 2 == 0, want, what);
    }
    if (any_rank(HasFailure())) break;
  }
  (void)W;
}

class AllReduceBadInput : public MpiTest {};

TEST_F(AllReduceBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const std::vector<std::string> ar = {"all_reduce"};
  const int64_t max = 1000;
  AllReduce op(ctx, {max, DType::kFloat32});
  Bytes in(4 * max * 4, 0), out(4 * max * 4, 0);
  const void* i = in.data();
  void* o = out.data();
  expect_error([&] { op.forward(i, max + 1, o); }, Errc::kInvalidArgument,
               {"all_reduce: count=1001 must be in [0, max_count=1000]"}, "count > max_count");
  expect_error([&] { op.forward(i, -1, o); }, Errc::kInvalidArgument, ar, "count < 0");
  expect_error([&] { op.forward(r == W - 1 ? nullptr : i, 5, o); }, Errc::kInvalidArgument,
               {"input is NULL"}, "NULL input on the last rank");
  expect_error([&] { op.forward(i, 5, r == 0 ? nullptr : o); }, Errc::kInvalidArgument, ar,
               "NULL output on rank 0");
  // Overlap other than equality, on one rank.
  expect_error([&] { op.forward(o, 100, r == 0 ? static_cast<char*>(o) + 4 : o); },
               Errc::kInvalidArgument, {"overlap"}, "input and output overlap on rank 0");
  if (W > 1)
    expect_error([&] { op.forward(i, r == W - 1 ? 7 : 8, o); }, Errc::kInvalidArgument, ar,
                 "ranks pass different counts");
  // Zero-copy misuse: the slot without input_buffer(), an input inside the slot, an output on it.
  char* slot = static_cast<char*>(op.input_buffer());
  expect_no_throw([&] { op.forward(slot, 10, o); }, "zero-copy forward");
  expect_error([&] { op.forward(slot, 10, o); }, Errc::kInvalidUsage, {"input_buffer"},
               "slot without input_buffer()");
  slot = static_cast<char*>(op.input_buffer());
  expect_error([&] { op.forward(slot + 8, 10, o); }, Errc::kInvalidArgument, {"input overlaps"},
               "input inside the slot");
  expect_error([&] { op.forward(i, 10, slot); }, Errc::kInvalidArgument, {"output overlaps"},
               "output on the slot");
  expect_no_throw([&] { op.forward(nullptr, 0, nullptr); }, "count == 0");
  // Still usable.
  const Bytes pin = pattern_input(DType::kFloat32, max, r, 9);
  run_checked(op, DType::kFloat32, pin, max, false, pattern_sum(DType::kFloat32, max, W, 9),
              "good forward after errors");
}

TEST_F(AllReduceBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  auto create = [&](AllReduceOptions o) { AllReduce op(ctx, o); };
  expect_error(
      [&] {
        create({0, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"all_reduce: max_count=0 must be"}, "max_count = 0");
  expect_error(
      [&] {
        create({r == 0 ? -5 : 10, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"max_count=-5", "rank 0"}, "max_count < 0 on rank 0");
  expect_error(
      [&] {
        create({10, static_cast<DType>(77)});
      },
      Errc::kInvalidArgument, {"dtype"}, "unknown dtype");
  if (W > 1) {
    expect_error(
        [&] {
          create({r == W - 1 ? 11 : 10, DType::kFloat32});
        },
        Errc::kInvalidArgument, {"max_count"}, "max_count differs on the last rank");
    expect_error(
        [&] {
          create({10, r == 0 ? DType::kFloat64 : DType::kFloat32});
        },
        Errc::kInvalidArgument, {"dtype"}, "dtype differs on rank 0");
  }
  // Still fine afterwards.
  AllReduce op(ctx, {10, DType::kFloat64});
  run_checked(op, DType::kFloat64, pattern_input(DType::kFloat64, 10, r, 1), 10, true,
              pattern_sum(DType::kFloat64, 10, W, 1), "good op after create errors");
}

// A rank that reaches a decode-sized call after the others timed out on it: the others gave up
// (kTimeout) after their data had left with their handshake (the latency path, on one host and
// across hosts of one rank each), and the late rank must fail too — not complete the call with
// ranks whose op is broken — and the next call is kInvalidUsage on every rank.
class AllReduceFault : public MpiTest {};

TEST_F(AllReduceFault, LateRankOnTheLatencyPathFailsToo) {
  const int W = world_size();
  if (W < 2) GTEST_SKIP() << "needs two ranks";
  Context ctx(MPI_COMM_WORLD, test_options(1.0));
  const int late = W - 1;
  AllReduce op(ctx, {64, DType::kFloat32});
  std::vector<float> in(64, 1.0f), out(64, 0.0f);
  op.forward(in.data(), 64, out.data());
  EXPECT_EQ(out[63], static_cast<float>(W)) << "rank " << ctx.rank();
  if (ctx.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  expect_error([&] { op.forward(in.data(), 64, out.data()); }, Errc::kTimeout,
               {"all_reduce", "timed out"}, "the call the late rank missed");
  expect_error([&] { op.forward(in.data(), 64, out.data()); }, Errc::kInvalidUsage,
               {"all_reduce", "failed earlier"}, "the next call");
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace fluxcpp::test
