// Misuse is an error, never corrupt data:
// - a second thread entering an op (or another op of the same context) while a call is in
//   progress gets kInvalidUsage, and the first call completes with the right data;
// - ranks whose call numbers diverged are never paired: the handshake carries every call's
//   identity, and a rank that meets another rank at a different call gets kInvalidUsage (the op
//   is then mismatched, i.e. broken);
// - a rank that comes late to a call, after the others gave up on it (kTimeout), is not paired
//   with their next call: the op is broken on every rank and every later call is kInvalidUsage;
// - a create too large for the machine is kSystem naming the op and the bytes.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "ops/core/handshake.hpp"
#include "shm/layout.hpp"
#include "shm/symmetric_buffer.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

using std::chrono::milliseconds;

// Small integers: every product and sum below is exact in f32, so results compare with memcmp.
float value(int rank, int round, int64_t i) {
  return static_cast<float>((rank * 7 + round * 3 + i * 5) % 9 - 4);
}

// One collective op behind a uniform face, with its exact reference.
struct Subject {
  std::function<void()> forward;         // this rank's call with this round's data
  std::function<void(int round)> fill;   // this round's inputs
  std::function<bool(int round)> check;  // outputs == reference for the round
};

constexpr int64_t kRows = 8, kK = 16, kN = 12;

Subject all_gather_subject(const Context& ctx, std::vector<float>& in, std::vector<float>& out,
                           AllGather& op) {
  const int W = ctx.world_size(), r = ctx.rank();
  Subject s;
  s.fill = [&, r](int round) {
    for (int64_t i = 0; i < kRows * kK; ++i) in[i] = value(r, round, i);
    std::fill(out.begin(), out.end(), -99.0f);
  };
  s.forward = [&, W] { op.forward(in.data(), kRows * W, out.data()); };
  s.check = [&, W](int round) {
    std::vector<float> want(out.size());
    for (int q = 0; q < W; ++q)
      for (int64_t i = 0; i < kRows * kK; ++i) want[q * kRows * kK + i] = value(q, round, i);
    return std::memcmp(want.data(), out.data(), want.size() * sizeof(float)) == 0;
  };
  return s;
}

Subject ag_gemm_subject(const Context& ctx, std::vector<float>& in, std::vector<float>& weight,
                        std::vector<float>& out, AgGemm& op) {
  const int W = ctx.world_size(), r = ctx.rank();
  Subject s;
  s.fill = [&, r](int round) {
    for (int64_t i = 0; i < kRows * kK; ++i) in[i] = value(r, round, i);
    for (int64_t i = 0; i < kN * kK; ++i) weight[i] = value(r + 11, round, i);
    std::fill(out.begin(), out.end(), -99.0f);
  };
  s.forward = [&, W] {
    op.forward(in.data(), kRows * W, weight.data(), nullptr, out.data(), nullptr);
  };
  s.check = [&, W](int round) {
    std::vector<float> want(out.size());
    for (int64_t row = 0; row < kRows * W; ++row)
      for (int64_t j = 0; j < kN; ++j) {
        double acc = 0;
        for (int64_t t = 0; t < kK; ++t)
          acc += static_cast<double>(
                     value(static_cast<int>(row / kRows), round, (row % kRows) * kK + t)) *
                 weight[j * kK + t];
        want[row * kN + j] = static_cast<float>(acc);
      }
    return std::memcmp(want.data(), out.data(), want.size() * sizeof(float)) == 0;
  };
  return s;
}

// Rank 0 comes late to each round, so that on every other rank a first thread is surely inside
// the call (waiting for rank 0 in the handshake) when a second thread tries the same op and then
// another op of the same context.
void two_threads(const Context& ctx, Subject& s, AllGather& other) {
  const int W = ctx.world_size();
  std::vector<float> oin(kRows * kK), oout(kRows * kK * W);
  for (int round = 0; round < 3; ++round) {
    const std::string tag = "round " + std::to_string(round);
    s.fill(round);
    MPI_Barrier(MPI_COMM_WORLD);
    if (ctx.rank() == 0) {
      std::this_thread::sleep_for(milliseconds(400));
      s.forward();
    } else {
      std::string first_error;
      std::thread first([&] {
        try {
          s.forward();
        } catch (const std::exception& e) {
          first_error = e.what();
        }
      });
      std::this_thread::sleep_for(milliseconds(80));
      expect_error(s.forward, Errc::kInvalidUsage, {"in use by another thread"},
                   tag + ": second thread, same op");
      expect_error([&] { other.forward(oin.data(), kRows * W, oout.data()); }, Errc::kInvalidUsage,
                   {"in use by another thread"},
                   tag + ": second thread, another op of the context");
      first.join();
      EXPECT_EQ(first_error, "") << tag << ": rank " << ctx.rank() << ": first thread failed";
    }
    EXPECT_TRUE(s.check(round)) << tag << ": rank " << ctx.rank() << ": wrong output";
  }
  // Still usable, from any thread.
  s.fill(7);
  std::thread([&] { s.forward(); }).join();
  EXPECT_TRUE(s.check(7)) << "after the misuse: rank " << ctx.rank();
}

class Misuse : public MpiTest {};

TEST_F(Misuse, SecondThreadOnAllGatherIsInvalidUsage) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Context ctx(MPI_COMM_WORLD, test_options(20.0));
  const int W = ctx.world_size();
  AllGather op(ctx, {kRows * W, kK, DType::kFloat32});
  AllGather other(ctx, {kRows * W, kK, DType::kFloat32});
  std::vector<float> in(kRows * kK), out(kRows * kK * W);
  Subject s = all_gather_subject(ctx, in, out, op);
  two_threads(ctx, s, other);
}

TEST_F(Misuse, SecondThreadOnAgGemmIsInvalidUsage) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Context ctx(MPI_COMM_WORLD, test_options(20.0));
  const int W = ctx.world_size();
  AgGemm op(ctx, {kRows * W, kN, kK, DType::kFloat32, DType::kFloat32});
  AllGather other(ctx, {kRows * W, kK, DType::kFloat32});
  std::vector<float> in(kRows * kK), weight(kN * kK), out(kRows * W * kN);
  Subject s = ag_gemm_subject(ctx, in, weight, out, op);
  two_threads(ctx, s, other);
}

// The handshake itself, driven with call numbers that diverged (as after calls one rank went
// through alone): ranks two calls apart share a header parity, so the rank that is behind finds
// the other's later call where it expects its own and reports the mismatch; the rank ahead waits
// for a call the others never make and times out. Nobody pairs different calls.
TEST_F(Misuse, DivergedCallNumbersAreNeverPaired) {
  const int W = world_size();
  if (W < 2) GTEST_SKIP() << "needs two ranks";
  detail::ContextImpl c(MPI_COMM_WORLD, test_options(1.0));
  if (c.num_hosts() > 1) GTEST_SKIP() << "one host: the headers are in shared memory";
  const int victim = W - 1;
  for (bool victim_ahead : {true, false}) {
    const std::string tag = victim_ahead ? "victim ahead" : "victim behind";
    const uint64_t serial = c.begin_op_create("misuse");
    shm::Layout layout;
    ops::Handshake hs(c, "misuse", serial, layout, {"a", "b", "c", "d"}, 0);
    shm::SymmetricBuffer buf(c, layout.bytes(), c.creating_tag());
    layout.bind(buf);
    ops::CallDescriptor d;
    d.fields = {1, 2, 3, 4};
    hs.exchange(1, d);  // a call every rank makes
    const bool ahead = (c.world_rank() == victim) == victim_ahead;
    const uint64_t call = ahead ? 4 : 2;
    if (ahead) {
      expect_error([&] { hs.exchange(call, d); }, Errc::kTimeout, {"misuse", "timed out"},
                   tag + ": the rank ahead");
    } else {
      expect_error([&] { hs.exchange(call, d); }, Errc::kInvalidUsage,
                   {"misuse", "different calls", "at call 2", "at call 4"},
                   tag + ": the rank behind");
      EXPECT_TRUE(hs.mismatched()) << tag;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // nobody unmaps while a peer may still read
  }
  c.close();
}

// A rank that reaches a call after the others timed out on it: they gave up (kTimeout), it
// times out too (their data never comes), and the next call is kInvalidUsage on every rank — it
// is never paired with the others' next call.
TEST_F(Misuse, LateRankIsNotPairedWithTheNextCall) {
  const int W = world_size();
  if (W < 2) GTEST_SKIP() << "needs two ranks";
  const double timeout = 1.0;
  Context ctx(MPI_COMM_WORLD, test_options(timeout));
  if (ctx.num_hosts() > 1) GTEST_SKIP() << "one host";
  const int late = W - 1;
  AllGather op(ctx, {kRows * W, kK, DType::kFloat32});
  std::vector<float> in(kRows * kK, 1.0f), out(kRows * kK * W);
  op.forward(in.data(), kRows * W, out.data());
  if (ctx.rank() == late) std::this_thread::sleep_for(milliseconds(1500));
  expect_error([&] { op.forward(in.data(), kRows * W, out.data()); }, Errc::kTimeout,
               {"all_gather", "timed out"}, "the call the late rank missed");
  expect_error([&] { op.forward(in.data(), kRows * W, out.data()); }, Errc::kInvalidUsage,
               {"all_gather", "failed earlier"}, "the next call");
  MPI_Barrier(MPI_COMM_WORLD);
}

// Limits: a create too large for this machine (ag_gemm, max_m = 2^30, k = 1024: terabytes of
// segment and gather buffer) is kSystem on every rank naming the op and the bytes, never
// std::bad_alloc or a crash, and the context stays usable.
TEST_F(Misuse, HugeCreateIsSystemNamingOpAndBytes) {
  Context ctx(MPI_COMM_WORLD, test_options(20.0));
  const int W = ctx.world_size();
  expect_error(
      [&] {
        AgGemm op(ctx, {int64_t{1} << 30, 64, 1024});
      },
      Errc::kSystem, {"ag_gemm", "bytes"}, "ag_gemm max_m = 2^30, k = 1024");
  AllGather op(ctx, {kRows * W, kK, DType::kFloat32});
  std::vector<float> in(kRows * kK), out(kRows * kK * W);
  Subject s = all_gather_subject(ctx, in, out, op);
  s.fill(0);
  s.forward();
  EXPECT_TRUE(s.check(0)) << "rank " << ctx.rank() << ": context unusable after the failure";
}

}  // namespace
}  // namespace fluxcpp::test
