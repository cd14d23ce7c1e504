// The schedules the ops plan for representative calls (docs/design.md, "How a schedule is
// chosen"): decode-sized calls take the latency path where the layout has one (one host with
// peers, or hosts of one rank each), prefill calls run in blocks, the settings that force
// gathering or copy offload are obeyed, and the benchmark paths plan the steps of a normal
// schedule. plan() is asked directly; a few real forwards check that the call ran what plan()
// says (last_schedule()).
#include <cstdlib>
#include <memory>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "ops/ag_gemm.hpp"
#include "ops/all_gather.hpp"
#include "ops/all_reduce.hpp"
#include "ops/gemm_ar.hpp"
#include "ops/gemm_rs.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

using AgKind = detail::AgGemmImpl::Schedule::Kind;
using RsKind = detail::GemmRsImpl::Schedule::Kind;

class ScheduleTest : public MpiTest {
 protected:
  void SetUp() override {
    W = world_size();
    hosts = ctx.num_hosts();
    // The latency path needs peers whose data can ride on the handshake: one host with peers, or
    // hosts of one rank each.
    latency_layout = W > 1 && (hosts == 1 || hosts == W);
  }
  ops::GemmCall call_of(int64_t m) const {
    return ops::GemmCall::fused(nullptr, m, nullptr, nullptr, nullptr, nullptr);
  }
  static GemmRsOptions rs_options(int64_t max_m, int64_t n) {
    GemmRsOptions o;
    o.max_m = max_m, o.n = n, o.k = 64;
    return o;
  }

  Context ctx{MPI_COMM_WORLD, test_options()};
  int W = 1, hosts = 1;
  bool latency_layout = false;
};

TEST_F(ScheduleTest, AgGemmDecodeIsLatencyAndPrefillIsInPlace) {
  AgGemmOptions o;
  o.max_m = 1024 * W, o.n = 256, o.k = 64;
  auto op = ops::make_op<detail::AgGemmImpl>(ctx.impl(), o);
  // Decode: the rows ride on the handshake; where they cannot, gathered for one GEMM (whole when
  // some come over the network).
  const AgKind decode = op->plan(ops::Path::kFused, call_of(8 * W)).kind;
  EXPECT_EQ(decode, latency_layout ? AgKind::kLatency
                    : hosts > 1    ? AgKind::kGatherWhole
                                   : AgKind::kGather);
  // Prefill with a rank's block taller than the weight is wide: in place, block by block.
  EXPECT_EQ(op->plan(ops::Path::kFused, call_of(512 * W)).kind, AgKind::kInPlace);
  // The benchmark paths: comm-only moves the rows as kGather does; gemm-only never takes the
  // latency path (its GEMMs read what the buffers hold).
  const detail::AgGemmImpl::Schedule comm = op->plan(ops::Path::kCommOnly, call_of(512 * W));
  EXPECT_EQ(comm.kind, AgKind::kGather);
  EXPECT_EQ(comm.path, ops::Path::kCommOnly);
  EXPECT_NE(op->plan(ops::Path::kGemmOnly, call_of(8 * W)).kind, AgKind::kLatency);

  // A real decode call runs the planned schedule.
  const int64_t m = 8 * W;
  Bytes input = random_tensor(DType::kFloat32, static_cast<std::size_t>(8 * o.k), 1);
  Bytes weight = random_tensor(DType::kFloat32, static_cast<std::size_t>(o.n * o.k), 2);
  std::vector<float> out(static_cast<std::size_t>(m * o.n));
  op->forward(input.data(), m, weight.data(), nullptr, out.data(), nullptr);
  EXPECT_EQ(op->last_schedule().kind, decode);
}

TEST_F(ScheduleTest, AgGemmModeAndShapeForceGathering) {
  AgGemmOptions o;
  o.max_m = 1024 * W, o.n = 256, o.k = 64;
  o.mode = AgGemmMode::kCopy;  // always gather
  auto copy = ops::make_op<detail::AgGemmImpl>(ctx.impl(), o);
  // (Across hosts the rows on the link, 128 KiB a rank, outweigh the weight: not whole.)
  EXPECT_EQ(copy->plan(ops::Path::kFused, call_of(512 * W)).kind, AgKind::kGather);
  // A weight (1 MiB) heavier than the rows other hosts send (64 KiB a rank): gathered whole.
  o.mode = AgGemmMode::kAuto;
  o.n = 4096;
  auto wide = ops::make_op<detail::AgGemmImpl>(ctx.impl(), o);
  EXPECT_EQ(wide->plan(ops::Path::kFused, call_of(256 * W)).kind,
            hosts > 1 ? AgKind::kGatherWhole : AgKind::kGather);
}

TEST_F(ScheduleTest, GemmRsDecodeIsLatencyAndPrefillRunsInBlocks) {
  auto op = ops::make_op<detail::GemmRsImpl>(ctx.impl(), rs_options(1024 * W, 256));
  const detail::GemmRsImpl::Schedule decode = op->plan(ops::Path::kFused, 8 * W);
  EXPECT_EQ(decode.kind, latency_layout ? RsKind::kLatency : RsKind::kReduce);
  EXPECT_TRUE(decode.one_call);  // decode sizes: one GEMM reads the weight once
  // Prefill, a rank's block taller than the weight is wide: a block per peer, ring order.
  const detail::GemmRsImpl::Schedule prefill = op->plan(ops::Path::kFused, 512 * W);
  EXPECT_EQ(prefill.one_call, W == 1);
  EXPECT_EQ(prefill.kind, hosts == W && W > 1 ? RsKind::kDirect : RsKind::kReduce);
  // On one host a weight wider than a block is tall: one call.
  EXPECT_EQ(op->plan(ops::Path::kFused, 200 * W).one_call, hosts == 1 || W * 200 <= 128);
  // gemm-only and comm-only are kReduce's steps.
  EXPECT_EQ(op->plan(ops::Path::kGemmOnly, 8 * W).kind, RsKind::kReduce);
  EXPECT_EQ(op->plan(ops::Path::kCommOnly, 8 * W).kind, RsKind::kReduce);

  const int64_t m = 512 * W;
  Bytes input = random_tensor(DType::kFloat32, static_cast<std::size_t>(m * 64), 3);
  Bytes weight = random_tensor(DType::kFloat32, static_cast<std::size_t>(256 * 64), 4);
  std::vector<float> out(static_cast<std::size_t>(512 * 256));
  op->forward(input.data(), m, weight.data(), nullptr, out.data());
  EXPECT_EQ(op->last_schedule().kind, prefill.kind);
  EXPECT_EQ(op->last_schedule().one_call, prefill.one_call);
}

TEST_F(ScheduleTest, CopyOffloadIsPlannedWhenForcedOn) {
  // The setting is read when a context is made: a second context with it forced on.
  setenv("FLUXCPP_COPY_OFFLOAD", "on", 1);
  Context offload(MPI_COMM_WORLD, test_options());
  unsetenv("FLUXCPP_COPY_OFFLOAD");
  AgGemmOptions o;
  o.max_m = 1024 * W, o.n = 256, o.k = 64;
  auto ag = ops::make_op<detail::AgGemmImpl>(offload.impl(), o);
  // Staged on a comm stream whenever another rank reads this rank's rows.
  EXPECT_EQ(ag->plan(ops::Path::kFused, call_of(512 * W)).offload, W > 1);
  EXPECT_FALSE(ag->plan(ops::Path::kCommOnly, call_of(512 * W)).offload);
  // GemmRS presums on a comm stream on one host of three or more ranks.
  auto rs = ops::make_op<detail::GemmRsImpl>(offload.impl(), rs_options(1024 * W, 256));
  const RsKind prefill = rs->plan(ops::Path::kFused, 512 * W).kind;
  EXPECT_EQ(prefill == RsKind::kPresum, hosts == 1 && W > 2);
}

TEST_F(ScheduleTest, AllReduceAndGemmArDecodeIsLatency) {
  AllReduceOptions ar;
  ar.max_count = 1 << 20;
  auto all_reduce = ops::make_op<detail::AllReduceImpl>(ctx.impl(), ar);
  EXPECT_EQ(all_reduce->plan(256), latency_layout ? detail::AllReduceImpl::Schedule::kLatency
                                                  : detail::AllReduceImpl::Schedule::kChunks);
  EXPECT_EQ(all_reduce->plan(1 << 20), detail::AllReduceImpl::Schedule::kChunks);

  GemmArOptions g;
  g.max_m = 4096, g.n = 256, g.k = 64;
  auto gemm_ar = ops::make_op<detail::GemmArImpl>(ctx.impl(), g);
  EXPECT_EQ(gemm_ar->plan(8), latency_layout ? detail::GemmArImpl::Schedule::kLatency
                                             : detail::GemmArImpl::Schedule::kWhole);
  // Prefill: the partial streams to the other hosts in halves when the rank is alone on its host.
  EXPECT_EQ(gemm_ar->plan(4096), hosts == W && W > 1 ? detail::GemmArImpl::Schedule::kHalves
                                                     : detail::GemmArImpl::Schedule::kWhole);
}

TEST_F(ScheduleTest, AllGatherSmallBlocksAreStagedOrRideOnTheHandshake) {
  using Kind = detail::AllGatherImpl::Schedule;
  AllGatherOptions o;
  o.max_m = 1 << 16, o.k = 4;
  auto op = ops::make_op<detail::AllGatherImpl>(ctx.impl(), o);
  // 64 rows of 16 bytes: across hosts of one rank each, in the handshake's rail records; on a
  // host with peers below FLUXCPP_CMA_MIN_KB (16 KiB), staged in the segments.
  const bool rail_payload = hosts > 1 && hosts == W;
  EXPECT_EQ(op->plan(64 * W), rail_payload ? Kind::kLatency : Kind::kStaged);
  // A block past the payload room (256 KiB across 2 hosts) leaves through the transfers.
  if (hosts > 1) EXPECT_NE(op->plan(o.max_m), Kind::kLatency);
  // A real call runs the planned schedule and gathers every rank's block.
  const int64_t m = 64 * W;
  std::vector<float> in(static_cast<std::size_t>(64 * 4), static_cast<float>(ctx.rank() + 1));
  std::vector<float> out(static_cast<std::size_t>(m * 4), -1.0f);
  op->forward(in.data(), m, out.data());
  EXPECT_EQ(op->last_schedule(), rail_payload ? Kind::kLatency : Kind::kStaged);
  for (int g = 0; g < W; ++g)
    EXPECT_EQ(out[static_cast<std::size_t>(g) * 64 * 4 + 7], static_cast<float>(g + 1))
        << "rank " << g << "'s block";
}

}  // namespace
}  // namespace fluxcpp::test
