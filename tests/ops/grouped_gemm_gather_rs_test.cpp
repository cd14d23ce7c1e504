// GroupedGemmGatherRs (MoE layer 1 under TP) against the unfused references
// (tests/support/moe_tp_reference.hpp): per-expert cblas, the weighted topk sum and the world
// reduce-scatter. With exact GEMM data (multiples of 1/8: every GEMM row is exact) and random
// routing weights (so every weighted product and sum rounds), the output is compared bit for bit
// with a reference that follows API.md's order exactly (k-ordered parts per source rank, summed
// in rank order from +0, rounded once); random data within a tolerance against a double
// reference through MPI_Reduce_scatter_block. Every dtype pair, ep_size in {1, 2, W} (illegal
// shapes skipped with a message), E in {W, 32}, topk in {1, 5}, skewed splits, empty experts,
// shuffled scatter_index, 200 calls, FLUX's shape scaled down by 8, run-to-run bit equality, and
// bad or disagreeing arguments.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "grouped_gemm_reference.hpp"
#include "moe_tp_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

struct Data {
  Routing rt;
  TpPlace pl;
  Bytes input, weight;
};

Data make_data(const Case& c, uint64_t seed) {
  const int W = world_size(), r = world_rank();
  Data d;
  d.rt = make_routing(c.T, c.K, c.E, c.kind, c.stable, seed);
  d.pl = tp_place(d.rt, c.ep, W, r);
  const int64_t H = c.p.n, F = c.p.k;
  const uint64_t s = seed_of(r, static_cast<int>(seed % 1000), 2);
  const auto in_n = static_cast<std::size_t>(d.pl.rows * F);
  const auto w_n = static_cast<std::size_t>(d.pl.L * H * F);
  d.input = c.exact ? exact_tensor(c.p.in, in_n, s) : random_tensor(c.p.in, in_n, s);
  d.weight = c.exact ? exact_tensor(c.p.in, w_n, s + 1) : random_tensor(c.p.in, w_n, s + 1);
  return d;
}

Bytes run_op(GroupedGemmGatherRs& op, const Case& c, const Data& d) {
  const int64_t per = c.T / world_size(), H = c.p.n;
  Bytes out = poisoned_output(c.p.out, static_cast<std::size_t>(per * H));
  op.forward(d.input.data(), c.T, d.rt.splits.data(), d.rt.scatter.data(), d.weight.data(),
             c.scale ? d.rt.weights.data() : nullptr, out.data());
  expect_untouched(out, static_cast<std::size_t>(per * H) * dtype_size(c.p.out), describe(c));
  return out;
}

void check_forward(GroupedGemmGatherRs& op, const Case& c, uint64_t seed, bool twice = false) {
  const Data d = make_data(c, seed);
  const int64_t per = c.T / world_size(), H = c.p.n;
  const Bytes out = run_op(op, c, d);
  const std::string what = describe(c);
  if (c.exact) {
    const Bytes want =
        c.p.in == DType::kFloat64
            ? layer1_contract_order<double>(c.p, d.rt, d.pl, d.input, d.weight, c.scale)
            : layer1_contract_order<float>(c.p, d.rt, d.pl, d.input, d.weight, c.scale);
    expect_same_bits(want, out, c.p.out, H, what + " (contract order)", "token");
  } else {
    const Reference ref = layer1_reference(c.p, d.rt, d.pl, d.input, d.weight, c.scale);
    expect_close(ref, out, c.p.out, per, H, what);
  }
  if (twice) {  // bitwise reproducible from call to call
    const Bytes again = run_op(op, c, d);
    expect_same_bits(Bytes(out.begin(), out.begin() + per * H * dtype_size(c.p.out)), again,
                     c.p.out, H, what + " (second call)", "token");
  }
}

const std::pair<DType, DType> kPairs[] = {{DType::kFloat32, DType::kFloat32},
                                          {DType::kFloat64, DType::kFloat64},
                                          {DType::kBFloat16, DType::kBFloat16},
                                          {DType::kBFloat16, DType::kFloat32}};

class GatherRsTest : public MpiTest,
                     public ::testing::WithParamInterface<std::pair<DType, DType>> {};

TEST_P(GatherRsTest, MatchesUnfused) {
  const auto [in, out] = GetParam();
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  uint64_t seed = 2000;
  for (int64_t E : {static_cast<int64_t>(W), int64_t{32}})
    for (int64_t ep : {int64_t{1}, int64_t{2}, static_cast<int64_t>(W)}) {
      if (ep == 2 && W == 2) continue;  // the same case as ep = W
      if (ep == W && W == 1) continue;  // the same case as ep = 1
      if (!legal(E, ep, "E=" + std::to_string(E) + " ep=" + std::to_string(ep))) continue;
      for (int64_t K : {int64_t{1}, int64_t{5}}) {
        const bool trans = (K + E) % 2 == 1;
        const Problem p{in, out, 48, 40, trans};  // n = hidden, k = ffn_shard
        Case base{p, 12 * W, K, E, ep, RouteKind::kRandom, true, true, true};
        GroupedGemmGatherRs op(ctx, options_of(base, 16 * W, /*layer1=*/true));
        int i = 0;
        for (RouteKind kind : {RouteKind::kRandom, RouteKind::kSkewed, RouteKind::kEmptyExperts})
          for (bool stable : {true, false}) {
            Case c = base;
            c.kind = kind;
            c.stable = stable;
            c.exact = i % 2 == 0;
            c.scale = i % 3 != 2;
            check_forward(op, c, ++seed, i == 1);
            ++i;
          }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Pairs, GatherRsTest, ::testing::ValuesIn(kPairs), pair_test_name);

// 200 calls on one op: token counts, routings and data change every call.
TEST_F(MpiTest, GatherRsTwoHundredCalls) {
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t ep = W % 2 == 0 ? 2 : 1;
  Case base{{DType::kFloat32, DType::kFloat32, 32, 24, false},
            0,
            5,
            32,
            ep,
            RouteKind::kRandom,
            true,
            true,
            true};
  GroupedGemmGatherRs op(ctx, options_of(base, 8 * W, true));
  for (int call = 0; call < 200; ++call) {
    Case c = base;
    c.T = (call % 8 + 1) * W;
    c.kind = static_cast<RouteKind>(call % 3);
    c.stable = call % 2 == 0;
    c.exact = call % 4 != 3;
    c.scale = call % 5 != 4;
    check_forward(op, c, 60000 + call);
    if (::testing::Test::HasFailure()) break;
  }
}

// Enough rows per local expert and destination (>= 128) that the op runs its GEMMs destination
// by destination, publishing each part as soon as it is done; E = W keeps L small.
TEST_F(MpiTest, GatherRsPipelined) {
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  uint64_t seed = 4000;
  for (int64_t ep : {int64_t{1}, static_cast<int64_t>(W)})
    for (DType in : {DType::kFloat32, DType::kFloat64}) {
      Case c{{in, in, 32, 16, ep != 1}, 128 * W, 5, W, ep, RouteKind::kRandom, true, true, true};
      GroupedGemmGatherRs op(ctx, options_of(c, 128 * W, true));
      for (RouteKind kind : {RouteKind::kRandom, RouteKind::kSkewed})
        for (bool stable : {true, false}) {
          c.kind = kind;
          c.stable = stable;
          c.exact = !c.exact;
          check_forward(op, c, ++seed, stable);
        }
    }
}

// FLUX's shape scaled down by 8 (T = 1024, hidden 1024, ffn 1024 over the tp ranks, E = 32,
// topk 5): exact GEMM data against the contract order, random data within the tolerance.
TEST_F(MpiTest, GatherRsFluxShape) {
  const int W = world_size();
  if (1024 % W != 0) {  // T = 1024 tokens and ffn = 1024 must split over the ranks
    if (world_rank() == 0)
      std::printf("[ skipped  ] flux shape: T=1024 is not divisible by W=%d\n", W);
    return;
  }
  Context ctx(MPI_COMM_WORLD, test_options(120.0));
  for (int64_t ep : {int64_t{1}, static_cast<int64_t>(W)}) {
    if (ep == W && W == 1) continue;
    if (!legal(32, ep, "flux shape ep=" + std::to_string(ep))) continue;
    const int64_t tp = W / ep;
    Case c{{DType::kFloat32, DType::kFloat32, 1024, 1024 / tp, false},
           1024,
           5,
           32,
           ep,
           RouteKind::kRandom,
           true,
           ep == 1,
           true};
    GroupedGemmGatherRs op(ctx, options_of(c, 1024, true));
    check_forward(op, c, 88, true);
  }
}

// T = 0 is a no-op; every slot unrouted gives +0 everywhere.
TEST_F(MpiTest, GatherRsEmpty) {
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  Case c{{DType::kFloat32, DType::kFloat32, 8, 8, false},
         0,
         2,
         W,
         W,
         RouteKind::kRandom,
         true,
         true,
         true};
  GroupedGemmGatherRs op(ctx, options_of(c, 4 * W, true));
  std::vector<int64_t> splits(static_cast<std::size_t>(W), 0);
  op.forward(nullptr, 0, splits.data(), nullptr, nullptr, nullptr, nullptr);
  std::vector<int32_t> scatter(static_cast<std::size_t>(2 * W * 2), -1);
  Bytes out = poisoned_output(DType::kFloat32, 2 * 8);
  op.forward(nullptr, 2 * W, splits.data(), scatter.data(), nullptr, nullptr, out.data());
  expect_same_bits(Bytes(2 * 8 * 4, 0), out, DType::kFloat32, 8, "unrouted");
}

// Bad arguments on one rank, routings and routing weights that differ between ranks:
// INVALID_ARGUMENT on every rank naming the op and the argument; the op stays usable.
TEST_F(MpiTest, GatherRsBadInput) {
  const int W = world_size(), r = world_rank();
  Context ctx(MPI_COMM_WORLD, test_options());
  Case c{{DType::kFloat32, DType::kFloat32, 16, 16, false},
         4 * W,
         2,
         2 * W,
         1,
         RouteKind::kRandom,
         true,
         true,
         true};
  GroupedGemmGatherRs op(ctx, options_of(c, 8 * W, true));
  const Data d = make_data(c, 9);
  Bytes out(static_cast<std::size_t>(4 * 16 * 4));
  const int bad = W - 1;
  auto run = [&](std::vector<int64_t> splits, std::vector<int32_t> scatter,
                 std::vector<float> weights, std::vector<std::string> needles,
                 const std::string& what) {
    expect_error(
        [&] {
          op.forward(d.input.data(), c.T, splits.data(), scatter.data(), d.weight.data(),
                     weights.data(), out.data());
        },
        Errc::kInvalidArgument, std::move(needles), what);
  };
  if (W > 1) {
    const Routing other = make_routing(c.T, c.K, c.E, c.kind, true, 10);
    run(r == bad ? other.splits : d.rt.splits, r == bad ? other.scatter : d.rt.scatter,
        d.rt.weights, {"grouped_gemm_gather_rs", "routing"}, "disagreeing splits");
    std::vector<float> w = d.rt.weights;
    // A routed slot's weight differs on one rank.
    for (std::size_t i = 0; i < w.size(); ++i)
      if (d.rt.scatter[i] >= 0) {
        if (r == bad) w[i] += 1.0f;
        break;
      }
    run(d.rt.splits, d.rt.scatter, w, {"routing_weights"}, "disagreeing routing weights");
    // An unrouted slot's weight is not read: differing there is fine.
    std::vector<float> w2 = d.rt.weights;
    for (std::size_t i = 0; i < w2.size(); ++i)
      if (d.rt.scatter[i] < 0 && r == bad) w2[i] = 1e9f;
    Bytes o2(out.size());
    op.forward(d.input.data(), c.T, d.rt.splits.data(), d.rt.scatter.data(), d.weight.data(),
               w2.data(), o2.data());
  }
  {
    std::vector<int32_t> sc = d.rt.scatter;
    if (r == bad)
      for (auto& v : sc)
        if (v >= 0) {
          v = -1;  // a row left uncovered
          break;
        }
    run(d.rt.splits, sc, d.rt.weights, {"scatter_index covers"}, "uncovered row");
  }
  {
    std::vector<int64_t> s = d.rt.splits;
    if (r == bad) s[1] = -1;
    run(s, d.rt.scatter, d.rt.weights, {"splits[1]=-1"}, "negative split");
  }
  check_forward(op, c, 9);
}

}  // namespace
}  // namespace fluxcpp::test
