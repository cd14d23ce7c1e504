// The schedules the ops plan for representative calls (docs/design.md, "How a schedule is
// chosen"): decode-sized calls take the latency path where the layout has one (one host with
// peers, or hosts of one rank each), prefill calls run in blocks, the settings that force
// gathering or copy offload are obeyed, and the benchmark paths plan the steps of a normal
// schedule; the all-to-all, Ulysses and MoE tensor-parallel ops likewise. plan() is asked directly;
// a few real forwards check that the call ran what plan() says (last_schedule()).
#include <cstdlib>
#include <memory>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "ops/a2a_gemm.hpp"
#include "ops/a2a_transpose_gemm.hpp"
#include "ops/ag_gemm.hpp"
#include "ops/ag_scatter_grouped_gemm.hpp"
#include "ops/all_gather.hpp"
#include "ops/all_reduce.hpp"
#include "ops/gemm_a2a_transpose.hpp"
#include "ops/gemm_ar.hpp"
#include "ops/gemm_rs.hpp"
#include "ops/grouped_gemm_gather_rs.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

using AgKind = detail::AgGemmImpl::Schedule::Kind;
using RsKind = detail::GemmRsImpl::Schedule::Kind;
using A2aKind = detail::A2aGemmImpl::Schedule::Kind;
using UlyssesKind = detail::A2aTransposeGemmImpl::Schedule::Kind;
using MoeKind = ops::MoeTpSchedule::Kind;

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

  // The MoE TP ops' options: every expert local (ep_size 1), two of them, one slot a token.
  static MoeTpOptions moe_options(int64_t max_tokens) {
    MoeTpOptions o;
    o.max_tokens = max_tokens, o.hidden = 16, o.ffn_shard = 16, o.topk = 1, o.num_experts = 2;
    return o;
  }
  // A routing of T tokens, token t to expert t % 2 (the same on every rank).
  static MoeLayout moe_routing(int64_t T) {
    std::vector<int32_t> ids(static_cast<std::size_t>(T));
    for (int64_t t = 0; t < T; ++t) ids[static_cast<std::size_t>(t)] = static_cast<int32_t>(t % 2);
    return moe_layout(ids.data(), T, 1, 2, 1);
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
  // A2aGemm stages on a comm stream whenever it has peers; AllToAllTransposeGemm exchanges its
  // tiles on one when it runs them (one host); GemmAllToAllTranspose places on one when host
  // peers' rows land.
  A2aGemmOptions a;
  a.max_m = 512 * W, a.n = 256, a.k = 64;
  auto a2a = ops::make_op<detail::A2aGemmImpl>(offload.impl(), a);
  EXPECT_EQ(a2a->plan(ops::Path::kFused, call_of(512 * W)).offload, W > 1);
  A2aTransposeGemmOptions u;
  u.max_bs = 1, u.max_seq = 2048 * W, u.nheads = 2 * W, u.head_dim = 8, u.n = 64;
  auto after = ops::make_op<detail::A2aTransposeGemmImpl>(offload.impl(), u);
  EXPECT_EQ(after->plan(ops::Path::kFused, 1, 2048 * W).offload, W > 1 && hosts == 1);
  EXPECT_FALSE(after->plan(ops::Path::kFused, 1, W).offload);  // one tile: nothing to overlap
  GemmA2aTransposeOptions g;
  g.max_bs = 1, g.max_seq = 64 * W, g.hidden = 16, g.nheads = 2 * W, g.head_dim = 8;
  auto before = ops::make_op<detail::GemmA2aTransposeImpl>(offload.impl(), g);
  EXPECT_EQ(before->plan(ops::Path::kFused).offload, W > hosts);
  EXPECT_FALSE(before->plan(ops::Path::kCommOnly).offload);
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

TEST_F(ScheduleTest, AllGatherSmallBlocksRideOnTheHandshake) {
  using Kind = detail::AllGatherImpl::Schedule;
  AllGatherOptions o;
  o.max_m = 1 << 16, o.k = 4;
  auto op = ops::make_op<detail::AllGatherImpl>(ctx.impl(), o);
  // 64 rows of 16 bytes ride on the handshake: across hosts of one rank each in its rail
  // records, on one host in its payload slots. Across hosts of several ranks (and alone) there
  // is no payload room: staged in the segments (below FLUXCPP_CMA_MIN_KB, 16 KiB).
  const bool rail_payload = hosts > 1 && hosts == W;
  const bool latency = rail_payload || (hosts == 1 && W > 1);
  EXPECT_EQ(op->plan(64 * W), latency ? Kind::kLatency : Kind::kStaged);
  // A block past the payload room (256 KiB across 2 hosts, 64 KiB on one host) is not.
  if (W > 1) EXPECT_NE(op->plan(o.max_m), Kind::kLatency);
  if (hosts == 1 && W > 1) {
    const int64_t rows = static_cast<int64_t>(detail::AllGatherImpl::kHostLatencyBytes / 16);
    EXPECT_EQ(op->plan(rows * W), Kind::kLatency);
    EXPECT_NE(op->plan((rows + 1) * W), Kind::kLatency);
  }
  // A real call runs the planned schedule and gathers every rank's block.
  const int64_t m = 64 * W;
  std::vector<float> in(static_cast<std::size_t>(64 * 4), static_cast<float>(ctx.rank() + 1));
  std::vector<float> out(static_cast<std::size_t>(m * 4), -1.0f);
  op->forward(in.data(), m, out.data());
  EXPECT_EQ(op->last_schedule(), latency ? Kind::kLatency : Kind::kStaged);
  for (int g = 0; g < W; ++g)
    EXPECT_EQ(out[static_cast<std::size_t>(g) * 64 * 4 + 7], static_cast<float>(g + 1))
        << "rank " << g << "'s block";
}

TEST_F(ScheduleTest, A2aGemmDecodeGathersAndPrefillIsInPlace) {
  A2aGemmOptions o;
  o.max_m = 512 * W, o.n = 256, o.k = 64;
  auto op = ops::make_op<detail::A2aGemmImpl>(ctx.impl(), o);
  // Decode: a block (8 rows) shorter than the weight is wide: gathered for one GEMM (alone:
  // nothing to gather, in place).
  const A2aKind decode = op->plan(ops::Path::kFused, call_of(8 * W)).kind;
  EXPECT_EQ(decode, W > 1 ? A2aKind::kGather : A2aKind::kInPlace);
  // Prefill, a block taller than the weight is wide: each block in place as it lands.
  EXPECT_EQ(op->plan(ops::Path::kFused, call_of(512 * W)).kind, A2aKind::kInPlace);
  // The benchmark paths take the fused call's kind (gemm-only reads where comm-only left the
  // rows); only a fused call offloads.
  const detail::A2aGemmImpl::Schedule comm = op->plan(ops::Path::kCommOnly, call_of(8 * W));
  EXPECT_EQ(comm.kind, decode);
  EXPECT_EQ(comm.path, ops::Path::kCommOnly);
  EXPECT_FALSE(comm.offload);
  EXPECT_FALSE(op->plan(ops::Path::kFused, call_of(512 * W)).offload);  // the setting is off

  const int64_t m = 8 * W;
  Bytes input = random_tensor(DType::kFloat32, static_cast<std::size_t>(m * o.k), 5);
  Bytes weight = random_tensor(DType::kFloat32, static_cast<std::size_t>(o.n * o.k), 6);
  std::vector<float> out(static_cast<std::size_t>(m * o.n));
  op->forward(input.data(), m, weight.data(), nullptr, out.data(), nullptr);
  EXPECT_EQ(op->last_schedule().kind, decode);
  EXPECT_EQ(op->last_schedule().path, ops::Path::kFused);
}

TEST_F(ScheduleTest, UlyssesAcrossHostsGoesBySource) {
  A2aTransposeGemmOptions o;
  o.max_bs = 1, o.max_seq = 2048 * W, o.nheads = 2 * W, o.head_dim = 8, o.n = 64;
  auto op = ops::make_op<detail::A2aTransposeGemmImpl>(ctx.impl(), o);
  // Across hosts the GEMM is split along K by source; on one host row tiles.
  const UlyssesKind kind = hosts > 1 ? UlyssesKind::kBySource : UlyssesKind::kTiles;
  // Decode: one row a rank, one tile.
  const detail::A2aTransposeGemmImpl::Schedule decode = op->plan(ops::Path::kFused, 1, W);
  EXPECT_EQ(decode.kind, kind);
  EXPECT_EQ(decode.tile, 256);
  // Prefill: 2048 rows a rank in four tiles.
  const detail::A2aTransposeGemmImpl::Schedule prefill = op->plan(ops::Path::kFused, 1, 2048 * W);
  EXPECT_EQ(prefill.kind, kind);
  EXPECT_EQ(prefill.tile, 512);
  EXPECT_FALSE(prefill.offload);  // the setting is off
  // gemm-only makes the fused call's GEMM calls; comm-only is kTiles' exchange.
  EXPECT_EQ(op->plan(ops::Path::kGemmOnly, 1, 2048 * W).kind, kind);
  EXPECT_EQ(op->plan(ops::Path::kCommOnly, 1, 2048 * W).kind, UlyssesKind::kTiles);

  // A real decode call runs the planned schedule. input [bs, nheads/W, seq, head_dim].
  const std::size_t in_count = static_cast<std::size_t>(2 * W * 8);
  Bytes input = random_tensor(DType::kFloat32, in_count, 7);
  Bytes weight = random_tensor(DType::kFloat32, static_cast<std::size_t>(o.n * 2 * W * 8), 8);
  std::vector<float> out(static_cast<std::size_t>(o.n));
  op->forward(input.data(), 1, W, weight.data(), nullptr, out.data(), nullptr);
  EXPECT_EQ(op->last_schedule().kind, decode.kind);
  EXPECT_EQ(op->last_schedule().tile, decode.tile);

  // GemmA2aTranspose has one order of steps: the same schedule at every size; copy offload off.
  GemmA2aTransposeOptions g;
  g.max_bs = 1, g.max_seq = 64 * W, g.hidden = 16, g.nheads = 2 * W, g.head_dim = 8;
  auto before = ops::make_op<detail::GemmA2aTransposeImpl>(ctx.impl(), g);
  EXPECT_FALSE(before->plan(ops::Path::kFused).offload);
  EXPECT_EQ(before->plan(ops::Path::kGemmOnly).path, ops::Path::kGemmOnly);
  Bytes x = random_tensor(DType::kFloat32, static_cast<std::size_t>(64 * g.hidden), 9);
  Bytes w = random_tensor(DType::kFloat32, static_cast<std::size_t>(2 * W * 8 * g.hidden), 10);
  std::vector<float> y(static_cast<std::size_t>(64 * W * 2 * 8));
  before->forward_gemm_only(x.data(), 1, 64 * W, w.data(), nullptr);
  EXPECT_EQ(before->last_schedule().path, ops::Path::kGemmOnly);
  before->forward(x.data(), 1, 64 * W, w.data(), nullptr, y.data());
  EXPECT_EQ(before->last_schedule().path, ops::Path::kFused);
  EXPECT_FALSE(before->last_schedule().offload);
}

TEST_F(ScheduleTest, MoeTpDecodeIsWholeAndPrefillGoesRankByRank) {
  // Two local experts: rank by rank from 2 · 128 rows per rank (MoeTpRouting::by_rank).
  const int64_t decode_T = 8 * W, prefill_T = 256 * W;
  auto ag = ops::make_op<detail::AgScatterGroupedGemmImpl>(ctx.impl(), moe_options(prefill_T));
  EXPECT_EQ(ag->plan(ops::Path::kFused, decode_T).kind, MoeKind::kAllRows);
  EXPECT_EQ(ag->plan(ops::Path::kFused, prefill_T).kind, MoeKind::kByRank);
  EXPECT_EQ(ag->plan(ops::Path::kFused, prefill_T - 1).kind, MoeKind::kAllRows);
  EXPECT_EQ(ag->plan(ops::Path::kGemmOnly, prefill_T).kind, MoeKind::kByRank);
  auto rs = ops::make_op<detail::GroupedGemmGatherRsImpl>(ctx.impl(), moe_options(prefill_T));
  EXPECT_EQ(rs->plan(ops::Path::kFused, decode_T).kind, MoeKind::kAllRows);
  EXPECT_EQ(rs->plan(ops::Path::kFused, prefill_T).kind, MoeKind::kByRank);
  EXPECT_EQ(rs->plan(ops::Path::kGemmOnly, prefill_T).kind, MoeKind::kByRank);

  // Real calls of both sizes run what plan() says (every slot is routed: rows = T).
  for (const int64_t T : {decode_T, prefill_T}) {
    const MoeLayout rt = moe_routing(T);
    const int64_t per = T / W;
    Bytes tokens = random_tensor(DType::kFloat32, static_cast<std::size_t>(per * 16), 11);
    Bytes w1 = random_tensor(DType::kFloat32, static_cast<std::size_t>(2 * 16 * 16), 12);
    std::vector<float> h(static_cast<std::size_t>(T * 16));
    ag->forward(tokens.data(), T, rt.expert_counts.data(), rt.scatter_index.data(), w1.data(),
                nullptr, h.data(), nullptr);
    EXPECT_EQ(ag->last_schedule().kind, T == prefill_T ? MoeKind::kByRank : MoeKind::kAllRows)
        << "T=" << T;
    std::vector<float> out(static_cast<std::size_t>(per * 16));
    std::vector<float> weights(static_cast<std::size_t>(T), 1.0f);
    rs->forward(h.data(), T, rt.expert_counts.data(), rt.scatter_index.data(), w1.data(),
                weights.data(), out.data());
    EXPECT_EQ(rs->last_schedule().kind, T == prefill_T ? MoeKind::kByRank : MoeKind::kAllRows)
        << "T=" << T;
  }
}

}  // namespace
}  // namespace fluxcpp::test
