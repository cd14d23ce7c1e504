// AgScatterGroupedGemm (MoE layer 0 under TP) against the unfused reference: MPI_Allgather, a
// plain gather loop by scatter_index, one cblas GEMM per local expert
// (tests/support/moe_tp_reference.hpp). Exact data (multiples of 1/8: every sum is exact) is
// compared bit for bit, random data within a tolerance scaled with hidden. Every dtype pair,
// ep_size in {1, 2, W} (shapes illegal at the world size are skipped with a message), E in
// {W, 32}, topk in {1, 5}, random / skewed / empty-expert routings, stable and shuffled
// scatter_index, both weight layouts, 200 calls on one op, FLUX's layer-0 shape scaled down by 8,
// and bad or disagreeing arguments (INVALID_ARGUMENT on every rank, the op usable afterwards).
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

// One forward of `op` checked against the reference; `seed` makes the data (per rank) and the
// routing (shared).
void check_forward(AgScatterGroupedGemm& op, const Case& c, uint64_t seed, bool gathered_too) {
  const int W = world_size(), r = world_rank();
  const Routing rt = make_routing(c.T, c.K, c.E, c.kind, c.stable, seed);
  const TpPlace pl = tp_place(rt, c.ep, W, r);
  const int64_t H = c.p.k, F = c.p.n, per = c.T / W;
  const uint64_t s = seed_of(r, static_cast<int>(seed % 1000), 1);
  const Bytes input = c.exact ? exact_tensor(c.p.in, static_cast<std::size_t>(per * H), s)
                              : random_tensor(c.p.in, static_cast<std::size_t>(per * H), s);
  // Each rank its own weight shard.
  const std::size_t wn = static_cast<std::size_t>(pl.L * F * H);
  const Bytes weight = c.exact ? exact_tensor(c.p.in, wn, s + 1) : random_tensor(c.p.in, wn, s + 1);
  std::vector<float> scale;
  if (c.scale)
    for (int64_t l = 0; l < pl.L; ++l)
      scale.push_back(c.exact ? static_cast<float>(1 << (l % 3))
                              : 0.5f + 0.01f * static_cast<float>(l));
  Bytes X;
  const Reference ref = layer0_reference(c.p, rt, pl, input, weight, scale, &X);
  Bytes out = poisoned_output(c.p.out, static_cast<std::size_t>(pl.rows * F));
  Bytes gathered(gathered_too ? X.size() : 0);
  op.forward(input.data(), c.T, rt.splits.data(), rt.scatter.data(), weight.data(),
             scale.empty() ? nullptr : scale.data(), out.data(),
             gathered_too ? gathered.data() : nullptr);
  const std::string what = describe(c);
  if (c.exact)
    expect_same_bits(rounded(ref, c.p.out), out, c.p.out, F, what);
  else
    expect_close(ref, out, c.p.out, pl.rows, F, what);
  expect_untouched(out, static_cast<std::size_t>(pl.rows * F) * dtype_size(c.p.out), what);
  if (gathered_too) expect_same_bits(X, gathered, c.p.in, H, what + " gathered_input", "token");
}

const std::pair<DType, DType> kPairs[] = {{DType::kFloat32, DType::kFloat32},
                                          {DType::kFloat64, DType::kFloat64},
                                          {DType::kBFloat16, DType::kBFloat16},
                                          {DType::kBFloat16, DType::kFloat32}};

class AgScatterTest : public MpiTest,
                      public ::testing::WithParamInterface<std::pair<DType, DType>> {};

TEST_P(AgScatterTest, MatchesUnfused) {
  const auto [in, out] = GetParam();
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  uint64_t seed = 1000;
  for (int64_t E : {static_cast<int64_t>(W), int64_t{32}})
    for (int64_t ep : {int64_t{1}, int64_t{2}, static_cast<int64_t>(W)}) {
      if (ep == 2 && W == 2 && ep == W) continue;  // the same case as ep = W
      if (ep == W && W == 1) continue;             // the same case as ep = 1
      if (!legal(E, ep, "E=" + std::to_string(E) + " ep=" + std::to_string(ep))) continue;
      for (int64_t K : {int64_t{1}, int64_t{5}}) {
        const int64_t T = 12 * W;
        const bool trans = (K + E) % 2 == 0;
        const Problem p{in, out, 40, 48, trans};
        Case base{p, T, K, E, ep, RouteKind::kRandom, true, true, false};
        AgScatterGroupedGemm op(ctx, options_of(base, 16 * W));
        int i = 0;
        for (RouteKind kind : {RouteKind::kRandom, RouteKind::kSkewed, RouteKind::kEmptyExperts})
          for (bool stable : {true, false}) {
            Case c = base;
            c.kind = kind;
            c.stable = stable;
            c.exact = i % 2 == 0;
            c.scale = i % 3 == 1;
            check_forward(op, c, ++seed, i == 0);
            ++i;
          }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Pairs, AgScatterTest, ::testing::ValuesIn(kPairs), pair_test_name);

// 200 calls on one op: token counts, routings and data change every call.
TEST_F(MpiTest, AgScatterTwoHundredCalls) {
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t ep = W % 2 == 0 ? 2 : 1;
  Case base{{DType::kFloat32, DType::kFloat32, 24, 32, false},
            0,
            5,
            32,
            ep,
            RouteKind::kRandom,
            true,
            true,
            false};
  AgScatterGroupedGemm op(ctx, options_of(base, 8 * W));
  for (int call = 0; call < 200; ++call) {
    Case c = base;
    c.T = (call % 8 + 1) * W;
    c.kind = static_cast<RouteKind>(call % 3);
    c.stable = call % 2 == 0;
    c.exact = call % 4 != 3;
    check_forward(op, c, 50000 + call, call % 50 == 0);
    if (::testing::Test::HasFailure()) break;
  }
}

// Enough rows per local expert and source (>= 128) that the op computes source by source (own
// tokens first, then each block as it lands; across hosts in pieces); E = W keeps L small.
TEST_F(MpiTest, AgScatterPipelined) {
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  uint64_t seed = 3000;
  for (int64_t ep : {int64_t{1}, static_cast<int64_t>(W)})
    for (DType in : {DType::kFloat32, DType::kBFloat16}) {
      if (ep == W && W == 1 && in == DType::kBFloat16) continue;
      Case c{{in, in, 16, 32, ep != 1}, 128 * W, 5, W, ep, RouteKind::kRandom, true, true, true};
      AgScatterGroupedGemm op(ctx, options_of(c, 128 * W));
      for (RouteKind kind : {RouteKind::kRandom, RouteKind::kSkewed})
        for (bool stable : {true, false}) {
          c.kind = kind;
          c.stable = stable;
          c.exact = !c.exact;
          check_forward(op, c, ++seed, stable);
        }
    }
}

// FLUX's layer-0 test shape (B=2, S=4096, H=8192, ffn=8192, topk=5, E=32) scaled down by 8:
// T = 1024, hidden 1024, ffn 1024 split over the tp ranks.
TEST_F(MpiTest, AgScatterFluxShape) {
  const int W = world_size();
  if (1024 % W != 0) {  // T = 1024 tokens and ffn = 1024 must split over the ranks
    if (world_rank() == 0)
      std::printf("[ skipped  ] flux shape: T=1024 is not divisible by W=%d\n", W);
    return;
  }
  Context ctx(MPI_COMM_WORLD, test_options(120.0));
  for (int64_t ep : {int64_t{1}, static_cast<int64_t>(W)}) {
    if (ep == W && W == 1) continue;
    const int64_t tp = W / ep;
    Case c{{DType::kFloat32, DType::kFloat32, 1024 / tp, 1024, false},
           1024,
           5,
           32,
           ep,
           RouteKind::kRandom,
           true,
           false,
           false};
    if (!legal(c.E, ep, "flux shape ep=" + std::to_string(ep))) continue;
    AgScatterGroupedGemm op(ctx, options_of(c, 1024));
    check_forward(op, c, 77, true);
  }
}

// T = 0 on every rank is a no-op (nothing written); a zero-row rank still takes part.
TEST_F(MpiTest, AgScatterEmpty) {
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
         false};
  AgScatterGroupedGemm op(ctx, options_of(c, 4 * W));
  std::vector<int64_t> splits(static_cast<std::size_t>(W), 0);
  op.forward(nullptr, 0, splits.data(), nullptr, nullptr, nullptr, nullptr, nullptr);
  // Every slot unrouted: no rows anywhere, the gathered input still arrives.
  const int64_t T = 2 * W;
  std::vector<int32_t> scatter(static_cast<std::size_t>(T * 2), -1);
  const Bytes input = random_tensor(DType::kFloat32, 2 * 8, seed_of(world_rank(), 0, 5));
  Bytes gathered(static_cast<std::size_t>(T * 8 * 4));
  op.forward(input.data(), T, splits.data(), scatter.data(), nullptr, nullptr, nullptr,
             gathered.data());
  expect_same_bits(mpi_allgather(input, 2, 8 * 4), gathered, DType::kFloat32, 8, "gathered");
}

// Bad arguments on one rank, and routings that differ between ranks: INVALID_ARGUMENT on every
// rank, naming the op and the argument; the op stays usable.
TEST_F(MpiTest, AgScatterBadInput) {
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
         false};
  AgScatterGroupedGemm op(ctx, options_of(c, 8 * W));
  const Routing rt = make_routing(c.T, c.K, c.E, c.kind, true, 9);
  const TpPlace pl = tp_place(rt, 1, W, r);
  const Bytes input = exact_tensor(DType::kFloat32, static_cast<std::size_t>(4 * 16), 3);
  const Bytes weight = exact_tensor(DType::kFloat32, static_cast<std::size_t>(c.E * 16 * 16), 4);
  Bytes out(static_cast<std::size_t>(std::max<int64_t>(pl.rows, 1) * 16 * 4));
  const int bad = W - 1;  // the rank that passes the bad argument
  auto run = [&](std::vector<int64_t> splits, std::vector<int32_t> scatter, int64_t T,
                 const void* w, std::vector<std::string> needles, const std::string& what) {
    expect_error(
        [&] { op.forward(input.data(), T, splits.data(), scatter.data(), w, nullptr, out.data()); },
        Errc::kInvalidArgument, std::move(needles), what);
  };
  {  // splits that differ on one rank (a valid routing of its own)
    std::vector<int64_t> s = rt.splits;
    std::vector<int32_t> sc = rt.scatter;
    if (r == bad && W > 1) {
      const Routing other = make_routing(c.T, c.K, c.E, c.kind, true, 10);
      s = other.splits;
      sc = other.scatter;
    }
    if (W > 1)
      run(s, sc, c.T, weight.data(), {"ag_scatter_grouped_gemm", "routing"}, "disagreeing splits");
  }
  {  // a scatter_index that differs on one rank (shuffled: same splits)
    const std::vector<int32_t> shuffled = make_routing(c.T, c.K, c.E, c.kind, false, 9).scatter;
    if (W > 1 && shuffled != rt.scatter)  // the same decision on every rank
      run(rt.splits, r == bad ? shuffled : rt.scatter, c.T, weight.data(), {"routing"},
          "disagreeing scatter_index");
  }
  {  // a row named twice
    std::vector<int32_t> sc = rt.scatter;
    if (r == bad) {
      int first = -1;
      for (auto& v : sc)
        if (v >= 0) {
          if (first < 0) {
            first = v;
          } else {
            v = first;
            break;
          }
        }
    }
    run(rt.splits, sc, c.T, weight.data(), {"scatter_index", "twice"}, "duplicate row");
  }
  {  // splits adding up past T·K
    std::vector<int64_t> s = rt.splits;
    if (r == bad) s[0] += c.T * c.K;
    run(s, rt.scatter, c.T, weight.data(), {"splits[0]"}, "splits past T*K");
  }
  {  // a value out of range
    std::vector<int32_t> sc = rt.scatter;
    if (r == bad) sc[0] = static_cast<int32_t>(rt.M + 5);
    run(rt.splits, sc, c.T, weight.data(), {"scatter_index[0][0]"}, "index out of range");
  }
  // num_tokens not divisible by W, above max_tokens.
  if (W > 1) run(rt.splits, rt.scatter, c.T + 1, weight.data(), {"not divisible"}, "T % W");
  run(rt.splits, rt.scatter, 16 * W, weight.data(), {"max_m"}, "T > max_tokens");
  // NULL weight on a rank that has rows.
  if (tp_place(rt, 1, W, bad).rows > 0)
    run(rt.splits, rt.scatter, c.T, r == bad ? nullptr : weight.data(), {"weight is NULL"},
        "NULL weight");
  // Still usable: a good call.
  check_forward(op, c, 9, false);
  // Create: ep_size that does not divide the world / E.
  MoeTpOptions o = options_of(c, 8 * W);
  o.ep_size = W + 1;
  expect_error([&] { AgScatterGroupedGemm bad_op(ctx, o); }, Errc::kInvalidArgument, {"ep_size"},
               "ep_size");
}

}  // namespace
}  // namespace fluxcpp::test
