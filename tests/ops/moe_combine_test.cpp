// MoeCombine against the unfused reference (the rows travel back with MPI_Alltoallv, a plain
// k-ordered loop sums them: product rounded to the accumulator type, then added — this file is
// compiled without contraction), bit for bit, for every dtype pair, with and without weights;
// the round trip combine(dispatch(x)) = x × (routed slots) and x·Σw on exact values; 200 calls
// with changing routing; bad input on any rank fails every rank and leaves the op usable.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "moe_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// R_r and the per-source counts of a routing (through the dispatch reference, rows of one byte).
DispatchRef counts_of(const Routing& rt, int64_t E, int64_t K) {
  return reference_dispatch(Bytes(static_cast<std::size_t>(rt.T), 0), 1, rt, E, K);
}

// One combine of random rows against the reference; twice, the second must give the same bits.
bool check_call(MoeCombine& op, const Routing& rt, bool weighted, int call,
                const std::string& what) {
  const MoeCombineOptions& o = op.options();
  const DType in = o.input_dtype, out = o.output_dtype;
  const DispatchRef ref = counts_of(rt, o.num_experts, o.topk);
  const Bytes y = spread_tensor(in, static_cast<std::size_t>(ref.rows * o.hidden),
                                seed_of(world_rank(), call, 11));
  const Bytes want =
      reference_combine(y, in, out, o.hidden, rt, ref, o.num_experts, o.topk, weighted);
  const std::size_t bytes = static_cast<std::size_t>(rt.T * o.hidden) * dtype_size(out);
  bool ok = true;  // both repetitions run on every rank whatever happens (they are collective)
  for (int rep = 0; rep < 2; ++rep) {
    Bytes got(bytes + 32, kPoison);
    op.forward({y.data(), ref.rows, rt.T, rt.ids.data(), weighted ? rt.weights.data() : nullptr},
               got.data());
    for (std::size_t i = 0; i < bytes; ++i)
      if (got[i] != want[i]) {
        const std::size_t el = i / dtype_size(out);
        ADD_FAILURE() << what << ": rank " << world_rank() << ": token "
                      << el / static_cast<std::size_t>(o.hidden) << " element "
                      << el % static_cast<std::size_t>(o.hidden) << ": got "
                      << load(got.data(), out, el) << ", expected " << load(want.data(), out, el)
                      << " (repetition " << rep << ")";
        ok = false;
        break;
      }
    if (!std::all_of(got.begin() + bytes, got.end(),
                     [](unsigned char b) { return b == kPoison; })) {
      ADD_FAILURE() << what << ": rank " << world_rank() << ": wrote past the output";
      ok = false;
    }
  }
  return !any_rank(!ok);  // the same on every rank, so callers stop together
}

struct Case {
  int e_mode;
  int64_t topk;
  Route route;
  DType in, out;
  bool weighted;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int m = 0; m < 3; ++m)
    for (int64_t k : {1, 2, 6})
      for (Route p : {Route::kUniform, Route::kSkewed, Route::kZeroRank})
        v.push_back({m, k, p, DType::kFloat32, DType::kFloat32, true});
  for (bool w : {false, true}) {
    if (!w) v.push_back({1, 6, Route::kSkewed, DType::kFloat32, DType::kFloat32, false});
    v.push_back({1, 6, Route::kSkewed, DType::kBFloat16, DType::kBFloat16, w});
    v.push_back({1, 2, Route::kUniform, DType::kBFloat16, DType::kFloat32, w});
    v.push_back({2, 6, Route::kZeroRank, DType::kFloat64, DType::kFloat64, w});
  }
  return v;
}

class MoeCombineTest : public MoeCaseTest<Case> {};

TEST_P(MoeCombineTest, MatchesKOrderedLoop) {
  const Case c = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t hidden = 36, max_tokens = 40;
  MoeCombine op(ctx, {max_tokens, hidden, c.topk, E_, 0, c.in, c.out});
  for (int call = 0; call < 3; ++call) {
    const Routing rt =
        make_routing(c.route, world_rank(), world_size(), E_, c.topk, max_tokens, call);
    if (!check_call(op, rt, c.weighted, call, "call " + std::to_string(call))) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeCombineTest, ::testing::ValuesIn(cases()), [](const auto& i) {
  const Case& c = i.param;
  std::ostringstream s;
  s << "E" << c.e_mode << "_k" << c.topk << "_" << route_name(c.route) << "_" << dtype_name(c.in)
    << "_" << dtype_name(c.out) << (c.weighted ? "_w" : "") << "_" << i.index;
  return s.str();
});

// combine(dispatch(x)) on exact values (multiples of 1/4, weights multiples of 1/8): x × the
// token's routed slots without weights, x·Σw with them; 200 calls with changing routing.
class MoeRoundTrip : public MpiTest {};
TEST_F(MoeRoundTrip, CombineOfDispatchIsScaledInput) {
  const int W = world_size(), r = world_rank();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t hidden = 10, max_tokens = 24, K = 6, E = 4 * W;
  MoeDispatch dispatch(ctx, {max_tokens, hidden, K, E, 0, DType::kFloat32});
  MoeCombine combine(ctx, {max_tokens, hidden, K, E, 0, DType::kFloat32, DType::kFloat32});
  const int64_t cap = dispatch.options().max_recv_rows;
  std::vector<float> recv(static_cast<std::size_t>(cap * hidden));
  std::vector<int64_t> counts(static_cast<std::size_t>(E / W));
  const Route routes[3] = {Route::kUniform, Route::kSkewed, Route::kZeroRank};
  for (int call = 0; call < 200; ++call) {
    const Routing rt = make_routing(routes[call % 3], r, W, E, K, max_tokens, call);
    std::vector<float> x(static_cast<std::size_t>(rt.T * hidden));
    uint64_t s = seed_of(r, call, 5);
    for (float& v : x) v = static_cast<float>(static_cast<int>(splitmix(s) % 33) - 16) / 4.0f;
    const bool weighted = call % 2 == 1;
    const float* w = weighted ? rt.weights.data() : nullptr;
    const int64_t R = dispatch.forward({x.data(), rt.T, rt.ids.data(), w},
                                       {recv.data(), nullptr, nullptr, counts.data()});
    std::vector<float> out(static_cast<std::size_t>(rt.T * hidden), -99.0f);
    combine.forward({recv.data(), R, rt.T, rt.ids.data(), w}, out.data());
    bool ok = true;
    for (int64_t t = 0; t < rt.T && ok; ++t) {
      double scale = 0;
      for (int64_t k = 0; k < K; ++k)
        if (rt.ids[t * K + k] >= 0) scale += weighted ? rt.weights[t * K + k] : 1.0;
      for (int64_t h = 0; h < hidden && ok; ++h) {
        const double want = x[t * hidden + h] * scale;
        if (out[t * hidden + h] != want) {
          ADD_FAILURE() << "call " << call << ": rank " << r << ": token " << t << " element " << h
                        << ": got " << out[t * hidden + h] << ", expected " << want;
          ok = false;
        }
      }
    }
    if (any_rank(!ok)) break;
  }
}

class MoeCombineBadInput : public MpiTest {};
TEST_F(MoeCombineBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  const int W = world_size(), r = world_rank(), last = W - 1;
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t hidden = 8, max_tokens = 16, K = 2, E = 2 * W;
  MoeCombine op(ctx, {max_tokens, hidden, K, E, 0, DType::kFloat32, DType::kFloat32});
  const Routing rt = make_routing(Route::kUniform, r, W, E, K, max_tokens, 4);
  const DispatchRef ref = counts_of(rt, E, K);
  const Bytes y(static_cast<std::size_t>(op.options().max_recv_rows * hidden) * 4, 0);
  std::vector<float> out(static_cast<std::size_t>(max_tokens * hidden));
  int call = 0;
  auto good = [&] {
    const Routing g = make_routing(Route::kSkewed, r, W, E, K, max_tokens, 500 + call);
    check_call(op, g, true, 500 + call++, "good call after an error");
  };
  expect_error(
      [&] {
        op.forward({y.data(), r == last ? ref.rows + 1 : ref.rows, rt.T, rt.ids.data(), nullptr},
                   out.data());
      },
      Errc::kInvalidArgument,
      {"moe_combine", "rank " + std::to_string(last) + " passed num_rows=", "receives"},
      "num_rows mismatch");
  good();
  Routing bad = rt;
  if (r == last) bad.ids[0] = static_cast<int32_t>(E);
  expect_error(
      [&] {
        op.forward({y.data(), ref.rows, bad.T, bad.ids.data(), nullptr}, out.data());
      },
      Errc::kInvalidArgument, {"moe_combine", "topk_ids"}, "id out of range");
  good();
  expect_error(
      [&] {
        op.forward({y.data(), ref.rows, r == last ? max_tokens + 1 : rt.T, rt.ids.data(), nullptr},
                   out.data());
      },
      Errc::kInvalidArgument, {"moe_combine", "num_tokens"}, "num_tokens > max_tokens");
  good();
  expect_error(
      [&] {
        MoeCombine c(ctx, {max_tokens, hidden, K, E, 0, DType::kFloat32, DType::kBFloat16});
      },
      Errc::kInvalidArgument, {"moe_combine", "dtypes"}, "f32 -> bf16");
  expect_error(
      [&] {
        MoeCombine c(ctx, {int64_t{1} << 31, hidden, K, E, 0, DType::kFloat32, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"moe_combine", "INT32_MAX"}, "T·K overflows int32");
  good();
}

}  // namespace
}  // namespace fluxcpp::test
